package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// TestAccACLPolicy_runLedgersGrantExactlyTheNamedLedgers: run_ledgers = ["a"]
// renders key write on <registry_prefix>/runs/a and nothing else under the
// registry, known at plan and read back on import; with a token of that
// policy, real requests record a run of lock a (BeginRun, then
// FinishRunAndRelease) and are denied on lock b's ledger, although the
// token may hold lock b.
func TestAccACLPolicy_runLedgersGrantExactlyTheNamedLedgers(t *testing.T) {
	ctx := context.Background()
	name, prefix := aclTestNames(t)
	reg := prefix + "/registry"
	keyA, keyB := prefix+"/a/.lock", prefix+"/b/.lock"
	ledgerA, ledgerB := reg+"/runs/a", reg+"/runs/b"
	const addr = "consullock_acl_policy.p"
	config := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_acl_policy" "p" {
  name                  = %q
  lock_keys             = [%q, %q]
  run_ledgers           = ["a"]
  session_node_prefixes = [%q]
}
`, name, keyA, keyB, agent.NodeName)
	rules := fmt.Sprintf(`key %q {
  policy = "write"
}

key %q {
  policy = "write"
}

key %q {
  policy = "write"
}

session_prefix %q {
  policy = "write"
}
`, keyA, keyB, ledgerA, agent.NodeName)

	worker := func(s *terraform.State) error {
		tok, _, err := agent.Client().ACL().TokenCreate(&api.ACLToken{
			Description: "run ledger worker", Policies: []*api.ACLTokenPolicyLink{{Name: name}},
		}, nil)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _, _ = agent.Client().ACL().TokenDelete(tok.AccessorID, nil) })
		for _, k := range []string{keyA, keyB} {
			if _, err := agent.Client().KV().Put(&api.KVPair{Key: k, Flags: lockmodel.LockFlagValue}, nil); err != nil {
				return err
			}
			t.Cleanup(func() { _, _ = agent.Client().KV().Delete(k, nil) })
		}
		t.Cleanup(func() { _, _ = agent.Client().KV().DeleteTree(reg+"/", nil) })
		w := agent.ClientWithToken(tok.SecretID)
		c, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
		if err != nil {
			return err
		}
		session, _, err := w.Session().Create(&api.SessionEntry{Name: "worker", Node: agent.NodeName, LockDelay: time.Millisecond}, nil)
		if err != nil {
			return fmt.Errorf("worker session: %w", err)
		}
		t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(session, nil) })
		run := func(key, ledgerKey, lock string) (uint64, ledger.Ledger, error) {
			if ok, _, err := w.KV().Acquire(&api.KVPair{Key: key, Flags: lockmodel.LockFlagValue, Session: session}, nil); err != nil || !ok {
				return 0, ledger.Ledger{}, fmt.Errorf("worker acquiring %s: %v %v", key, ok, err)
			}
			d, err := ledger.Ledger{Lock: lock}.Begin("r1", holder.Holder{Node: agent.NodeName, Session: session, FencingToken: 1}, 3, time.Now())
			if err != nil {
				return 0, ledger.Ledger{}, err
			}
			index, err := store.New(c).BeginRun(ctx, store.LedgerWrite{Fence: store.Fence{Key: key, Session: session}, LedgerKey: ledgerKey, Ledger: d.Ledger})
			return index, d.Ledger, err
		}

		// Lock a: the start, then the outcome with the release.
		index, started, err := run(keyA, ledgerA, "a")
		if err != nil {
			return fmt.Errorf("worker BeginRun on lock a's ledger: %w", err)
		}
		done, err := started.Finish("r1", 1, ledger.RunSucceeded, new(int), time.Now())
		if err != nil {
			return err
		}
		if _, err := store.New(c).FinishRunAndRelease(ctx, store.RunRelease{
			LedgerWrite: store.LedgerWrite{Fence: store.Fence{Key: keyA, Session: session}, LedgerKey: ledgerA, Index: index, Ledger: done},
			Flags:       lockmodel.LockFlagValue,
		}); err != nil {
			return fmt.Errorf("worker FinishRunAndRelease on lock a: %w", err)
		}
		if l, _, err := store.New(c).ReadLedger(ctx, ledgerA, "a"); err != nil || l.Runs[0].Outcome != ledger.RunSucceeded {
			return fmt.Errorf("lock a's ledger after the run: %+v, %v", l, err)
		}

		// Lock b: the worker holds it, but may not write its ledger.
		if _, _, err := run(keyB, ledgerB, "b"); consul.KindOf(err) != consul.KindPermissionDenied {
			return fmt.Errorf("worker BeginRun on lock b's ledger: %v (kind %s); want permission denied", err, consul.KindOf(err))
		}
		_, err = w.KV().Put(&api.KVPair{Key: ledgerB, Value: []byte("{}")}, nil)
		var se api.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusForbidden {
			return fmt.Errorf("worker writing lock b's ledger directly: %v; want HTTP 403", err)
		}
		if pair, _, _ := agent.Client().KV().Get(ledgerB, nil); pair != nil {
			return fmt.Errorf("lock b's ledger was written: %s", pair.Value)
		}
		return nil
	}

	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(rules))},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_ledgers"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact("a")})),
				},
				Check: tfresource.ComposeTestCheckFunc(func(*terraform.State) error {
					if live := livePolicy(t, name).Rules; live != rules {
						return fmt.Errorf("live rules:\n%s\nwant\n%s", live, rules)
					}
					return nil
				}, worker),
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
		},
	})
}
