package runner

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// outageProfile: the stop rule decides the loss 3s after the last
// confirmed renewal (lock_delay 5s - 1s margin - 1s grace), while the
// server keeps the session about 2 x 10s: an outage between the two is
// one the judge calls a loss and Consul does not.
func outageProfile(t testing.TB) *lockmodel.SessionProfile {
	return &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second,
		LockDelay: 5 * time.Second, RenewEvery: time.Second}
}

// Issue 31, item 1: a command that succeeded while everything between its
// runner and Consul was cut (renewals too), from just before the command
// exited, for longer than the stop rule's loss_after and shorter than
// 2 x ttl. The loss judge fires while the runner sends the outcome; the
// judge exists to stop the command, which has exited, so the runner keeps
// sending the fenced transaction until it commits once the link heals.
// The next holder finds the attempt succeeded and does not run the job
// again.
func TestRunOnce_outcomeIsRecordedAfterACompleteOutageLongerThanTheStopRule(t *testing.T) {
	t.Parallel()
	p := outageProfile(t)
	rule := lockmodel.NewStopRule(p.Resolve(), time.Second)
	outage := rule.LossAfter() + 3*time.Second
	if !rule.Feasible() || outage >= lockmodel.SessionTTLMultiplier*p.TTL-5*time.Second {
		t.Fatalf("test profile: loss after %s, outage %s, ttl %s: %s", rule.LossAfter(), outage, p.TTL, rule.Verdict())
	}
	l, token := declareRunOnceWith(t, ledger.RunOnce{Period: time.Hour}, p)
	record := filepath.Join(t.TempDir(), "record")
	link := newLink(t, "127.0.0.1:0")
	args := []string{"-lock", l.Name, "-run-id", "r1", "-grace", "1s"}
	a := startRunAt(t, "runner a", link.Addr(), token, args, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	link.Cut()
	cut := time.Now()
	a.closeStdin()
	waitOutput(t, a, "command exited")
	time.Sleep(time.Until(cut.Add(outage)))
	healDropping(t, link)
	code := a.wait(time.Minute)
	out := a.out.String()
	if code != 0 {
		t.Fatalf("runner a exited %d after a %s outage, want 0 (its command's):\n%s", code, outage, out)
	}
	if !strings.Contains(out, `lock_lost="no successful session renewal`) {
		t.Fatalf("the loss judge did not fire during the %s outage (loss after %s):\n%s", outage, rule.LossAfter(), out)
	}
	run := ledgerRun(t, l, "r1")
	if run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("after a %s outage the ledger says %+v; want attempt 1 succeeded:\n%s", outage, run, out)
	}
	b := startRun(t, "runner b", token, args, childArgs(record, "b")...)
	if code := b.wait(time.Minute); code != 0 || len(readRuns(t, record)) != 1 {
		t.Fatalf("runner b exited %d, executions %d; want 0 and the one execution:\n%s", code, len(readRuns(t, record)), b.out.String())
	}
	t.Logf("MEASURED outage %s (loss after %s, ttl %s): runner a exited %s after the heal",
		outage, rule.LossAfter(), p.TTL, a.exited.Sub(cut.Add(outage)).Round(time.Millisecond))
}

