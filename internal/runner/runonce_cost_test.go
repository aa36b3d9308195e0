package runner

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// countingProxy forwards to the agent and records every request but the
// renewals ("METHOD path?query"). hold, when it selects a request, delays
// it by delay before it is passed on.
type countingProxy struct {
	addr  string
	hold  func(*http.Request) bool
	delay time.Duration

	mu       sync.Mutex
	requests []string
	failNext func(*http.Request) bool // the first request it selects gets a 500
}

// failOnce makes the first request that sel selects from now on fail with
// a 500 that is not Consul's text of a passing condition (so the client
// does not retry it itself).
func (p *countingProxy) failOnce(sel func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext = sel
}

func newCountingProxy(t *testing.T, hold func(*http.Request) bool, delay time.Duration) *countingProxy {
	t.Helper()
	p := &countingProxy{hold: hold, delay: delay}
	p.addr = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		fail := false
		p.mu.Lock()
		if !strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
			p.requests = append(p.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		}
		if p.failNext != nil && p.failNext(r) {
			fail, p.failNext = true, nil
		}
		p.mu.Unlock()
		if fail {
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		if p.hold != nil && p.hold(r) {
			time.Sleep(p.delay)
		}
		forward.ServeHTTP(w, r)
	})
	return p
}

// waitBlocking waits until the runner behind the proxy has sent a
// blocking query (one with an index) on each of keys: it is waiting, and
// its watches have their first answers.
func (p *countingProxy) waitBlocking(t *testing.T, keys ...string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		waiting := 0
		for _, k := range keys {
			if slices.ContainsFunc(p.seen(), func(r string) bool {
				return strings.HasPrefix(r, "GET /v1/kv/"+k+"?") && strings.Contains(r, "index=")
			}) {
				waiting++
			}
		}
		if waiting == len(keys) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no blocking query on each of %q within 30s: %q", keys, p.seen())
		}
	}
}

