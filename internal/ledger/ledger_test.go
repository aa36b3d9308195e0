package ledger

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

var (
	t0    = time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	nodeA = holder.Holder{Node: "worker-1", Session: "11111111-1111-1111-1111-111111111111", FencingToken: 100}
	nodeB = holder.Holder{Node: "worker-2", Session: "22222222-2222-2222-2222-222222222222", FencingToken: 200}
	nodeC = holder.Holder{Node: "worker-3", Session: "33333333-3333-3333-3333-333333333333", FencingToken: 300}
)

func code(c int) *int { return &c }

// begin runs Begin and fails the test on an error.
func begin(t *testing.T, l Ledger, id string, h holder.Holder, maxAttempts int, now time.Time) BeginDecision {
	t.Helper()
	d, err := l.Begin(id, h, maxAttempts, now)
	if err != nil {
		t.Fatalf("Begin(%q, %s): %v", id, h.Node, err)
	}
	return d
}

func finish(t *testing.T, l Ledger, id string, n int, o RunOutcome, exit *int, now time.Time) Ledger {
	t.Helper()
	out, err := l.Finish(id, n, o, exit, now)
	if err != nil {
		t.Fatalf("Finish(%q, %d, %s): %v", id, n, o, err)
	}
	return out
}

// checkLedger asserts what every ledger the rules produce must satisfy: it
// encodes and decodes to itself.
func checkLedger(t *testing.T, l Ledger) {
	t.Helper()
	b, err := encodeLedger(l)
	if err != nil {
		t.Fatalf("the rules produced a ledger the decoder refuses: %v", err)
	}
	back, err := decodeLedger(b)
	if err != nil {
		t.Fatalf("DecodeLedger(EncodeLedger(l)): %v", err)
	}
	if !reflect.DeepEqual(back, l) {
		t.Fatalf("round trip changed the ledger:\n got %+v\nwant %+v", back, l)
	}
}

func TestBegin_aNewRunIsAttempt1RecordedRunningBeforeTheCommand(t *testing.T) {
	l := Ledger{Lock: "nightly"}
	d := begin(t, l, "2026-12-01T00:00:00Z", nodeA, 3, t0)
	if d.Kind != BeginRun || d.Attempt != 1 || !d.Changed {
		t.Fatalf("decision %v attempt %d changed %v, want run attempt 1 with a write", d.Kind, d.Attempt, d.Changed)
	}
	want := Run{ID: "2026-12-01T00:00:00Z", Outcome: RunRunning, Attempts: []Attempt{{
		Number: 1, Node: "worker-1", Session: nodeA.Session, FencingToken: 100, Started: t0, Outcome: RunRunning,
	}}}
	if !reflect.DeepEqual(d.Ledger.Runs, []Run{want}) {
		t.Fatalf("ledger %+v, want %+v", d.Ledger.Runs, want)
	}
	if len(l.Runs) != 0 {
		t.Fatal("Begin changed the ledger it was given")
	}
	checkLedger(t, d.Ledger)
}

func TestBegin_aSucceededRunIsNotRunAgain(t *testing.T) {
	l := begin(t, Ledger{Lock: "nightly"}, "r1", nodeA, 3, t0).Ledger
	l = finish(t, l, "r1", 1, RunSucceeded, code(0), t0.Add(time.Minute))
	for _, h := range []holder.Holder{nodeB, nodeA} { // another node, and the same node again later
		d := begin(t, l, "r1", h, 3, t0.Add(time.Hour))
		if d.Kind != BeginAlreadySucceeded || d.Changed || d.Succeeded.Node != "worker-1" || d.Succeeded.FencingToken != 100 {
			t.Fatalf("%s: decision %v %+v, want already succeeded by worker-1 with token 100, nothing written", h.Node, d.Kind, d.Succeeded)
		}
	}
}

func TestBegin_aRunningAttemptOfAnotherSessionCrashed(t *testing.T) {
	l := begin(t, Ledger{Lock: "nightly"}, "r1", nodeA, 3, t0).Ledger
	// worker-1 vanished without recording an outcome; worker-2 acquired.
	d := begin(t, l, "r1", nodeB, 3, t0.Add(time.Minute))
	if d.Kind != BeginRun || d.Attempt != 2 {
		t.Fatalf("decision %v attempt %d, want run attempt 2", d.Kind, d.Attempt)
	}
	first := d.Ledger.Runs[0].Attempts[0]
	if first.Outcome != RunCrashed || !first.Finished.Equal(t0.Add(time.Minute)) || first.ExitCode != nil {
		t.Fatalf("attempt 1 = %+v, want crashed when worker-2 found it, with no exit code", first)
	}
	if r := d.Ledger.Runs[0]; r.Outcome != RunRunning || r.Attempts[1].Node != "worker-2" {
		t.Fatalf("run = %+v, want running attempt 2 on worker-2", r)
	}
	checkLedger(t, d.Ledger)
}

