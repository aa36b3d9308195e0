package status

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// daily is a run_once lock's slot n days before the latest one (00:00 UTC
// with a 24h period), as a run ID.
func daily(daysBefore int) (string, time.Time) {
	latest := time.Now().UTC().Truncate(24 * time.Hour)
	at := latest.AddDate(0, 0, -daysBefore)
	return at.Format(time.RFC3339), at
}

// dailyRun is a run of the slot daysBefore whose attempts ended with
// outcomes, its outcome the latest attempt's (as the runner records it).
func dailyRun(daysBefore int, outcomes ...ledger.RunOutcome) ledger.Run {
	id, at := daily(daysBefore)
	r := ledger.Run{ID: id}
	for i, o := range outcomes {
		code := 1
		if o == ledger.RunSucceeded {
			code = 0
		}
		a := ledger.Attempt{Number: i + 1, Node: "node-a", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: uint64(40 + i),
			Started: at.Add(time.Duration(i) * time.Minute), Finished: at.Add(time.Duration(i)*time.Minute + time.Second), ExitCode: &code, Outcome: o}
		if o == ledger.RunLost {
			a.ExitCode, a.Reason = nil, "session invalidated: node failed"
		}
		r.Attempts, r.Outcome = append(r.Attempts, a), o
	}
	return r
}

func (f *fixture) ledger(lock string, runs ...ledger.Run) {
	f.t.Helper()
	rec, err := record.EncodeLedger(ledger.Ledger{Lock: lock, Runs: runs})
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(record.RunLedgerKey(f.registry, lock), rec)
}

// TestStatusRunStateNeedsAttention: a run whose 3 of 3 attempts failed
// reads EXHAUSTED (the controller's word) in the table, -lock and -json,
// before any runner writes "exhausted", and exits 4; a scheduled lock that
// never ran and missed a slot reads MISSED and exits 5; a violation (1)
// comes before both, a pause before a missed slot; attempts show their
// reason.
func TestStatusRunStateNeedsAttention(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	_, declared := daily(3)
	f.lock(lockmodel.Lock{Name: "nightly", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}}, false)
	f.ledger("nightly", dailyRun(0, ledger.RunFailed, ledger.RunLost, ledger.RunFailed), dailyRun(1, ledger.RunSucceeded))
	f.lock(lockmodel.Lock{Name: "fine", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}}, false)
	f.ledger("fine", dailyRun(0, ledger.RunFailed, ledger.RunSucceeded))

	code, rep := f.report()
	n := lockByName(t, rep, "nightly")
	if code != ExitRunExhausted || rep.Summary.ExitCode != ExitRunExhausted || rep.Summary.Exhausted != 1 || n.LastRun == nil ||
		n.LastRun.Outcome != "exhausted" || n.RunState == nil || *n.RunState != "exhausted" {
		t.Fatalf("exit %d, summary %+v, nightly last_run %+v run_state %v; want exhausted, exit 4", code, rep.Summary, n.LastRun, n.RunState)
	}
	if fine := lockByName(t, rep, "fine"); fine.RunState == nil || *fine.RunState != "succeeded" {
		t.Fatalf("fine run_state %v, want succeeded", fine.RunState)
	}
	code, out, _ := f.run()
	if code != ExitRunExhausted || !strings.Contains(out, "RUN STATE") || !regexpLine(out, `^nightly .* exhausted 3/3\s+EXHAUSTED\s`) ||
		!regexpLine(out, `^fine .* SUCCEEDED\s`) {
		t.Fatalf("table (exit %d) lacks EXHAUSTED:\n%s", code, out)
	}
	code, out, _ = f.run("-lock", "nightly")
	if code != ExitRunExhausted || !regexpLine(out, `^Run state:\s+EXHAUSTED$`) || !strings.Contains(out, "session invalidated: node failed") {
		t.Fatalf("-lock nightly (exit %d) lacks EXHAUSTED or the lost attempt's reason:\n%s", code, out)
	}
	t.Logf("status -lock nightly:\n%s", out)
	if code, _, _ := f.run("-lock", "fine"); code != ExitOK {
		t.Fatalf("-lock fine: exit %d, want 0", code)
	}

	// A scheduled lock declared 3 days ago that never ran: MISSED, exit
	// 5 once nothing is exhausted.
	f.lock(lockmodel.Lock{Name: "never", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, Since: declared}}, false)
	f.ledger("nightly", dailyRun(0, ledger.RunSucceeded), dailyRun(1, ledger.RunSucceeded))
	code, rep = f.report()
	never := lockByName(t, rep, "never")
	if code != ExitSlotMissed || rep.Summary.Missed != 1 || never.RunState == nil || *never.RunState != RunStateMissed || never.LastRun != nil {
		t.Fatalf("exit %d, summary %+v, never run_state %v; want missed, exit 5", code, rep.Summary, never.RunState)
	}
	if code, out, _ := f.run(); code != ExitSlotMissed || !regexpLine(out, `^never .*\s-\s+MISSED\s`) {
		t.Fatalf("table (exit %d) lacks MISSED:\n%s", code, out)
	}

	// Paused: PAUSED, and its missed slots do not fail status.
	rec, err := record.EncodePauseRecord(record.Pause{Lock: "never", Reason: "INC-7", By: "alice@ops", At: declared})
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.PauseKey(f.registry, "never"), rec)
	code, rep = f.report()
	if never := lockByName(t, rep, "never"); code != ExitOK || never.RunState == nil || *never.RunState != RunStatePaused {
		t.Fatalf("paused: exit %d, run_state %v; want paused, exit 0", code, never.RunState)
	}

	// A violation comes first: an always-held lock without a holder.
	if code, _, _ := f.run("-always-held", "fine"); code != ExitViolation {
		t.Fatalf("-always-held fine: exit %d, want 1", code)
	}
}

// TestStatusRefusesUnknownLockNames: a name in -lock or -always-held that
// no lock declares exits 2 naming the flag, the value and the declared
// names, in the table, -json and -watch; "*" is every lock.
func TestStatusRefusesUnknownLockNames(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "alpha", SessionDefaults: "strict"}, false)
	f.lock(lockmodel.Lock{Name: "beta", SessionDefaults: "strict"}, false)
	for _, args := range [][]string{
		{"-always-held", "alpha,betta"},
		{"-json", "-always-held", "betta"},
		{"-watch", "-always-held", "betta"},
		{"-lock", "alpha", "-always-held", "betta"},
	} {
		code, out, errs := f.run(args...)
		if code != ExitUsage || !strings.Contains(errs, `-always-held "betta"`) || !strings.Contains(errs, "declared: alpha, beta") || out != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 naming -always-held, betta and the declared names", args, code, errs, out)
		}
	}
	if code, _, errs := f.run("-lock", "gamma"); code != ExitUsage || !strings.Contains(errs, `-lock "gamma"`) || !strings.Contains(errs, "declared: alpha, beta") {
		t.Errorf("-lock gamma: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := f.run("-always-held", "*"); code != ExitViolation || errs != "" {
		t.Errorf("-always-held '*': exit %d, stderr %q; want 1 (no lock is held)", code, errs)
	}
}

func regexpLine(out, re string) bool {
	return regexp.MustCompile(`(?m)` + re).MatchString(out)
}
