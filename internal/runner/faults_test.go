package runner

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// faultProxy sits between a runner and the agent and fails on demand:
// "noleader" answers every request with Consul's HTTP 500 "No cluster
// leader"; "partition" accepts requests and answers nothing (a hung or
// frozen agent), cutting requests in flight; "reset" closes every
// connection without an answer (an agent that refuses).
type faultProxy struct {
	addr string // host:port for CONSUL_HTTP_ADDR

	mu     sync.Mutex
	mode   string
	cut    chan struct{} // closed when a partition starts
	healed chan struct{} // closed when a partition ends

	noLeaderRenewals atomic.Int64
	// lastRenewal is when the last session renewal that the agent
	// answered with 200 arrived at the proxy: no later than the server
	// saw it, so the earliest take-over is lastRenewal + lock_delay.
	lastRenewal atomic.Pointer[time.Time]
}

func newFaultProxy(t testing.TB) *faultProxy {
	t.Helper()
	p := &faultProxy{mode: "pass", cut: make(chan struct{}), healed: make(chan struct{})}
	p.addr = agentProxy(t, agent.Addr, p.serve)
	t.Cleanup(func() { p.set("pass") }) // before the proxy closes: nothing waits on a partition
	return p
}

func (p *faultProxy) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == "partition" && p.mode != "partition" {
		close(p.cut)
		p.healed = make(chan struct{})
	}
	if mode != "partition" && p.mode == "partition" {
		close(p.healed)
		p.cut = make(chan struct{})
	}
	p.mode = mode
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request, forward http.Handler) {
	p.mu.Lock()
	mode, cut, healed := p.mode, p.cut, p.healed
	p.mu.Unlock()
	switch mode {
	case "partition":
		select { // no answer while the partition lasts
		case <-r.Context().Done():
		case <-healed:
		}
		http.Error(w, "partitioned", http.StatusBadGateway)
		return
	case "reset":
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		http.Error(w, "reset", http.StatusBadGateway)
		return
	case "noleader":
		if strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
			p.noLeaderRenewals.Add(1)
		}
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	arrived := time.Now()
	rec := &testenv.StatusRecorder{ResponseWriter: w}
	forward.ServeHTTP(rec, r.WithContext(ctx))
	if strings.HasPrefix(r.URL.Path, "/v1/session/renew/") && rec.Status == http.StatusOK {
		p.lastRenewal.Store(&arrived)
	}
}

