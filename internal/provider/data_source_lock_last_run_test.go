package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestAccLockDataSource_lastRunFromTheLedger: last_run follows the ledger
// that holders write through the consul package (BeginRun, then
// FinishRunAndRelease), with every attempt in attempt_list (a lost one's
// reason, a timed_out one) and outcome "exhausted" once max_attempts
// attempts failed, as the controller counts it; it is null for a lock
// without a ledger and for a key no lock declares, and a corrupted ledger
// is an error naming the field.
func TestAccLockDataSource_lastRunFromTheLedger(t *testing.T) {
	ctx := context.Background()
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	key, ledgerKey, rawKey := p+"/nightly/.lock", reg+"/runs/nightly", p+"/raw/leader"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name     = "nightly"
  prefix   = "%s/nightly"
  run_once = { period = "24h" }
}

data "consullock_lock" "test" {
  key = consullock_lock.test.key
}

data "consullock_lock" "raw" {
  key = %q
}
`, p, rawKey)
	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: rawKey, Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().KV().Delete(rawKey, nil) })
	lastRun := func(check knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.consullock_lock.test", tfjsonpath.New("last_run"), check)
	}
	var session string
	var token, index uint64
	var started ledger.Ledger
	started1 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, reg+"/locks/nightly"),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					lastRun(knownvalue.Null()),
					statecheck.ExpectKnownValue("data.consullock_lock.raw", tfjsonpath.New("last_run"), knownvalue.Null()),
				},
			},
			{
				// A holder records attempt 1 before its command starts.
				PreConfig: func() {
					session = newHolderSession(t, "nightly-holder")
					acquire(t, key, session, `{"node":"worker-1"}`, lockmodel.LockFlagValue)
					token = kvPair(t, key).ModifyIndex
					d, err := ledger.Ledger{Lock: "nightly"}.Begin("2026-12-01T00:00:00Z",
						holder.Holder{Node: "worker-1", Session: session, FencingToken: token}, 3, started1)
					if err != nil {
						t.Fatal(err)
					}
					started = d.Ledger
					if index, err = store.New(client).BeginRun(ctx, store.LedgerWrite{Fence: store.Fence{Key: key, Session: session}, LedgerKey: ledgerKey, Ledger: started}); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					lastRun(knownvalue.ObjectExact(map[string]knownvalue.Check{
						"run_id": knownvalue.StringExact("2026-12-01T00:00:00Z"), "outcome": knownvalue.StringExact("running"),
						"node": knownvalue.StringExact("worker-1"), "fencing_token": knownvalue.NotNull(),
						"started": knownvalue.StringExact("2026-12-01T00:05:00Z"), "finished": knownvalue.Null(),
						"exit_code": knownvalue.Null(), "attempts": knownvalue.Int64Exact(1), "not_before": knownvalue.Null(),
						"attempt_list": knownvalue.ListExact([]knownvalue.Check{knownvalue.ObjectExact(map[string]knownvalue.Check{
							"attempt": knownvalue.Int64Exact(1), "outcome": knownvalue.StringExact("running"), "reason": knownvalue.Null(),
							"node": knownvalue.StringExact("worker-1"), "fencing_token": knownvalue.NotNull(),
							"started": knownvalue.StringExact("2026-12-01T00:05:00Z"), "finished": knownvalue.Null(), "exit_code": knownvalue.Null(),
							"released_by": knownvalue.Null(), "released_by_accessor": knownvalue.Null(),
						})}),
					})),
				},
			},
			{
				// It fails with exit 3; the outcome is recorded with the
				// release, and with retry_after 1m the next attempt's not_before.
				PreConfig: func() {
					done, err := started.FinishWith("2026-12-01T00:00:00Z", 1,
						ledger.AttemptResult{Outcome: ledger.RunFailed, ExitCode: func() *int { c := 3; return &c }()},
						ledger.AttemptPolicy{MaxAttempts: 3, RetryAfter: time.Minute}, started1.Add(time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					held := kvPair(t, key)
					if index, err = store.New(client).FinishRunAndRelease(ctx, store.RunRelease{
						LedgerWrite: store.LedgerWrite{Fence: store.Fence{Key: key, Session: session}, LedgerKey: ledgerKey, Index: index, Ledger: done},
						Flags:       held.Flags, Value: held.Value,
					}); err != nil {
						t.Fatal(err)
					}
					started = done
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					lastRun(knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"outcome": knownvalue.StringExact("failed"), "exit_code": knownvalue.Int64Exact(3),
						"finished": knownvalue.StringExact("2026-12-01T00:06:00Z"), "attempts": knownvalue.Int64Exact(1),
						"not_before": knownvalue.StringExact("2026-12-01T00:07:00Z"),
					})),
					statecheck.ExpectKnownValue("data.consullock_lock.test", tfjsonpath.New("held"), knownvalue.Bool(false)),
				},
			},
			{
				// Attempt 2 is lost, attempt 3 times out: 3 of 3, exhausted.
				PreConfig: func() {
					kill := 143
					for i, res := range []ledger.AttemptResult{
						{Outcome: ledger.RunLost, Reason: "session invalidated: node worker-2 failed"},
						{Outcome: ledger.RunTimedOut, ExitCode: &kill},
					} {
						n, at := i+2, started1.Add(time.Duration(i+2)*time.Hour)
						acquire(t, key, session, `{"node":"worker-2"}`, lockmodel.LockFlagValue)
						d, err := started.Begin("2026-12-01T00:00:00Z", holder.Holder{Node: "worker-2", Session: session, FencingToken: kvPair(t, key).ModifyIndex}, 3, at)
						if err != nil || d.Kind != ledger.BeginRun {
							t.Fatalf("begin attempt %d: %v %v", n, d.Kind, err)
						}
						w := store.LedgerWrite{Fence: store.Fence{Key: key, Session: session}, LedgerKey: ledgerKey, Index: index, Ledger: d.Ledger}
						if w.Index, err = store.New(client).BeginRun(ctx, w); err != nil {
							t.Fatal(err)
						}
						if w.Ledger, err = d.Ledger.FinishWith("2026-12-01T00:00:00Z", n, res, ledger.AttemptPolicy{MaxAttempts: 3}, at.Add(time.Minute)); err != nil {
							t.Fatal(err)
						}
						held := kvPair(t, key)
						if index, err = store.New(client).FinishRunAndRelease(ctx, store.RunRelease{LedgerWrite: w, Flags: held.Flags, Value: held.Value}); err != nil {
							t.Fatal(err)
						}
						started = w.Ledger
					}
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					lastRun(knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"outcome": knownvalue.StringExact("exhausted"), "attempts": knownvalue.Int64Exact(3), "exit_code": knownvalue.Int64Exact(143),
						"node": knownvalue.StringExact("worker-2"), "finished": knownvalue.StringExact("2026-12-01T03:06:00Z"),
						"attempt_list": knownvalue.ListExact([]knownvalue.Check{
							knownvalue.ObjectPartial(map[string]knownvalue.Check{"attempt": knownvalue.Int64Exact(1), "outcome": knownvalue.StringExact("failed"),
								"exit_code": knownvalue.Int64Exact(3), "reason": knownvalue.Null(), "node": knownvalue.StringExact("worker-1")}),
							knownvalue.ObjectPartial(map[string]knownvalue.Check{"attempt": knownvalue.Int64Exact(2), "outcome": knownvalue.StringExact("lost"),
								"exit_code": knownvalue.Null(), "reason": knownvalue.StringExact("session invalidated: node worker-2 failed"),
								"started": knownvalue.StringExact("2026-12-01T02:05:00Z"), "finished": knownvalue.StringExact("2026-12-01T02:06:00Z")}),
							knownvalue.ObjectPartial(map[string]knownvalue.Check{"attempt": knownvalue.Int64Exact(3), "outcome": knownvalue.StringExact("timed_out"),
								"exit_code": knownvalue.Int64Exact(143), "fencing_token": knownvalue.NotNull(), "released_by": knownvalue.Null()}),
						}),
					})),
				},
			},
			{
				// A hand-edited ledger is refused, naming the field.
				PreConfig: func() {
					pair := kvPair(t, ledgerKey)
					bad := regexp.MustCompile(`"exit_code":3`).ReplaceAll(pair.Value, []byte(`"exit_code":0`))
					if _, err := agent.Client().KV().Put(&api.KVPair{Key: ledgerKey, Value: bad}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config:      cfg,
				ExpectError: diagRE("Unreadable Run Ledger", `runs[0].attempts[0].exit_code: "0" is not allowed`),
			},
			{
				PreConfig: func() { _, _ = agent.Client().KV().Delete(ledgerKey, nil) },
				Config:    cfg,
			},
		},
	})
}