func TestBegin_ourOwnRunningAttemptIsRunWithoutAWrite(t *testing.T) {
	l := begin(t, Ledger{Lock: "nightly"}, "r1", nodeA, 3, t0).Ledger
	d := begin(t, l, "r1", nodeA, 3, t0.Add(time.Second))
	if d.Kind != BeginRun || d.Attempt != 1 || d.Changed || !reflect.DeepEqual(d.Ledger, l) {
		t.Fatalf("decision %v attempt %d changed %v, want attempt 1 again with nothing to write", d.Kind, d.Attempt, d.Changed)
	}
}

func TestBegin_failedLostAndCrashedAreRetriedUntilMaxAttempts(t *testing.T) {
	for _, o := range []RunOutcome{RunFailed, RunLost, RunCrashed} {
		t.Run(string(o), func(t *testing.T) {
			l := Ledger{Lock: "nightly"}
			for i, h := range []holder.Holder{nodeA, nodeB, nodeC} {
				d := begin(t, l, "r1", h, 3, t0.Add(time.Duration(i)*time.Minute))
				if d.Kind != BeginRun || d.Attempt != i+1 {
					t.Fatalf("holder %s: decision %v attempt %d, want run attempt %d", h.Node, d.Kind, d.Attempt, i+1)
				}
				l = d.Ledger
				switch o {
				case RunFailed:
					l = finish(t, l, "r1", i+1, RunFailed, code(1), t0.Add(time.Duration(i)*time.Minute+time.Second))
				case RunLost:
					l = finish(t, l, "r1", i+1, RunLost, nil, t0.Add(time.Duration(i)*time.Minute+time.Second))
				case RunCrashed: // the next Begin finds it running
				}
			}
			d := begin(t, l, "r1", nodeA, 3, t0.Add(time.Hour))
			if d.Kind != BeginExhausted || len(d.Attempts) != 3 || d.Ledger.Runs[0].Outcome != RunExhausted || !d.Changed {
				t.Fatalf("4th begin: decision %v, %d attempts, run %q, changed %v; want exhausted after 3, recorded",
					d.Kind, len(d.Attempts), d.Ledger.Runs[0].Outcome, d.Changed)
			}
			if last := d.Attempts[2]; last.Outcome != o {
				t.Fatalf("attempt 3 = %q, want %q", last.Outcome, o)
			}
			checkLedger(t, d.Ledger)
			// Once recorded, exhausted stays so without another write...
			again := begin(t, d.Ledger, "r1", nodeB, 3, t0.Add(2*time.Hour))
			if again.Kind != BeginExhausted || again.Changed {
				t.Fatalf("again: %v changed %v, want exhausted with nothing to write", again.Kind, again.Changed)
			}
			// ...until max_attempts is raised.
			more := begin(t, d.Ledger, "r1", nodeB, 4, t0.Add(2*time.Hour))
			if more.Kind != BeginRun || more.Attempt != 4 || more.Ledger.Runs[0].Outcome != RunRunning {
				t.Fatalf("max_attempts 4: %v attempt %d, want run attempt 4", more.Kind, more.Attempt)
			}
			checkLedger(t, more.Ledger)
		})
	}
}

func TestBegin_refusesBadInput(t *testing.T) {
	l := Ledger{Lock: "nightly"}
	if _, err := l.Begin("a b", nodeA, 3, t0); validation.AsFieldErrors(err) == nil || validation.AsFieldErrors(err)[0].Field != "-run-id" {
		t.Errorf("bad run ID: %v, want a -run-id error", err)
	}
	for _, m := range []int{0, 101} {
		if _, err := l.Begin("r1", nodeA, m, t0); validation.AsFieldErrors(err) == nil {
			t.Errorf("max attempts %d: %v, want a field error", m, err)
		}
	}
	if _, err := l.Begin("r1", holder.Holder{Node: "n"}, 3, t0); err == nil {
		t.Error("a holder without session was accepted")
	}
}