// Consul issue 1162: a spell without a leader shorter than the TTL is not
// lock loss. The runner rides it out and the child runs to its end.
func TestRun_ridesOutNoClusterLeaderShorterThanTTL(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	// lock_delay 15s: with serfHealth the runner may go 15s - 1s margin -
	// 5s grace = 9s without a renewal, more than renew_every (3.3s) plus
	// the spell. A shorter lock_delay could not ride out 4s safely.
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 15*time.Second))
	proxy := newFaultProxy(t)
	record := filepath.Join(t.TempDir(), "record")
	run := startRunAt(t, "runner", proxy.addr, runnerToken(t, prefix), []string{"-lock", l.Name},
		childArgs(record, "a", "-sleep", "12s")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")

	proxy.set("noleader")
	time.Sleep(4 * time.Second) // the no-leader spell: longer than renew_every (3.3s), shorter than the TTL (10s)
	proxy.set("pass")

	if code := run.wait(60 * time.Second); code != 0 {
		t.Fatalf("runner exited %d, want 0: a short spell without a leader is not lock loss", code)
	}
	if n := proxy.noLeaderRenewals.Load(); n == 0 {
		t.Fatal("no renewal met the no-leader spell; the test proved nothing")
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || runs[0].termed || !runs[0].ended {
		t.Fatalf("the child was disturbed: %+v", runs)
	}
}

// Consul issue 18271: a holder cut off from the cluster must notice. The
// partitioned runner stops its child within TTL + grace of its last
// renewal, before Consul can invalidate the session (2 x TTL) and another
// runner can take over; the two children never overlap.
func TestRun_partitionedHolderStopsChildBeforeTakeOver(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	profile := fastProfile(t, time.Second)
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	proxy := newFaultProxy(t)
	record := filepath.Join(t.TempDir(), "record")

	a := startRunAt(t, "partitioned runner", proxy.addr, token, []string{"-lock", l.Name, "-grace", "2s"},
		childArgs(record, "a", "-sleep", "5m")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)

	partitioned := time.Now()
	proxy.set("partition")
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("partitioned runner exited %d, want %d (lock lost)", code, ExitLockLost)
	}
	if out := a.out.String(); !strings.Contains(out, "no successful session renewal") {
		t.Fatalf("the partitioned runner does not say why it gave up:\n%s", out)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[0].tag != "a" || runs[1].tag != "b" || !runs[0].termed || !runs[0].ended {
		t.Fatalf("runs = %+v", runs)
	}
	t.Logf("MEASURED partition: child a stopped %s after the partition (bound ttl + grace = %s); child b started %s after it",
		runs[0].end.Sub(partitioned).Round(time.Millisecond), profile.TTL+2*time.Second,
		runs[1].start.Sub(partitioned).Round(time.Millisecond))
	if !runs[0].end.Before(runs[1].start) {
		t.Fatalf("the partitioned holder's child was still running (until %s) when the next holder started (%s)", runs[0].end, runs[1].start)
	}
	if stopped := runs[0].end.Sub(partitioned); stopped > profile.TTL+2*time.Second+time.Second {
		t.Fatalf("the child was stopped %s after the partition; want within ttl + grace", stopped)
	}
}

// Issue 12, section 2: with health checks (serfHealth by default) Consul may
// end the session as soon as the node is declared failed, and another
// holder may start lock_delay after the holder's last contact. A runner
// whose agent hangs (accepts requests, never answers) or refuses them must
// have killed its command before that moment, counted from its last renewal
// that Consul answered. The command here ignores SIGTERM, so the runner has
// to get to SIGKILL in time too.
func TestRun_cutOffHolderKillsChildBeforeLastContactPlusLockDelay(t *testing.T) {
	for _, mode := range []string{"partition", "reset"} {
		t.Run(map[string]string{"partition": "hung agent", "reset": "refusing agent"}[mode], func(t *testing.T) {
			t.Parallel()
			prefix := testenv.UniquePrefix(t.Name())
			// TTL 30s keeps the TTL rule out of the way: lock_delay decides.
			// Loss after 10s - 1s margin - 2s grace = 7s, SIGKILL at 9s.
			profile := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 30 * time.Second,
				LockDelay: 10 * time.Second, RenewEvery: 2 * time.Second}
			rule := lockmodel.NewStopRule(profile.Resolve(), 2*time.Second)
			if !rule.Feasible() || rule.LossAfter() != 7*time.Second {
				t.Fatalf("test profile: %+v feasible=%v loss after %s", rule, rule.Feasible(), rule.LossAfter())
			}
			l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
			proxy := newFaultProxy(t)
			record := filepath.Join(t.TempDir(), "record")
			run := startRunAt(t, "cut-off runner", proxy.addr, runnerToken(t, prefix), []string{"-lock", l.Name, "-grace", "2s"},
				childArgs(record, "a", "-sleep", "5m", "-on-term", "ignore")...)
			waitStarted(t, record, "a")
			// Wait for a renewal through the proxy, so that the last
			// contact is one the proxy saw.
			for proxy.lastRenewal.Load() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			proxy.set(mode)
			cut := time.Now()
			if code := run.wait(time.Minute); code != ExitLockLost {
				t.Fatalf("runner exited %d, want %d (lock lost)", code, ExitLockLost)
			}
			last := *proxy.lastRenewal.Load()
			dead := logTime(t, run, "lock lost: the command was stopped")
			takeOver := last.Add(profile.LockDelay)
			t.Logf("MEASURED %s: last confirmed renewal %s before the cut; command dead %s after it (SIGTERM due at %s, SIGKILL at %s); "+
				"earliest take-over %s after it; margin %s",
				t.Name(), cut.Sub(last).Round(time.Millisecond), dead.Sub(last).Round(time.Millisecond), rule.LossAfter(), rule.DeadBy(),
				profile.LockDelay, takeOver.Sub(dead).Round(time.Millisecond))
			if !dead.Before(takeOver) {
				t.Fatalf("the command was dead only %s after the last confirmed renewal; another holder may start after lock_delay %s",
					dead.Sub(last).Round(time.Millisecond), profile.LockDelay)
			}
			if out := run.out.String(); !strings.Contains(out, "no successful session renewal") || !strings.Contains(out, "killing it") {
				t.Fatalf("the runner does not say why it gave up, or did not SIGKILL:\n%s", out)
			}
		})
	}
}

// logTime is the time of the first log event of p whose message is msg.
func logTime(t testing.TB, p *proc, msg string) time.Time {
	t.Helper()
	for _, line := range strings.Split(p.out.String(), "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		return at
	}
	t.Fatalf("%s did not log %q:\n%s", p.name, msg, p.out.String())
	return time.Time{}
}

// A profile that cannot stop a cut-off holder in time is named once at
// start, in one short line: the verdict with the numbers and the fix; the
// runner still works.
func TestRun_warnsAtStartWhenTheProfileCannotStopInTime(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 2*time.Second))
	record := filepath.Join(t.TempDir(), "record")
	run := startRun(t, "runner", runnerToken(t, prefix), []string{"-lock", l.Name}, childArgs(record, "a")...)
	if code := run.wait(time.Minute); code != 0 {
		t.Fatalf("runner exited %d, want 0", code)
	}
	var lines []string
	for _, line := range strings.Split(run.out.String(), "\n") {
		if strings.Contains(line, "cannot stop in time") {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d stop-rule warnings, want 1:\n%s", len(lines), run.out.String())
	}
	for _, want := range []string{
		"holders cut off from Consul cannot stop in time",
		"take over lock_delay 2s (health checks)",
		"renew_every 3.333333333s + renewal timeout 2s + -grace 5s + margin 1s = 11.333333333s",
		`Set lock_delay = \"12s\" or longer.`,
	} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the start-up warning does not say %q:\n%s", want, lines[0])
		}
	}
	if _, said, _ := strings.Cut(lines[0], "verdict="); len(said) > 300 {
		t.Errorf("the start-up warning says %d characters, want a short line:\n%s", len(said), lines[0])
	}
}