func newLink(t testing.TB, listen string) *testenv.Link {
	t.Helper()
	link, err := testenv.NewLink(listen, agent.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	return link
}

// healDropping ends a cut of link as a real partition does: what was sent
// during it is lost (a client that gave up closed its connection, and no
// packet of it arrives later), every connection open through the link
// breaks, and new ones reach the agent at the same address.
func healDropping(t testing.TB, link *testenv.Link) *testenv.Link {
	t.Helper()
	addr := link.Addr()
	link.Close()
	return newLink(t, addr)
}

// A command that exited 0 whose outcome cannot be recorded (here: its
// attempt was recorded crashed, by hand, while Consul refused the release
// transaction) makes the runner say so and exit ExitOutcomeNotRecorded, not
// its command's 0: its scheduler must not take the run for a success.
func TestRunOnce_anOutcomeThatCannotBeRecordedExits120(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	recordFile := filepath.Join(t.TempDir(), "record")
	proxy := newOutageProxy(t, failsTxn)
	a := startRunAt(t, "runner a", proxy.addr, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(recordFile, "a", "-wait-stdin")...)
	waitStarted(t, recordFile, "a")
	proxy.failing.Store(true)
	a.closeStdin()
	waitOutput(t, a, "cannot record the run's outcome yet")
	led, pair := readLedger(t, l)
	i := led.Find("r1")
	if i < 0 || len(led.Runs[i].Attempts) != 1 {
		t.Fatalf("ledger %+v; want run r1 with attempt 1", led)
	}
	run := &led.Runs[i]
	run.Attempts[0].Outcome, run.Attempts[0].Finished, run.Outcome = ledger.RunCrashed, time.Now(), ledger.RunCrashed
	value, err := record.EncodeLedger(led)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := agent.Client().KV().CAS(&api.KVPair{Key: ledgerKey(l), Value: value, ModifyIndex: pair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("mark attempt 1 crashed: ok=%v err=%v", ok, err)
	}
	code := a.wait(time.Minute)
	proxy.failing.Store(false)
	if code != ExitOutcomeNotRecorded || !strings.Contains(a.out.String(), "its outcome could not be recorded") {
		t.Fatalf("runner a exited %d, want %d saying the outcome could not be recorded:\n%s", code, ExitOutcomeNotRecorded, a.out.String())
	}
}

// Issue 31, item 5b: after the fence is lost (the session destroyed while
// Consul refused the release transaction), the outcome is recorded with a
// check-and-set of the ledger; one that failed (Consul answered "No
// cluster leader" to every try of the client's retries) is sent again on
// a fresh read instead of dropping the outcome.
func TestRunOnce_theCheckAndSetAfterALossIsTriedAgain(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	var txnFailing atomic.Bool
	var casFailures atomic.Int32
	casFailures.Store(int32(consul.DefaultRetry.MaxAttempts))
	proxy := newOutageProxy(t, func(r *http.Request) bool {
		if failsTxn(r) {
			return txnFailing.Load()
		}
		return r.Method == http.MethodPut && r.URL.Path == "/v1/kv/"+ledgerKey(l) && r.URL.Query().Has("cas") && casFailures.Add(-1) >= 0
	})
	proxy.failing.Store(true)
	a := startRunAt(t, "runner a", proxy.addr, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	txnFailing.Store(true)
	a.closeStdin()
	waitOutput(t, a, "cannot record the run's outcome yet")
	session := ledgerRun(t, l, "r1").Attempts[0].Session
	if _, err := agent.Client().Session().Destroy(session, nil); err != nil {
		t.Fatal(err)
	}
	txnFailing.Store(false)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want 0:\n%s", code, a.out.String())
	}
	if casFailures.Load() > 0 {
		t.Fatalf("the check-and-set after the loss was not refused once (%d left):\n%s", casFailures.Load(), a.out.String())
	}
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunSucceeded {
		t.Fatalf("after a lost fence and one failed check-and-set the ledger says %+v; want attempt 1 succeeded:\n%s", run, a.out.String())
	}
}

// Issue 31, item 5c: the transaction that records the attempt's start
// commits, but its answer is lost, and Consul answers nothing for longer
// than the client's retries and the settling read (No cluster leader to
// every transaction and ledger read; renewals pass). The runner reads the
// ledger again until it answers, recognises its own running attempt and
// runs it: the attempt is not used up without its command running (before,
// the runner exited 125 and the next holder recorded attempt 1 crashed).
func TestRunOnce_aLostAnswerToTheStartIsSettledBeforeTheAttemptCounts(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	const outage = 9 * time.Second
	var (
		mu    sync.Mutex
		armed = true
		until time.Time
	)
	addr := agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		txn := r.Method == http.MethodPut && r.URL.Path == "/v1/txn"
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		start := armed && txn && bytes.Contains(body, []byte(`"cas"`))
		if start {
			armed = false
		}
		failing := time.Now().Before(until) && (txn || r.URL.Path == "/v1/kv/"+ledgerKey(l))
		mu.Unlock()
		switch {
		case start:
			forward.ServeHTTP(httptest.NewRecorder(), r) // committed; the answer is lost
			mu.Lock()
			until = time.Now().Add(outage)
			mu.Unlock()
			http.Error(w, "No cluster leader", http.StatusInternalServerError)
		case failing:
			http.Error(w, "No cluster leader", http.StatusInternalServerError)
		default:
			forward.ServeHTTP(w, r)
		}
	})
	a := startRunAt(t, "runner a", addr, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "a")...)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want 0 (its attempt settled and run):\n%s", code, a.out.String())
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || runs[0].attempt != "1" {
		t.Fatalf("executions %+v; want one, as attempt 1", runs)
	}
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("the ledger says %+v; want attempt 1 succeeded", run)
	}
}