func (p *countingProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

// ledgerReads are the reads of the ledger at key that are not the
// watch's blocking queries: the holder's consistent reads.
func ledgerReads(requests []string, key string) []string {
	var out []string
	// The read before the session (a runner that arrives after the run's
	// success leaves without a write) is not one a waiter makes.
	if i := slices.IndexFunc(requests, func(r string) bool { return strings.HasPrefix(r, "PUT /v1/session/create") }); i >= 0 {
		requests = requests[i:]
	}
	for _, r := range requests {
		if strings.HasPrefix(r, "GET /v1/kv/"+key+"?") && strings.Contains(r, "consistent") {
			out = append(out, r)
		}
	}
	return out
}

// TestRunOnce_costsOfAHandOverUseTheWatchedLedger: B waits with -run-id
// while A runs attempt 1, which fails; A's release transaction records
// it, B acquires and records attempt 2 on the copy of the ledger its watch
// already has (answered at the release, the index at which B saw the key
// free), without a consistent read of the ledger first; the ledger is then
// right (attempt 1 failed, attempt 2 succeeded by B). B's proxy holds its
// transactions 300 ms, so that the watch's answer to the release is in
// before the lock op wins (the race the other way round reads, see
// watchedCopy).
func TestRunOnce_costsOfAHandOverUseTheWatchedLedger(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-wait-stdin", "-exit", "1")...)
	waitStarted(t, record, "a")
	proxy := newCountingProxy(t, failsTxn, 300*time.Millisecond)
	b := startRunAt(t, "runner b", proxy.addr, token, args, childArgs(record, "b")...)
	proxy.waitBlocking(t, ledgerKey(l), l.Key)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 1 {
		t.Fatalf("runner a exited %d, want 1 (its command's):\n%s", code, a.out.String())
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0:\n%s", code, b.out.String())
	}
	requests := proxy.seen()
	reads := ledgerReads(requests, ledgerKey(l))
	t.Logf("MEASURED run-once hand-over, the waiter's requests (renewals left out): %d %q; consistent ledger reads %d",
		len(requests), requests, len(reads))
	if len(reads) != 0 {
		t.Fatalf("the waiter read the ledger %d times after acquiring (%q); want none: its watch had it", len(reads), reads)
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 2 || run.Attempts[0].Outcome != ledger.RunFailed || run.Attempts[1].Outcome != ledger.RunSucceeded ||
		run.Outcome != ledger.RunSucceeded {
		t.Fatalf("ledger run r1: %+v; want attempt 1 failed, attempt 2 succeeded", run)
	}
	if runs := readRuns(t, record); len(runs) != 2 || runs[1].tag != "b" || runs[1].attempt != "2" {
		t.Fatalf("executions %+v; want a's, then b's as attempt 2", runs)
	}
}

// TestRunOnce_aWatchedLedgerOlderThanTheAcquisitionIsReadAgain: B's
// proxy holds its watch's queries on the ledger 3 s, so that when
// B wins the lock at A's release its copy still shows A's attempt running
// (older than the read of the key that showed it free). B reads the ledger
// once instead of deciding on the copy: no refused transaction (the copy
// would have marked A's attempt crashed with a stale check-and-set), and
// the ledger says attempt 1 failed, attempt 2 succeeded.
func TestRunOnce_aWatchedLedgerOlderThanTheAcquisitionIsReadAgain(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-wait-stdin", "-exit", "1")...)
	waitStarted(t, record, "a")
	watch := func(r *http.Request) bool {
		// Every watch answer, the first (index 0) too: a waiter's watches
		// start afresh once it has a session.
		return r.Method == http.MethodGet && r.URL.Path == "/v1/kv/"+ledgerKey(l) && !r.URL.Query().Has("consistent")
	}
	proxy := newCountingProxy(t, watch, 3*time.Second)
	b := startRunAt(t, "runner b", proxy.addr, token, args, childArgs(record, "b")...)
	proxy.waitBlocking(t, l.Key)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 1 {
		t.Fatalf("runner a exited %d, want 1 (its command's):\n%s", code, a.out.String())
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0:\n%s", code, b.out.String())
	}
	requests := proxy.seen()
	reads := ledgerReads(requests, ledgerKey(l))
	txns := slices.DeleteFunc(slices.Clone(requests), func(r string) bool { return !strings.HasPrefix(r, "PUT /v1/txn?") })
	t.Logf("MEASURED the waiter's requests (renewals left out): %d %q", len(requests), requests)
	if len(reads) != 1 || len(txns) != 3 {
		t.Fatalf("the waiter read the ledger %d times and sent %d transactions; want 1 read and 3 (lock, attempt, outcome and release): a stale copy's check-and-set was refused", len(reads), len(txns))
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 2 || run.Attempts[0].Outcome != ledger.RunFailed || run.Attempts[1].Outcome != ledger.RunSucceeded {
		t.Fatalf("ledger run r1: %+v; want attempt 1 failed, attempt 2 succeeded", run)
	}
}

// TestRunOnce_aWaiterThatLearnsOfTheSuccessWritesNothing: B arrives while
// A runs the run; it waits without a session, sees A's success and exits 0
// without one write (no session, no lock op, no destroy). Before, a waiter
// created a session and destroyed it: 2 Raft writes per node that did not
// run the job.
func TestRunOnce_aWaiterThatLearnsOfTheSuccessWritesNothing(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	proxy := newCountingProxy(t, nil, 0)
	b := startRunAt(t, "runner b", proxy.addr, token, args, childArgs(record, "b")...)
	proxy.waitBlocking(t, l.Key)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d:\n%s", code, a.out.String())
	}
	if code := b.wait(time.Minute); code != 0 || !strings.Contains(b.out.String(), `seen="while waiting for the lock"`) {
		t.Fatalf("runner b exited %d, want 0 having seen the success while waiting:\n%s", code, b.out.String())
	}
	requests := proxy.seen()
	writes := slices.DeleteFunc(slices.Clone(requests), func(r string) bool { return strings.HasPrefix(r, "GET ") })
	t.Logf("MEASURED the waiter's requests: %d, writes %d %q", len(requests), len(writes), writes)
	if len(writes) != 0 {
		t.Fatalf("the waiter sent %d write requests, want none: %q", len(writes), writes)
	}
	if runs := readRuns(t, record); len(runs) != 1 || runs[0].tag != "a" {
		t.Fatalf("executions %+v; want a's only", runs)
	}
}

// TestRunOnce_aWaitersFailedLedgerReadIsFollowedByOneFromIndex0: B waits
// while A runs; its first blocking query on the ledger fails. B's next
// ledger query must not block on the index it had (after an agent restart
// that index may not come back for a long time, hiding every change):
// Consul's rule is to start again from 0. Then A succeeds and B leaves
// without running. Failed before the one follower: watchLedger kept its
// index after an error.
func TestRunOnce_aWaitersFailedLedgerReadIsFollowedByOneFromIndex0(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	proxy := newCountingProxy(t, nil, 0)
	proxy.failOnce(func(r *http.Request) bool {
		return r.Method == http.MethodGet && r.URL.Path == "/v1/kv/"+ledgerKey(l) && r.URL.Query().Get("index") != ""
	})
	b := startRunAt(t, "runner b", proxy.addr, token, args, childArgs(record, "b")...)
	ledgerGet := "GET /v1/kv/" + ledgerKey(l) + "?"
	var after []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		after = nil
		for _, r := range proxy.seen() {
			if strings.HasPrefix(r, ledgerGet) && (len(after) > 0 || strings.Contains(r, "index=")) {
				after = append(after, r)
			}
		}
		if len(after) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B sent %d ledger queries from its first blocking one on, want 2: %q", len(after), proxy.seen())
		}
	}
	if !strings.Contains(after[0], "index=") || strings.Contains(after[1], "index=") {
		t.Fatalf("ledger queries around the failed one: %q; want the failed one blocking and the next from index 0 (no index)", after[:2])
	}
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want 0:\n%s", code, a.out.String())
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0 (the run succeeded):\n%s", code, b.out.String())
	}
	if runs := readRuns(t, record); len(runs) != 1 || runs[0].tag != "a" {
		t.Fatalf("executions %+v; want a's only", runs)
	}
}

