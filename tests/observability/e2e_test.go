package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is the real Consul agent (ACLs on, default deny) of this package.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	code := testenv.RunWithAgent(m, &agent)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func httpGet(url string) ([]byte, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	return b, err
}

// TestAlertsFireE2E: a real Prometheus (built from the pinned module)
// scrapes a real controller watching a real agent and evaluates the shipped
// rules. The controller repairs (mode repair) with a token that may read
// everything and write nothing. The faults, after a first scrape:
//   - the holder of a lock declared always_held goes away and nobody takes
//     over (ConsulLockUnheld once its worst_case_gap has passed; never for a
//     lock not declared always_held); a holder keeps a lock past max_hold
//     (ConsulLockHolderPastMaxHold);
//   - a holder's session breaks its lock's profile, the first violation
//     (ConsulLockViolations); a declared ACL policy is widened and the
//     controller's repair is refused, and retried (ConsulLockRepairErrors);
//   - run once: a ledger whose last success is older than the period plus
//     grace, by period and by schedule, and a job that has only failed
//     since it was declared (ConsulLockRunMissed); a run whose first and
//     only allowed attempt fails (ConsulLockRunAttemptsExhausted); a job
//     that never ran misses a slot (ConsulLockSlotMissed); a lock paused
//     two days ago (ConsulLockPausedTooLong).
//
// All must be seen firing through Prometheus's HTTP API. The scrapes the
// test took itself before and after the faults also go to promtool
// (firstEvaluation): each counter alert fires at the first evaluation that
// sees its first event, from what the controller really exports. The
// controller's /metrics also passes `promtool check metrics`.
func TestAlertsFireE2E(t *testing.T) {
	promtool := tool(t, "PROMTOOL_BIN", "promtool")
	c := agent.Client()
	base := testenv.UniquePrefix(t.Name())
	registry, prefix := base+"/registry", base+"/locks"
	t.Cleanup(func() { _, _ = c.KV().DeleteTree(base+"/", nil) })
	put := func(key string, v []byte, flags uint64) {
		t.Helper()
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: v, Flags: flags}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// worst_case_gap = 2 x 10s + 0s = 20s, the shortest Consul allows.
	prof, err := record.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "fast", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, "fast"), prof, 0)
	setup := time.Now()
	// skipped's next slot (period 1m, starting_deadline 1s) is 25s away:
	// after the first scrape, and no runner will start it.
	nextSlot := setup.Truncate(time.Second).Add(25 * time.Second)
	// fresh was declared 80s ago and its runs since have failed: no success
	// within one period plus grace (90s) of its declaration.
	freshSince := setup.Add(-80 * time.Second).Truncate(time.Second)
	locks := map[string]lockmodel.Lock{}
	for _, l := range []lockmodel.Lock{
		{Name: "daemon", Prefix: prefix + "/daemon", SessionDefaults: "fast", AlwaysHeld: true},
		{Name: "report", Prefix: prefix + "/report", SessionDefaults: "fast", MaxHold: 3 * time.Second},
		// Never held and not declared always_held: unheld longer than
		// daemon, and ConsulLockUnheld must not fire for it.
		{Name: "idle", Prefix: prefix + "/idle", SessionDefaults: "fast"},
		// Its holder's session will have a longer TTL than the profile's.
		{Name: "strict", Prefix: prefix + "/strict", SessionDefaults: "fast"},
		// Run once: most ledgers are written with the faults.
		{Name: "nightly", Prefix: prefix + "/nightly", SessionDefaults: "fast", RunOnce: &ledger.RunOnce{Period: time.Minute}},
		{Name: "flaky", Prefix: prefix + "/flaky", SessionDefaults: "fast", RunOnce: &ledger.RunOnce{Period: time.Hour, MaxAttempts: 1}},
		{Name: "minutely", Prefix: prefix + "/minutely", SessionDefaults: "fast", RunOnce: &ledger.RunOnce{Schedule: "* * * * *"}},
		{Name: "fresh", Prefix: prefix + "/fresh", SessionDefaults: "fast", RunOnce: &ledger.RunOnce{Period: time.Minute, Since: freshSince}},
		{Name: "skipped", Prefix: prefix + "/skipped", SessionDefaults: "fast", RunOnce: &ledger.RunOnce{Period: time.Minute,
			Offset: time.Duration(nextSlot.Unix()%60) * time.Second, StartingDeadline: time.Second, Since: setup.Truncate(time.Second)}},
	} {
		rec, err := record.EncodeLockRecord(l)
		if err != nil {
			t.Fatal(err)
		}
		put(lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), rec, 0)
		n, _ := l.Normalize()
		put(n.Key, nil, n.Flags())
		locks[l.Name] = n
	}
	daemon, report, strict := locks["daemon"], locks["report"], locks["strict"]
	// fresh's slots since its declaration each have a failed run: none is
	// missed, none succeeded.
	var freshRuns []ledger.Run
	for _, at := ledger.RunSlot(freshSince, time.Minute, 0); !at.After(setup); at = at.Add(time.Minute) {
		if !at.Before(freshSince) {
			id, _ := ledger.RunSlot(at, time.Minute, 0)
			freshRuns = append(freshRuns, oneAttempt(id, ledger.RunFailed, at.Add(time.Second)))
		}
	}
	writeRuns(t, put, registry, "fresh", freshRuns...)

	// A declared ACL policy, widened with the faults.
	policyName := strings.ReplaceAll(base, "/", "-") + "-workers"
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{strict.Key}, SessionNodePrefixes: []string{"worker-"}})
	policy, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: policyName, Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.ACL().PolicyDelete(policy.ID, nil) })
	spec, err := record.EncodeACLPolicyRecord(record.ACLPolicySpec{Name: policyName, ID: policy.ID, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RegistryKey(registry, lockmodel.KindACLPolicy, policyName), spec, 0)

	session := func(ttl string) string {
		id, _, err := c.Session().Create(&api.SessionEntry{TTL: ttl, LockDelay: time.Nanosecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = c.Session().Destroy(id, nil) })
		return id
	}
	s1, s2, long := session("10s"), session("10s"), session("60s")
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: daemon.Key, Session: s1, Flags: daemon.Flags()}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// Keep the sessions alive past their TTL for the whole test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			for _, id := range []string{s1, s2, long} {
				_, _, _ = c.Session().Renew(id, nil)
			}
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}()

	// The controller, repairing with a token that may not write (its ACL
	// repair fails), with its metrics on a local port.
	tok, err := agent.MintToken(policyName+"-controller", `key_prefix "" { policy = "read" }
session_prefix "" { policy = "read" }
acl = "read"
`, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.DeleteToken(tok.AccessorID)
		_, _ = c.ACL().PolicyDelete(tok.PolicyID, nil)
	})
	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(client, controller.Config{Mode: compliance.ModeRepair, RegistryPrefix: registry, DisableHA: true})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- ctrl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ctrl.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	waitFor(t, time.Minute, "the controller's initial sync", ctrl.Ready)
	waitFor(t, 30*time.Second, "holder metrics", func() bool {
		b, _ := httpGet(metricsURL)
		return bytes.Contains(b, []byte(`consullock_lock_holder_info{lock="daemon"`))
	})

	// The first scrape: before any fault, every counter an alert reads is
	// there, at 0. promtool check metrics on the real exposition.
	before, err := httpGet(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := c.KV().Get(daemon.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf(`consullock_lock_holder_info{lock="daemon",node=%q,session=%q} 1`, agent.NodeName, s1),
		fmt.Sprintf(`consullock_lock_fencing_token{lock="daemon"} %d`, held.ModifyIndex),
		fmt.Sprintf(`consullock_lock_holder_fencing_token{lock="daemon",session=%q} %d`, s1, held.ModifyIndex),
		`consullock_lock_always_held{lock="daemon"} 1`,
		`consullock_lock_always_held{lock="idle"} 0`,
		`consullock_lock_worst_case_gap_seconds{lock="daemon"} 20`,
		`consullock_lock_max_hold_seconds{lock="report"} 3`,
		`consullock_lock_run_period_seconds{lock="nightly"} 60`,
		`consullock_lock_slots_since_timestamp_seconds{lock="fresh"} ` + strconv.FormatFloat(float64(freshSince.Unix()), 'g', -1, 64),
		`consullock_lock_runs_total{lock="flaky",outcome="exhausted"} 0`,
		`consullock_lock_missed_slots_total{lock="skipped"} 0`,
		`consullock_lock_missed_slots_total{lock="fresh"} 0`,
		`consullock_violations_total{reason="ttl_too_long"} 0`,
		`consullock_repair_errors_total{kind="restore_acl_rules"} 0`,
		`consullock_lock_handovers_total{lock="strict"} 0`,
	} {
		if !bytes.Contains(before, []byte(want+"\n")) {
			t.Errorf("first scrape: /metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.FailNow() // skipped's slot may have passed: the setup took more than 25s
	}
	lint := exec.Command(promtool, "check", "metrics")
	lint.Stdin = bytes.NewReader(before)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// Prometheus: scrape and evaluate every second.
	promBin := tool(t, "PROMETHEUS_BIN", "prometheus")
	dir := t.TempDir()
	promAddr := freeAddr(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: consullock-controller
    static_configs:
      - targets: [%q]
`, repoFile(t, RulesFile), ln.Addr().String())
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var promLog bytes.Buffer
	prom := exec.Command(promBin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	}()
	promAPI := "http://" + promAddr + "/api/v1/"
	waitFor(t, 2*time.Minute, "Prometheus to scrape the controller", func() bool {
		b, err := httpGet(promAPI + "query?query=consullock_lock_held")
		return err == nil && bytes.Contains(b, []byte(`"lock":"daemon"`))
	})

	// The faults: daemon's holder releases and nobody takes over; report
	// is taken and kept past its 3s max_hold; strict is taken by a session
	// whose TTL (60s) is longer than its profile's (10s); the policy is
	// widened, which the controller may not put back.
	t0 := time.Now()
	if _, _, err := c.KV().Release(&api.KVPair{Key: daemon.Key, Session: s1, Flags: daemon.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	for key, id := range map[string]string{report.Key: s2, strict.Key: long} {
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: id, Flags: lockmodel.LockFlagValue}, nil); err != nil || !ok {
			t.Fatalf("acquire %s: %v %v", key, ok, err)
		}
	}
	policy.Rules = `key_prefix "" { policy = "write" }`
	if _, _, err := c.ACL().PolicyUpdate(policy, nil); err != nil {
		t.Fatal(err)
	}
	// nightly's last success finished 2m ago: more than its 1m period plus
	// 30s of grace. flaky's one allowed attempt failed.
	writeRuns(t, put, registry, "nightly", oneAttempt("r1", ledger.RunSucceeded, t0.Add(-2*time.Minute)))
	writeRuns(t, put, registry, "flaky", oneAttempt("r1", ledger.RunFailed, t0))
	// minutely (a schedule, no period) last ran 3m ago: the slots since
	// are missed, and the alert reads its slots.
	writeRuns(t, put, registry, "minutely", oneAttempt("r1", ledger.RunSucceeded, t0.Add(-3*time.Minute)))
	// idle was paused two days ago (consullock pause): past the rule's day.
	pause, err := record.EncodePauseRecord(record.Pause{Lock: "idle", Reason: "INC-9", By: "alice", At: t0.Add(-48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	put(record.PauseKey(registry, "idle"), pause, 0)

	// The second scrape, once the controller shows the first event of each
	// counter: skipped's slot has passed unstarted, the repair has failed.
	var after []byte
	events := []string{
		`consullock_violations_total{reason="ttl_too_long"} 1`,
		`consullock_repair_errors_total{kind="restore_acl_rules"} `,
		`consullock_lock_runs_total{lock="flaky",outcome="exhausted"} 1`,
		`consullock_lock_missed_slots_total{lock="skipped"} 1`,
		`consullock_lock_missed_slots_total{lock="minutely"} `,
		`consullock_lock_next_slot_timestamp_seconds{lock="minutely"}`,
	}
	waitFor(t, time.Minute, "the first events in /metrics", func() bool {
		after, _ = httpGet(metricsURL)
		for _, e := range events {
			if !bytes.Contains(after, []byte(e)) {
				return false
			}
		}
		return true
	})
	firstEvaluation(t, promtool, before, after, []firing{
		{"ConsulLockViolations", `reason="ttl_too_long"`},
		{"ConsulLockRepairErrors", `kind="restore_acl_rules"`},
		{"ConsulLockRunAttemptsExhausted", `lock="flaky"`},
		{"ConsulLockSlotMissed", `lock="skipped"`},
	})

	fired := map[string]time.Duration{}
	want := []firing{
		{"ConsulLockUnheld", `lock="daemon"`},
		{"ConsulLockHolderPastMaxHold", `lock="report"`},
		{"ConsulLockViolations", `reason="ttl_too_long"`},
		{"ConsulLockRepairErrors", `kind="restore_acl_rules"`},
		{"ConsulLockRunMissed", `lock="nightly"`},
		{"ConsulLockRunMissed", `lock="minutely"`},
		{"ConsulLockRunMissed", `lock="fresh"`},
		{"ConsulLockRunAttemptsExhausted", `lock="flaky"`},
		{"ConsulLockSlotMissed", `lock="skipped"`},
		{"ConsulLockPausedTooLong", `lock="idle"`},
	}
	firingAll := func() bool {
		b, err := httpGet(promAPI + "alerts")
		if err != nil {
			return false
		}
		var r struct {
			Data struct {
				Alerts []struct {
					Labels   map[string]string
					State    string
					ActiveAt time.Time
				}
			}
		}
		if json.Unmarshal(b, &r) != nil {
			return false
		}
		for _, a := range r.Data.Alerts {
			if a.Labels["alertname"] == "ConsulLockUnheld" && a.Labels["lock"] != "daemon" {
				t.Errorf("ConsulLockUnheld %s for %s, which is not declared always_held", a.State, a.Labels["lock"])
			}
			for _, w := range want {
				if a.State == "firing" && w.matches(a.Labels) {
					fired[w.String()] = a.ActiveAt.Sub(t0) // none has a for: active is firing
				}
			}
		}
		return len(fired) == len(want)
	}
	const firingWait = 3 * time.Minute
	for deadline := time.Now().Add(firingWait); !firingAll(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			var missing []string
			for _, w := range want {
				if _, ok := fired[w.String()]; !ok {
					missing = append(missing, w.String())
				}
			}
			t.Fatalf("after %s these alerts had not fired: %s", firingWait, strings.Join(missing, ", "))
		}
	}
	var figures []string
	for _, w := range want {
		figures = append(figures, fmt.Sprintf("%s %s", w, fired[w.String()].Round(100*time.Millisecond)))
	}
	t.Logf("fault to firing through Prometheus's API (scrape and evaluation every 1s; worst_case_gap 20s, max_hold 3s, "+
		"skipped's slot %s after the faults, fresh declared %s before them): %s",
		nextSlot.Add(time.Second).Sub(t0).Round(100*time.Millisecond), t0.Sub(freshSince).Round(time.Second), strings.Join(figures, ", "))
	// Neither fired before its own threshold could have passed.
	if fired[want[0].String()] < 20*time.Second || fired[want[1].String()] < 3*time.Second {
		t.Errorf("an alert fired before its threshold: %v", fired)
	}
}

// firing is an alert and one of its labels, as PromQL writes a matcher.
type firing struct{ alert, label string }

func (f firing) String() string { return f.alert + "{" + f.label + "}" }

// matches reports whether an alert's labels are f's.
func (f firing) matches(labels map[string]string) bool {
	name, value, _ := strings.Cut(f.label, "=")
	return labels["alertname"] == f.alert && strconv.Quote(labels[name]) == value
}

// oneAttempt is a run of one attempt that finished at finished with
// outcome (succeeded or failed).
func oneAttempt(id string, outcome ledger.RunOutcome, finished time.Time) ledger.Run {
	code := 0
	if outcome == ledger.RunFailed {
		code = 1
	}
	return ledger.Run{ID: id, Outcome: outcome, Attempts: []ledger.Attempt{{Number: 1, Node: "n1",
		Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 7,
		Started: finished.Add(-time.Second), Finished: finished, ExitCode: &code, Outcome: outcome}}}
}

// writeRuns writes lock's run ledger with runs, oldest first.
func writeRuns(t *testing.T, put func(string, []byte, uint64), registry, lock string, runs ...ledger.Run) {
	t.Helper()
	newest := slices.Clone(runs)
	slices.Reverse(newest) // the ledger keeps the most recently begun first
	rec, err := record.EncodeLedger(ledger.Ledger{Lock: lock, Runs: newest})
	if err != nil {
		t.Fatal(err)
	}
	put(record.RunLedgerKey(registry, lock), rec, 0)
}
