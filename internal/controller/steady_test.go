package controller

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Steady state: while nothing drifts the controller writes nothing to
// Consul. The test watches a 15 s window; the benchmark the 60 s:
//
//	go test ./internal/controller/ -run '^$' -bench SteadyState -benchtime 1x
//	go test ./internal/controller/ -run TestSteadyState -v -steady-window 60s
var (
	steadyWindow = flag.Duration("steady-window", 0, "steady-state window (default 15s in TestSteadyState, 60s in BenchmarkSteadyState)")
	steadyLocks  = flag.Int("steady-locks", 0, "declared locks in the steady-state window (default 100 in the test, 1000 in the benchmark)")
)

// steadyResult is what a controller did to Consul over a quiet window.
type steadyResult struct {
	window time.Duration
	locks  int
	// controllerWrites are the controller's non-read requests, by
	// "METHOD /path"; renewals and other split them into its leader
	// session's renewals and everything else.
	controllerWrites map[string]int
	renewals, other  int
	// agentWrites are the raft writes the agent applied meanwhile (KV,
	// transactions, ACL policies, sessions), from anyone.
	agentWrites map[string]float64
	agentTotal  float64
}

func (r steadyResult) String() string {
	return fmt.Sprintf("window %s, %d declared locks: controller writes other than its leader session renewals: %d; "+
		"leader session renewals: %d (%s); raft writes applied by the agent: %v (%s)",
		r.window, r.locks, r.other, r.renewals, formatCounts(r.controllerWrites), r.agentTotal, formatCounts(r.agentWrites))
}

// measureSteadyState declares locks (a mutex per lock, a few of them held
// by compliant holders, one semaphore), two ACL policies and a session
// profile on the metered agent, lets a repair-mode controller with leader
// election create what is missing, waits until it is quiet, and then
// counts what it writes over window.
func measureSteadyState(tb testing.TB, locks int, window time.Duration) steadyResult {
	tb.Helper()
	a := metered(tb)
	cl := a.Client()
	base := fmt.Sprintf("t/steady-%d-%d", os.Getpid(), rand.IntN(1e9))
	registry := base + "/registry"
	tb.Cleanup(func() { _, _ = cl.KV().DeleteTree(base+"/", nil) })

	profile := lockmodel.SessionProfile{Name: "steady", TTL: time.Hour, LockDelay: 15 * time.Second}
	rec, err := record.EncodeSessionProfileRecord(profile)
	if err != nil {
		tb.Fatal(err)
	}
	ops := api.KVTxnOps{{Verb: api.KVSet, Key: lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, profile.Name), Value: rec}}
	flush := func() {
		if ok, resp, _, err := cl.KV().Txn(ops, nil); err != nil || !ok {
			tb.Fatalf("txn: ok=%v err=%v %+v", ok, err, resp)
		}
		ops = ops[:0]
	}
	var declared []lockmodel.Lock
	for i := range locks {
		l := lockmodel.Lock{Name: fmt.Sprintf("steady-%d", i), Prefix: fmt.Sprintf("%s/svc%02d/job%d", base, i%10, i), SessionDefaults: profile.Name}
		if i == 0 {
			l.Limit = 3
		}
		rec, err := record.EncodeLockRecord(l)
		if err != nil {
			tb.Fatal(err)
		}
		l, _ = l.Normalize()
		declared = append(declared, l)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), Value: rec})
		if len(ops) == 64 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	for i := range 2 {
		rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{declared[i+1].Key}, SessionNodePrefixes: []string{"worker-"}})
		p, _, err := cl.ACL().PolicyCreate(&api.ACLPolicy{Name: fmt.Sprintf("steady-%d-%d", rand.IntN(1e9), i), Rules: rules}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _, _ = cl.ACL().PolicyDelete(p.ID, nil) })
		rec, err := record.EncodeACLPolicyRecord(record.ACLPolicySpec{Name: p.Name, ID: p.ID, Rules: rules})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := cl.KV().Put(&api.KVPair{Key: lockmodel.RegistryKey(registry, lockmodel.KindACLPolicy, p.Name), Value: rec}, nil); err != nil {
			tb.Fatal(err)
		}
	}

	proxy := newCountingProxy(tb, a)
	client, err := consul.New(consul.Settings{Address: proxy.Addr(), Token: a.ManagementToken})
	if err != nil {
		tb.Fatal(err)
	}
	watcher, err := consul.New(consul.Settings{Address: proxy.Addr(), Token: a.ManagementToken, Retry: consul.RetrySettings{MaxAttempts: 1}})
	if err != nil {
		tb.Fatal(err)
	}
	logs := &logBuffer{}
	c, err := New(client, Config{Mode: compliance.ModeRepair, RegistryPrefix: registry, WatchClient: watcher,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), ApplyGrace: compliance.DefaultApplyGrace})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
		if tb.Failed() {
			tb.Logf("controller log:\n%s", logs.String())
		}
	})
	waitTB(tb, 60*time.Second, func() error {
		if !c.Ready() || !c.IsLeader() {
			return fmt.Errorf("ready %v, leader %v", c.Ready(), c.IsLeader())
		}
		keys, _, err := cl.KV().Keys(base+"/svc", "", nil)
		if err != nil {
			return err
		}
		if len(keys) != locks {
			return fmt.Errorf("%d of %d lock keys created", len(keys), locks)
		}
		return nil
	})

	// Compliant holders on a few locks: their sessions are not renewed
	// during the window (TTL 1h), so they write nothing either.
	for _, l := range declared[1:min(len(declared), 4)] {
		id, _, err := cl.Session().Create(&api.SessionEntry{TTL: "1h", LockDelay: 15 * time.Second}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _, _ = cl.Session().Destroy(id, nil) })
		if ok, _, err := cl.KV().Acquire(&api.KVPair{Key: l.Key, Session: id, Flags: lockmodel.LockFlagValue}, nil); err != nil || !ok {
			tb.Fatalf("acquire %s: %v %v", l.Key, ok, err)
		}
	}
	// Quiet: the controller has seen the holders and said nothing new.
	time.Sleep(2 * time.Second)
	if l := logs.lines(`"msg":"drift detected"`, `"kind":"holder_non_compliant"`); len(l) != 0 {
		tb.Fatalf("the holders are not compliant:\n%s", strings.Join(l, "\n"))
	}

	proxy.Reset()
	before := readAgentCounters(tb, a)
	time.Sleep(window)
	after := readAgentCounters(tb, a)
	writes := proxy.Writes()

	r := steadyResult{window: window, locks: locks, controllerWrites: writes}
	r.agentWrites, r.agentTotal = after.writesSince(before)
	r.renewals = writesMatching(writes, func(k string) bool { return strings.HasPrefix(k, "PUT /v1/session/renew/") })
	r.other = writesMatching(writes, func(k string) bool { return !strings.HasPrefix(k, "PUT /v1/session/renew/") })
	return r
}