// TestRunOnce_aRunnerThatLosesTheRaceWaitsWithoutItsSession: A reads the
// key free and creates a session; just before its lock op reaches the
// agent, B takes the lock and runs the job. A's lock op is refused; A ends
// its session at once and waits for B without one, so that it learns of
// B's success writing nothing more: its writes are the floor of a node
// that raced (session create, the refused lock op, session destroy).
// Before, A waited with its session and, when B released, either won the
// next race (a lock op and a release more) or released a key it never
// held (one more).
func TestRunOnce_aRunnerThatLosesTheRaceWaitsWithoutItsSession(t *testing.T) {
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	var (
		once sync.Once
		b    *proc
	)
	p := newCountingProxy(t, func(r *http.Request) bool {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/txn" {
			once.Do(func() { // A's lock op: B takes the lock first
				b = startRun(t, "runner B", token, args, childArgs(record, "B", "-sleep", "1s")...)
				waitKeyAt(t, agent.Client(), l.Key, 30*time.Second, heldByOther(""))
			})
		}
		return false
	}, 0)
	a := startRunAt(t, "runner A", p.addr, token, args, childArgs(record, "A", "-sleep", "1s")...)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner A exited %d:\n%s", code, a.out.String())
	}
	if b == nil {
		t.Fatalf("runner A sent no lock op:\n%s", a.out.String())
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner B exited %d:\n%s", code, b.out.String())
	}
	if runs := readRuns(t, record); len(runs) != 1 || runs[0].tag != "B" {
		t.Fatalf("executions %+v; want B's alone", runs)
	}
	var writes []string
	for _, r := range p.seen() {
		if !strings.HasPrefix(r, "GET ") {
			writes = append(writes, r)
		}
	}
	want := []string{"PUT /v1/session/create", "PUT /v1/txn", "PUT /v1/session/destroy/"}
	if len(writes) != len(want) {
		t.Fatalf("runner A's writes %q; want %q", writes, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(writes[i], w) {
			t.Fatalf("runner A's writes %q; want %q", writes, want)
		}
	}
	if !strings.Contains(a.out.String(), "run already succeeded") {
		t.Errorf("runner A did not report B's success:\n%s", a.out.String())
	}
}
