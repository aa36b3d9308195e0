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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
// rules. Two faults are injected: the holder of a lock declared always_held
// goes away and nobody takes over (ConsulLockUnheld once its worst_case_gap
// has passed; never for a lock not declared always_held), and a
// holder keeps a lock past max_hold (ConsulLockHolderPastMaxHold); and, for
// run-once locks, a ledger whose last success is older than the period plus
// grace (ConsulLockRunMissed) and a run that used up its attempts
// (ConsulLockRunAttemptsExhausted). All must be seen firing through
// Prometheus's HTTP API. The controller's /metrics
// also passes `promtool check metrics`.
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
	prof, err := lockmodel.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "fast", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, "fast"), prof, 0)
	var daemon, report lockmodel.Lock
	for _, l := range []lockmodel.Lock{
		{Name: "daemon", Prefix: prefix + "/daemon", SessionDefaults: "fast", AlwaysHeld: true},
		{Name: "report", Prefix: prefix + "/report", SessionDefaults: "fast", MaxHold: 3 * time.Second},
		// Never held and not declared always_held: unheld longer than
		// daemon, and ConsulLockUnheld must not fire for it.
		{Name: "idle", Prefix: prefix + "/idle", SessionDefaults: "fast"},
		// Run once: their ledgers are written with the faults.
		{Name: "nightly", Prefix: prefix + "/nightly", SessionDefaults: "fast", RunOnce: &lockmodel.RunOnce{Period: time.Minute}},
		{Name: "flaky", Prefix: prefix + "/flaky", SessionDefaults: "fast", RunOnce: &lockmodel.RunOnce{Period: time.Hour, MaxAttempts: 1}},
		{Name: "minutely", Prefix: prefix + "/minutely", SessionDefaults: "fast", RunOnce: &lockmodel.RunOnce{Schedule: "* * * * *"}},
	} {
		rec, err := lockmodel.EncodeLockRecord(l)
		if err != nil {
			t.Fatal(err)
		}
		put(lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), rec, 0)
		n, _ := l.Normalize()
		put(n.Key, nil, n.Flags())
		switch l.Name {
		case "daemon":
			daemon = n
		case "report":
			report = n
		}
	}
	session := func() string {
		id, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s", LockDelay: time.Nanosecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = c.Session().Destroy(id, nil) })
		return id
	}
	s1, s2 := session(), session()
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: daemon.Key, Session: s1, Flags: daemon.Flags()}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// Keep the sessions alive past their TTL for the whole test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			for _, id := range []string{s1, s2} {
				_, _, _ = c.Session().Renew(id, nil)
			}
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}()

	// The controller, observing, with its metrics on a local port.
	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(client, controller.Config{Mode: compliance.ModeObserve, RegistryPrefix: registry, DisableHA: true})
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

	// promtool check metrics on the real exposition.
	body, err := httpGet(metricsURL)
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
		`consullock_lock_runs_total{lock="flaky",outcome="exhausted"} 0`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	lint := exec.Command(promtool, "check", "metrics")
	lint.Stdin = bytes.NewReader(body)
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
	// is taken and kept past its 3s max_hold.
	t0 := time.Now()
	if _, _, err := c.KV().Release(&api.KVPair{Key: daemon.Key, Session: s1, Flags: daemon.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: report.Key, Session: s2, Flags: report.Flags()}, nil); err != nil || !ok {
		t.Fatalf("acquire report: %v %v", ok, err)
	}
	// nightly's last success finished 2m ago: more than its 1m period plus
	// 30s of grace. flaky's one allowed attempt failed.
	writeLedger(t, put, registry, "nightly", lockmodel.RunSucceeded, t0.Add(-2*time.Minute))
	writeLedger(t, put, registry, "flaky", lockmodel.RunFailed, t0)
	// minutely (a schedule, no period) last ran 3m ago: the slots since
	// are missed, and the alert reads its slots.
	writeLedger(t, put, registry, "minutely", lockmodel.RunSucceeded, t0.Add(-3*time.Minute))
	missed := regexp.MustCompile(`(?m)^consullock_lock_missed_slots_total\{lock="minutely"\} [1-9]`)
	waitFor(t, time.Minute, "minutely's missed slots in the metric", func() bool {
		b, _ := httpGet(metricsURL)
		return missed.Match(b) && bytes.Contains(b, []byte(`consullock_lock_next_slot_timestamp_seconds{lock="minutely"}`))
	})
	// idle was paused two days ago (consullock pause): past the rule's day.
	pause, err := lockmodel.EncodePauseRecord(lockmodel.Pause{Lock: "idle", Reason: "INC-9", By: "alice", At: t0.Add(-48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.PauseKey(registry, "idle"), pause, 0)
	fired := map[string]time.Duration{}
	want := map[string]string{"ConsulLockUnheld": "daemon", "ConsulLockHolderPastMaxHold": "report",
		"ConsulLockRunMissed": "nightly", "ConsulLockRunAttemptsExhausted": "flaky", "ConsulLockRunMissed/schedule": "minutely",
		"ConsulLockPausedTooLong": "idle"}
	waitFor(t, 3*time.Minute, "the alerts to fire", func() bool {
		b, err := httpGet(promAPI + "alerts")
		if err != nil {
			return false
		}
		var r struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string
					State  string
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
			for name, lock := range want {
				if strings.SplitN(name, "/", 2)[0] == a.Labels["alertname"] && a.State == "firing" && a.Labels["lock"] == lock {
					if _, seen := fired[name]; !seen {
						fired[name] = time.Since(t0)
					}
				}
			}
		}
		return len(fired) == len(want)
	})
	t.Logf("fault to firing through Prometheus's API: ConsulLockUnheld %s (worst_case_gap 20s), ConsulLockHolderPastMaxHold %s (max_hold 3s), "+
		"ConsulLockRunMissed %s (by schedule %s), ConsulLockRunAttemptsExhausted %s, ConsulLockPausedTooLong %s; scrape and evaluation every 1s",
		fired["ConsulLockUnheld"].Round(100*time.Millisecond), fired["ConsulLockHolderPastMaxHold"].Round(100*time.Millisecond),
		fired["ConsulLockRunMissed"].Round(100*time.Millisecond), fired["ConsulLockRunMissed/schedule"].Round(100*time.Millisecond),
		fired["ConsulLockRunAttemptsExhausted"].Round(100*time.Millisecond), fired["ConsulLockPausedTooLong"].Round(100*time.Millisecond))
	// Neither fired before its own threshold could have passed.
	if fired["ConsulLockUnheld"] < 20*time.Second || fired["ConsulLockHolderPastMaxHold"] < 3*time.Second {
		t.Errorf("an alert fired before its threshold: %v", fired)
	}
}

// writeLedger writes lock's run ledger with one run of one attempt that
// finished at finished with outcome (succeeded or failed).
func writeLedger(t *testing.T, put func(string, []byte, uint64), registry, lock string, outcome lockmodel.RunOutcome, finished time.Time) {
	t.Helper()
	code := 0
	if outcome == lockmodel.RunFailed {
		code = 1
	}
	rec, err := lockmodel.EncodeLedger(lockmodel.Ledger{Lock: lock, Runs: []lockmodel.Run{{ID: "r1", Outcome: outcome,
		Attempts: []lockmodel.Attempt{{Number: 1, Node: "n1", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 7,
			Started: finished.Add(-time.Second), Finished: finished, ExitCode: &code, Outcome: outcome}}}}})
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RunLedgerKey(registry, lock), rec, 0)
}
