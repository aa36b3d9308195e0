package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// overlapLock declares a minutely run-once lock with run_once.overlap
// policy and the fast profile with lock-delay lockDelay, and returns it
// with a worker token and two past slots, older first.
func overlapLock(t *testing.T, policy ledger.Overlap, lockDelay time.Duration) (lockmodel.Lock, string, string, string) {
	t.Helper()
	ro := ledger.RunOnce{Schedule: "* * * * *", Overlap: policy}
	sched, err := ro.ParsedSchedule()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := sched.Prev(time.Now().Add(-10 * time.Minute))
	ro.Since = s.Add(-time.Hour)
	l, token := declareRunOnceWith(t, ro, fastProfile(t, lockDelay))
	return l, token, sched.SlotID(s), sched.SlotID(s.Add(time.Minute))
}

// overlap = "skip": while slot S1's command outlives its slot, the runner
// of S2 records S2 skipped (the attempt names S1), exits 117 without
// running it, and leaves S1 running; a later runner of S2 exits 117 too;
// a backfill runs S2.
func TestOverlap_skipRecordsTheNewRunSkipped(t *testing.T) {
	t.Parallel()
	l, token, s1, s2 := overlapLock(t, ledger.OverlapSkip, time.Second)
	record := t.TempDir() + "/record"
	old := startRun(t, "old", token, []string{"-lock", l.Name, "-run-id", s1}, childArgs(record, "old", "-wait-stdin")...)
	waitStarted(t, record, "old")
	waitFor(t, "slot "+s1+"'s attempt to be recorded running", func() bool {
		led, _ := readLedger(t, l)
		i := led.Find(s1)
		return i >= 0 && led.Runs[i].Outcome == ledger.RunRunning
	})
	next := startRun(t, "next", token, []string{"-lock", l.Name, "-run-id", s2}, childArgs(record, "next")...)
	if code := next.wait(time.Minute); code != ledger.ExitRunSkipped {
		t.Fatalf("the runner of %s exited %d, want %d:\n%s", s2, code, ledger.ExitRunSkipped, next.out.String())
	}
	run := ledgerRun(t, l, s2)
	if run.Outcome != ledger.RunSkipped || len(run.Attempts) != 1 || !strings.Contains(run.Attempts[0].Reason, s1) {
		t.Fatalf("ledger run %s = %+v, want one attempt skipped naming %s", s2, run, s1)
	}
	again := startRun(t, "again", token, []string{"-lock", l.Name, "-run-id", s2}, childArgs(record, "again")...)
	if code := again.wait(time.Minute); code != ledger.ExitRunSkipped {
		t.Fatalf("a later runner of the skipped %s exited %d, want %d:\n%s", s2, code, ledger.ExitRunSkipped, again.out.String())
	}
	old.closeStdin()
	if code := old.wait(time.Minute); code != 0 {
		t.Fatalf("the runner of %s exited %d:\n%s", s1, code, old.out.String())
	}
	for _, r := range readRuns(t, record) {
		if r.tag != "old" {
			t.Fatalf("%s ran a command", r.tag)
		}
	}
	b := startBackfill(t, "backfill", token, []string{"-lock", l.Name, "-from", s1, "-to", s2}, childArgs(record, "backfill")...)
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, b.out.String())
	}
	if run := ledgerRun(t, l, s2); run.Outcome != ledger.RunSucceeded {
		t.Fatalf("the backfill left %s %s", s2, run.Outcome)
	}
}

// overlap = "replace": while slot S1's command outlives its slot, the
// runner of S2 ends S1's session; S1's runner stops its command (SIGTERM)
// and S1's attempt is recorded replaced; S2's command starts only after
// S1's ended (and after the lock-delay), and succeeds. The gap between
// the old command's end and the new one's start is logged. A runner of
// the older S1 arriving while S2 runs does not replace it: it is skipped.
func TestOverlap_replaceStartsTheNewRunOnlyAfterTheOldCommandEnded(t *testing.T) {
	t.Parallel()
	const lockDelay = 2 * time.Second
	l, token, s1, s2 := overlapLock(t, ledger.OverlapReplace, lockDelay)
	record := t.TempDir() + "/record"
	old := startRun(t, "old", token, []string{"-lock", l.Name, "-run-id", s1, "-grace", "1s"}, childArgs(record, "old", "-wait-stdin")...)
	waitStarted(t, record, "old")
	waitFor(t, "slot "+s1+"'s attempt to be recorded running", func() bool {
		led, _ := readLedger(t, l)
		i := led.Find(s1)
		return i >= 0 && led.Runs[i].Outcome == ledger.RunRunning
	})
	next := startRun(t, "next", token, []string{"-lock", l.Name, "-run-id", s2}, childArgs(record, "next", "-wait-stdin")...)
	waitStarted(t, record, "next")
	if code := old.wait(time.Minute); code != ExitLockLost {
		t.Errorf("the replaced runner exited %d, want %d (lock lost):\n%s", code, ExitLockLost, old.out.String())
	}
	byTag := map[string]*childRun{}
	for _, r := range readRuns(t, record) {
		byTag[r.tag] = r
	}
	o, n := byTag["old"], byTag["next"]
	if !o.termed || !o.ended {
		t.Fatalf("the replaced command was not stopped by SIGTERM: %+v", o)
	}
	if !n.start.After(o.end) {
		t.Fatalf("the new run's command started at %s, before the replaced command ended at %s", n.start.Format(time.RFC3339Nano), o.end.Format(time.RFC3339Nano))
	}
	t.Logf("replace: the old command ended %s before the new one started (lock-delay %s)", n.start.Sub(o.end).Round(time.Millisecond), lockDelay)
	if run := ledgerRun(t, l, s1); run.Outcome != ledger.RunReplaced || !strings.Contains(run.Attempts[0].Reason, s2) {
		t.Errorf("ledger run %s = %+v, want replaced by %s", s1, run, s2)
	}

	stale := startRun(t, "stale", token, []string{"-lock", l.Name, "-run-id", s1}, childArgs(record, "stale")...)
	if code := stale.wait(time.Minute); code != ledger.ExitRunSkipped {
		t.Errorf("a runner of the replaced, older %s exited %d, want %d:\n%s", s1, code, ledger.ExitRunSkipped, stale.out.String())
	}
	next.closeStdin()
	if code := next.wait(time.Minute); code != 0 {
		t.Fatalf("the new run's runner exited %d:\n%s", code, next.out.String())
	}
	if run := ledgerRun(t, l, s2); run.Outcome != ledger.RunSucceeded {
		t.Errorf("ledger run %s = %s, want succeeded", s2, run.Outcome)
	}
}

// waitFor polls cond (the ledger offers no blocking query here) for up to
// 30s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