func waitTB(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSteadyState_noConsulWritesWhileNothingDrifts(t *testing.T) {
	window, locks := 15*time.Second, 100
	if *steadyWindow > 0 {
		window = *steadyWindow
	}
	if *steadyLocks > 0 {
		locks = *steadyLocks
	}
	r := measureSteadyState(t, locks, window)
	t.Log(r)
	if r.other != 0 {
		t.Errorf("the controller wrote to Consul while nothing drifted: %s", formatCounts(r.controllerWrites))
	}
	if r.agentTotal != 0 {
		t.Errorf("the agent applied raft writes while nothing drifted: %s", formatCounts(r.agentWrites))
	}
	// The leader session's renewal (every TTL/2 = 5 s) is the one write
	// the controller does make; it is no raft write.
	if lo, hi := int(window/(LeaderSessionTTL/2))-1, int(window/(LeaderSessionTTL/2))+1; r.renewals < lo || r.renewals > hi {
		t.Errorf("leader session renewals = %d over %s, want %d..%d", r.renewals, window, lo, hi)
	}
}

// BenchmarkSteadyState reports the controller's Consul writes over a quiet
// window (60 s unless -steady-window) with 1,000 declared locks (unless
// -steady-locks): writes other than its leader session's renewals, the
// renewals, and the raft writes the agent applied.
func BenchmarkSteadyState(b *testing.B) {
	window, locks := 60*time.Second, 1000
	if *steadyWindow > 0 {
		window = *steadyWindow
	}
	if *steadyLocks > 0 {
		locks = *steadyLocks
	}
	var r steadyResult
	for i := 0; i < b.N; i++ {
		r = measureSteadyState(b, locks, window)
	}
	b.ReportMetric(float64(r.other), "writes")
	b.ReportMetric(float64(r.renewals), "leader_renewals")
	b.ReportMetric(r.agentTotal, "raft_writes")
	b.Log(r)
}