// Issue 31, item 5a: a run ID triggered again after keep newer runs (an
// explicit -run-id used as an idempotency key) is not run again: the
// ledger keeps the outcome of the runs it prunes.
func TestRunOnce_aPrunedRunThatSucceededIsNotRunAgain(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, Keep: 1})
	record := filepath.Join(t.TempDir(), "record")
	for i, id := range []string{"r1", "r2", "r1"} {
		p := startRun(t, fmt.Sprintf("runner %d", i+1), token, []string{"-lock", l.Name, "-run-id", id}, childArgs(record, fmt.Sprint(i+1))...)
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s (run %s) exited %d:\n%s", p.name, id, code, p.out.String())
		}
	}
	if runs := readRuns(t, record); len(runs) != 2 {
		t.Fatalf("%d executions, want 2 (r1 and r2; r1 triggered again after it was pruned is not run): %+v", len(runs), runs)
	}
	if led, _ := readLedger(t, l); len(led.Runs) != 1 || led.Runs[0].ID != "r2" ||
		!slices.Equal(led.Pruned, []ledger.PrunedRun{{ID: "r1", Outcome: ledger.RunSucceeded}}) {
		t.Fatalf("ledger %+v; want r2 kept and r1 pruned as succeeded", led)
	}
}

// BenchmarkOutcomeWaitAfterAPermanentOutage measures the longest a runner
// stays after its command: everything between it and Consul is cut just
// before the command exits and never healed, so the runner sends the
// outcome until its session is certainly gone (2 x ttl after the last
// renewal), tries the check-and-set through the lock-delay after (at
// least 10 s), then gives up, releases and destroys (each bounded by
// lockproto.CleanupTimeout) and exits 120. It reports the time from the
// command's exit to the runner's, against lockmodel.OutcomeWait + 2 x
// CleanupTimeout (profile ttl 10s, lock_delay 5s: 30 s + 10 s). Slow
// (about 40 s an iteration):
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench OutcomeWaitAfterAPermanentOutage -benchtime 1x ./internal/runner/
func BenchmarkOutcomeWaitAfterAPermanentOutage(b *testing.B) {
	p := outageProfile(b)
	bound := lockmodel.OutcomeWait(p.TTL, p.LockDelay) + 2*lockproto.CleanupTimeout
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		l, token := declareRunOnceWith(b, ledger.RunOnce{Period: time.Hour}, p)
		record := filepath.Join(b.TempDir(), "record")
		link := newLink(b, "127.0.0.1:0")
		a := startRunAt(b, "runner a", link.Addr(), token, []string{"-lock", l.Name, "-run-id", "r1", "-grace", "1s"},
			childArgs(record, "a", "-wait-stdin")...)
		waitStarted(b, record, "a")
		link.Cut()
		exited := time.Now()
		a.closeStdin()
		if code := a.wait(2 * bound); code != ExitOutcomeNotRecorded {
			b.Fatalf("runner a exited %d, want %d:\n%s", code, ExitOutcomeNotRecorded, a.out.String())
		}
		worst = max(worst, a.exited.Sub(exited))
	}
	b.ReportMetric(worst.Seconds(), "s-after-command")
	b.ReportMetric(bound.Seconds(), "s-bound")
	b.Logf("MEASURED the runner stayed %s after its command (bound: 2 x ttl + max(lock_delay, %s) + 2 x %s = %s)",
		worst.Round(time.Millisecond), lockmodel.MinAfterLossWindow, lockproto.CleanupTimeout, bound)
}