func TestFinish(t *testing.T) {
	started := begin(t, Ledger{Lock: "nightly"}, "r1", nodeA, 3, t0).Ledger
	t.Run("records the outcome, the exit code and the time", func(t *testing.T) {
		l := finish(t, started, "r1", 1, RunFailed, code(2), t0.Add(time.Minute))
		a := l.Runs[0].Attempts[0]
		if a.Outcome != RunFailed || *a.ExitCode != 2 || !a.Finished.Equal(t0.Add(time.Minute)) || l.Runs[0].Outcome != RunFailed {
			t.Fatalf("attempt %+v run %q, want failed with exit 2", a, l.Runs[0].Outcome)
		}
		if started.Runs[0].Attempts[0].Outcome != RunRunning {
			t.Fatal("Finish changed the ledger it was given")
		}
		checkLedger(t, l)
	})
	t.Run("the same outcome again changes nothing", func(t *testing.T) {
		l := finish(t, started, "r1", 1, RunSucceeded, code(0), t0.Add(time.Minute))
		again := finish(t, l, "r1", 1, RunSucceeded, code(0), t0.Add(2*time.Minute))
		if !reflect.DeepEqual(again, l) {
			t.Fatal("recording the same outcome twice changed the ledger")
		}
	})
	t.Run("an attempt another holder marked crashed is not finished", func(t *testing.T) {
		l := begin(t, started, "r1", nodeB, 3, t0.Add(time.Minute)).Ledger
		_, err := l.Finish("r1", 1, RunSucceeded, code(0), t0.Add(2*time.Minute))
		if !errors.Is(err, ErrAttemptNotRunning) {
			t.Fatalf("Finish of a crashed attempt = %v, want ErrAttemptNotRunning", err)
		}
	})
	for _, tc := range []struct {
		name    string
		id      string
		n       int
		outcome RunOutcome
		exit    *int
	}{
		{"unknown run", "r2", 1, RunSucceeded, code(0)},
		{"unknown attempt", "r1", 2, RunSucceeded, code(0)},
		{"crashed is not a finish", "r1", 1, RunCrashed, nil},
		{"running is not a finish", "r1", 1, RunRunning, nil},
		{"exhausted is a run's outcome", "r1", 1, RunExhausted, nil},
		{"succeeded with a non-zero exit", "r1", 1, RunSucceeded, code(1)},
		{"failed with exit 0", "r1", 1, RunFailed, code(0)},
		{"failed without an exit code", "r1", 1, RunFailed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := started.Finish(tc.id, tc.n, tc.outcome, tc.exit, t0); err == nil {
				t.Fatal("Finish accepted it")
			}
		})
	}
}

func TestPrune_keepsTheNewestAndNeverTheCurrentRun(t *testing.T) {
	l := Ledger{Lock: "nightly"}
	for i := range 5 {
		id := fmt.Sprintf("r%d", i)
		l = finish(t, begin(t, l, id, nodeA, 3, t0).Ledger, id, 1, RunSucceeded, code(0), t0)
	}
	ids := func(l Ledger) (out []string) {
		for _, r := range l.Runs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(l.Prune(3, "r4")); !reflect.DeepEqual(got, []string{"r4", "r3", "r2"}) {
		t.Errorf("Prune(3, newest) = %v", got)
	}
	if got := ids(l.Prune(3, "r0")); !reflect.DeepEqual(got, []string{"r4", "r3", "r0"}) {
		t.Errorf("Prune(3, oldest) = %v, want the oldest kept as the current run", got)
	}
	if got := ids(l.Prune(10, "r0")); len(got) != 5 {
		t.Errorf("Prune(10) = %v, want all 5", got)
	}
	if got := ids(l.Prune(1, "r2")); !reflect.DeepEqual(got, []string{"r2"}) {
		t.Errorf("Prune(1, r2) = %v", got)
	}
	if len(l.Runs) != 5 {
		t.Error("Prune changed the ledger it was given")
	}
}

// TestFinishWithReason: a lost attempt records why (the runner's loss
// reason, as it logged it), bounded to MaxAttemptReason bytes; the reason
// survives the record; other outcomes may carry none, and Finish records
// none.
func TestFinishWithReason(t *testing.T) {
	started := begin(t, Ledger{Lock: "nightly"}, "r1", nodeA, 3, t0).Ledger
	why := "the token lost session:write on worker-1: no successful session renewal for 5.3s"
	l, err := started.FinishWithReason("r1", 1, RunLost, nil, why, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if a := l.Runs[0].Attempts[0]; a.Outcome != RunLost || a.Reason != why {
		t.Fatalf("attempt %+v, want lost with the reason", a)
	}
	checkLedger(t, l)
	b, _ := encodeLedger(l)
	if !strings.Contains(string(b), `"reason":"the token lost session:write on worker-1`) {
		t.Errorf("the record does not carry the reason: %s", b)
	}
	long, err := started.FinishWithReason("r1", 1, RunLost, nil, strings.Repeat("x", 2*MaxAttemptReason), t0)
	if err != nil || len(long.Runs[0].Attempts[0].Reason) > MaxAttemptReason {
		t.Fatalf("a long reason: %v, %d bytes kept", err, len(long.Runs[0].Attempts[0].Reason))
	}
	checkLedger(t, long)
	if l, err := started.FinishWithReason("r1", 1, RunSucceeded, code(0), why, t0); err != nil || l.Runs[0].Attempts[0].Reason != "" {
		t.Errorf("a succeeded attempt (the command exited, then the lock was lost): %v, reason %q; want none", err, l.Runs[0].Attempts[0].Reason)
	}
	if l := finish(t, started, "r1", 1, RunLost, nil, t0); l.Runs[0].Attempts[0].Reason != "" {
		t.Error("Finish recorded a reason")
	}
	b, _ = encodeLedger(finish(t, started, "r1", 1, RunLost, nil, t0))
	if strings.Contains(string(b), "reason") {
		t.Errorf("an attempt without a reason has the field: %s", b)
	}
}

// Issue 31, item 5a: a run pruned from the ledger after keep newer runs
// is not forgotten: run again with the same ID (an explicit -run-id used as
// an idempotency key, a scheduler retrying an old launch), it is not run.
func TestBegin_aPrunedRunThatSucceededIsNotRunAgain(t *testing.T) {
	l := Ledger{Lock: "nightly"}
	for i := range 5 {
		id := fmt.Sprintf("r%d", i)
		l = finish(t, begin(t, l, id, nodeA, 3, t0).Ledger, id, 1, RunSucceeded, code(0), t0).Prune(3, id)
	}
	if l.Find("r0") >= 0 {
		t.Fatalf("r0 was not pruned: %+v", l)
	}
	checkLedger(t, l)
	if d := begin(t, l, "r0", nodeB, 3, t0); d.Kind != BeginAlreadySucceeded || d.Changed {
		t.Fatalf("Begin(pruned r0) = %v (changed %v), want already succeeded, nothing written", d.Kind, d.Changed)
	}
}

func TestPrune_keepsDoneRunsCompactlyAndForgetsPastTheBound(t *testing.T) {
	l := Ledger{Lock: "nightly"}
	// r0 exhausted (1 attempt of 1, failed), r1 failed with attempts left,
	// r2.. succeeded.
	l = finish(t, begin(t, l, "r0", nodeA, 1, t0).Ledger, "r0", 1, RunFailed, code(3), t0)
	l = begin(t, l, "r0", nodeB, 1, t0).Ledger // marks it exhausted
	l = finish(t, begin(t, l, "r1", nodeA, 3, t0).Ledger, "r1", 1, RunFailed, code(3), t0)
	l = finish(t, begin(t, l, "r2", nodeA, 3, t0).Ledger, "r2", 1, RunSucceeded, code(0), t0)
	l = l.Prune(1, "r2")
	if want := []PrunedRun{{"r0", RunExhausted}}; !reflect.DeepEqual(l.Pruned, want) {
		t.Fatalf("pruned %+v, want %+v (r1, not done, is not kept)", l.Pruned, want)
	}
	checkLedger(t, l)
	if d := begin(t, l, "r0", nodeC, 1, t0); d.Kind != BeginExhausted || !d.Pruned || d.Changed {
		t.Errorf("Begin(pruned exhausted r0) = %+v, want exhausted, pruned, nothing written", d)
	}
	if d := begin(t, l, "r1", nodeC, 3, t0); d.Kind != BeginRun || d.Attempt != 1 {
		t.Errorf("Begin(pruned failed r1) = %+v, want attempt 1 of a fresh run", d)
	}
	if r, ok := l.DoneRun("r0", 1); !ok || r.Outcome != RunExhausted {
		t.Errorf("DoneRun(r0) = %+v %v", r, ok)
	}

	// The current run kept in place of a newer one: the newer one goes
	// first among the pruned.
	l = Ledger{Lock: "nightly"}
	for _, id := range []string{"a", "b", "c"} {
		l = finish(t, begin(t, l, id, nodeA, 3, t0).Ledger, id, 1, RunSucceeded, code(0), t0)
	}
	if got := l.Prune(1, "a"); len(got.Runs) != 1 || got.Runs[0].ID != "a" ||
		!reflect.DeepEqual(got.Pruned, []PrunedRun{{"c", RunSucceeded}, {"b", RunSucceeded}}) {
		t.Errorf("Prune(1, a) = %+v", got)
	}

	// Past MaxPrunedRuns: slot run IDs (times) up to the newest forgotten
	// one are refused; other run IDs are new.
	l = Ledger{Lock: "every-minute"}
	slot := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	id := func(i int) string { return slot.Add(time.Duration(i) * time.Minute).Format(time.RFC3339) }
	n := MaxPrunedRuns + 20 + 3
	for i := range n {
		l = finish(t, begin(t, l, id(i), nodeA, 3, t0).Ledger, id(i), 1, RunSucceeded, code(0), t0).Prune(20, id(i))
	}
	if len(l.Pruned) != MaxPrunedRuns || l.Forgotten.Runs != 3 || !l.Forgotten.Through.Equal(slot.Add(2*time.Minute)) {
		t.Fatalf("pruned %d, forgotten %+v; want %d and 3 through %s", len(l.Pruned), l.Forgotten, MaxPrunedRuns, id(2))
	}
	checkLedger(t, l)
	for i := range 3 {
		if _, err := l.Begin(id(i), nodeB, 3, t0); !errors.Is(err, ErrRunForgotten) || !strings.Contains(err.Error(), "remembers the last 1000") {
			t.Errorf("Begin(forgotten %s) = %v, want ErrRunForgotten naming the bound", id(i), err)
		}
	}
	if d := begin(t, l, id(3), nodeB, 3, t0); d.Kind != BeginAlreadySucceeded || !d.Pruned {
		t.Errorf("Begin(oldest remembered %s) = %+v, want already succeeded", id(3), d)
	}
	if d := begin(t, l, "manual-1", nodeB, 3, t0); d.Kind != BeginRun {
		t.Errorf("Begin(a new run ID that is not a time) = %+v, want run", d)
	}
	if d := begin(t, l, id(n+5), nodeB, 3, t0); d.Kind != BeginRun {
		t.Errorf("Begin(a later slot) = %+v, want run", d)
	}
	if b, err := encodeLedger(l); err != nil || len(b) > 150*1024 {
		t.Errorf("the ledger with %d pruned runs encodes to %d bytes (%v)", len(l.Pruned), len(b), err)
	} else {
		t.Logf("MEASURED a ledger of 20 runs (1 attempt each) and %d pruned runs: %d bytes", len(l.Pruned), len(b))
	}
}

func TestDecodeLedger_refusesBadPrunedRuns(t *testing.T) {
	l := Ledger{Lock: "nightly", Pruned: []PrunedRun{{"r0", RunSucceeded}}}
	b, err := encodeLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, field string }{
		{`"outcome":"succeeded"`, `"outcome":"failed"`, "pruned[0].outcome"},
		{`"run_id":"r0"`, `"run_id":"bad id"`, "pruned[0].run_id"},
		{`"pruned":[`, `"forgotten":{"runs":0,"through":null},"pruned":[`, "forgotten.runs"},
		{`"pruned":[`, `"forgotten":{"runs":2,"through":"yesterday"},"pruned":[`, "forgotten.through"},
	} {
		bad := strings.Replace(string(b), c.from, c.to, 1)
		if bad == string(b) {
			t.Fatalf("%s: %q not in %s", c.field, c.from, b)
		}
		if _, err := decodeLedger([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("DecodeLedger with a bad %s: %v", c.field, err)
		}
	}
}

func TestAttemptOutcome(t *testing.T) {
	l := Ledger{Runs: []Run{{ID: "r1", Attempts: []Attempt{{Number: 1, Outcome: RunLost}, {Number: 2, Outcome: RunSucceeded}}}}}
	for _, c := range []struct {
		id   string
		n    int
		want RunOutcome
	}{{"r1", 1, RunLost}, {"r1", 2, RunSucceeded}, {"r1", 3, ""}, {"r2", 1, ""}} {
		if got := l.AttemptOutcome(c.id, c.n); got != c.want {
			t.Errorf("AttemptOutcome(%q, %d) = %q, want %q", c.id, c.n, got, c.want)
		}
	}
}
