package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRetryWait_growsByTheFactorAndIsCapped(t *testing.T) {
	cases := []struct {
		name string
		p    AttemptPolicy
		n    int
		want time.Duration
	}{
		{"no retry_after: at once", AttemptPolicy{}, 3, 0},
		{"after attempt 1: retry_after", AttemptPolicy{RetryAfter: 10 * time.Second, RetryBackoff: 3}, 1, 10 * time.Second},
		{"after attempt 3: retry_after x 3^2", AttemptPolicy{RetryAfter: 10 * time.Second, RetryBackoff: 3}, 3, 90 * time.Second},
		{"factor 0 is the default 2", AttemptPolicy{RetryAfter: time.Second}, 4, 8 * time.Second},
		{"factor 1: the same each time", AttemptPolicy{RetryAfter: time.Minute, RetryBackoff: 1}, 50, time.Minute},
		{"capped at MaxRetryWait", AttemptPolicy{RetryAfter: time.Hour, RetryBackoff: 10}, 100, MaxRetryWait},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.RetryWait(c.n); got != c.want {
				t.Fatalf("RetryWait(%d) = %s, want %s", c.n, got, c.want)
			}
			if got := c.p.RetryWait(c.n); got < 0 || got > MaxRetryWait {
				t.Fatalf("RetryWait(%d) = %s outside 0..%s", c.n, got, MaxRetryWait)
			}
		})
	}
}

// policy of these tests: 3 attempts, 1m then 2m between them.
var retryPolicy = AttemptPolicy{MaxAttempts: 3, RetryAfter: time.Minute, RetryBackoff: 2}

func beginWith(t *testing.T, l Ledger, h holder.Holder, now time.Time) BeginDecision {
	t.Helper()
	d, err := l.BeginWith("r1", h, retryPolicy, now)
	if err != nil {
		t.Fatalf("BeginWith(%s): %v", h.Node, err)
	}
	return d
}

func TestBeginWith_noAttemptStartsBeforeNotBefore(t *testing.T) {
	for _, o := range []RunOutcome{RunFailed, RunLost, RunTimedOut, RunCrashed, RunReleased} {
		t.Run(string(o), func(t *testing.T) {
			l := beginWith(t, Ledger{Lock: "nightly"}, nodeA, t0).Ledger
			end := t0.Add(10 * time.Second)
			var exit *int
			if o == RunFailed {
				exit = code(1)
			}
			switch o {
			case RunCrashed:
				// The next holder finds attempt 1 running: crashed, and
				// the wait starts at that finding; it writes that and waits.
				d := beginWith(t, l, nodeB, end)
				if d.Kind != BeginWait || !d.Changed || !d.NotBefore.Equal(end.Add(time.Minute)) {
					t.Fatalf("crashed: %v changed %v not_before %s, want wait until %s, recorded", d.Kind, d.Changed, d.NotBefore, end.Add(time.Minute))
				}
				l = d.Ledger
			case RunReleased:
				// `consullock release` records no wait (it does not know
				// the policy); the wait starts at the release, a waiter
				// sees it, and the next holder writes it and waits.
				var found bool
				if l, _, _, found = l.Release(nodeA.Session, "bob@ops", "stuck", end); !found {
					t.Fatal("release: attempt 1 not found")
				}
				if got := l.Runs[0].NotBeforeUnder(retryPolicy); !got.Equal(end.Add(time.Minute)) {
					t.Fatalf("released: a waiter sees not_before %s, want the release's time + retry_after = %s", got, end.Add(time.Minute))
				}
				d := beginWith(t, l, nodeB, end.Add(time.Second))
				if d.Kind != BeginWait || !d.Changed || !d.NotBefore.Equal(end.Add(time.Minute)) {
					t.Fatalf("released: %v changed %v not_before %s, want wait until %s, recorded", d.Kind, d.Changed, d.NotBefore, end.Add(time.Minute))
				}
				l = d.Ledger
			default:
				var err error
				if l, err = l.FinishWith("r1", 1, AttemptResult{Outcome: o, ExitCode: exit}, retryPolicy, end); err != nil {
					t.Fatal(err)
				}
			}
			checkLedger(t, l)
			nb := l.Runs[0].NotBefore
			if !nb.Equal(end.Add(time.Minute)) {
				t.Fatalf("not_before = %s, want the outcome's time + retry_after = %s", nb, end.Add(time.Minute))
			}
			// Just before: wait, nothing to write.
			d := beginWith(t, l, nodeC, nb.Add(-time.Millisecond))
			if d.Kind != BeginWait || d.Changed || !d.NotBefore.Equal(nb) {
				t.Fatalf("before not_before: %v changed %v, want wait with nothing to write", d.Kind, d.Changed)
			}
			// At not_before: attempt 2, and the wait is cleared.
			d = beginWith(t, l, nodeC, nb)
			if d.Kind != BeginRun || d.Attempt != 2 || !d.Ledger.Runs[0].NotBefore.IsZero() {
				t.Fatalf("at not_before: %v attempt %d not_before %s, want run attempt 2 with no wait", d.Kind, d.Attempt, d.Ledger.Runs[0].NotBefore)
			}
			// Attempt 2 fails: the wait doubles.
			l2, err := d.Ledger.FinishWith("r1", 2, AttemptResult{Outcome: RunFailed, ExitCode: code(2)}, retryPolicy, nb.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := l2.Runs[0].NotBefore, nb.Add(time.Second+2*time.Minute); !got.Equal(want) {
				t.Fatalf("after attempt 2: not_before %s, want %s (retry_after x 2)", got, want)
			}
			// Attempt 3 fails: no attempt left, no wait; exhausted comes first.
			d = beginWith(t, l2, nodeA, l2.Runs[0].NotBefore)
			l3, err := d.Ledger.FinishWith("r1", 3, AttemptResult{Outcome: RunFailed, ExitCode: code(2)}, retryPolicy, l2.Runs[0].NotBefore)
			if err != nil {
				t.Fatal(err)
			}
			if !l3.Runs[0].NotBefore.IsZero() {
				t.Fatalf("after the last attempt: not_before %s, want none", l3.Runs[0].NotBefore)
			}
			if d := beginWith(t, l3, nodeB, l2.Runs[0].NotBefore); d.Kind != BeginExhausted {
				t.Fatalf("after 3 attempts: %v, want exhausted", d.Kind)
			}
			checkLedger(t, l3)
		})
	}
}

// A released attempt waits as a failed one would, and only when attempts
// remain and a wait is configured; a recorded wait is left as it is.
func TestNotBeforeUnder_aReleasedAttemptWaitsAsAFailedOne(t *testing.T) {
	released := func(n int) Run {
		r := Run{ID: "r1", Outcome: RunReleased}
		for i := 1; i <= n; i++ {
			o := RunFailed
			if i == n {
				o = RunReleased
			}
			r.Attempts = append(r.Attempts, Attempt{Number: i, Outcome: o, Finished: t0})
		}
		return r
	}
	recorded := released(1)
	recorded.NotBefore = t0.Add(time.Hour)
	cases := []struct {
		name string
		run  Run
		p    AttemptPolicy
		want time.Time
	}{
		{"released attempt 1: retry_after", released(1), retryPolicy, t0.Add(time.Minute)},
		{"released attempt 2: retry_after x backoff", released(2), retryPolicy, t0.Add(2 * time.Minute)},
		{"released last attempt: none", released(3), retryPolicy, time.Time{}},
		{"no retry_after: none", released(1), AttemptPolicy{MaxAttempts: 3}, time.Time{}},
		{"a recorded wait stands", recorded, retryPolicy, t0.Add(time.Hour)},
		{"failed without a recorded wait: none", Run{ID: "r1", Outcome: RunFailed, Attempts: []Attempt{{Number: 1, Outcome: RunFailed, Finished: t0}}}, retryPolicy, time.Time{}},
		{"no attempt: none", Run{ID: "r1", Outcome: RunRunning}, retryPolicy, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.run.NotBeforeUnder(c.p)
			if !got.Equal(c.want) {
				t.Fatalf("NotBeforeUnder = %s, want %s", got, c.want)
			}
			// Invariant: as a failed attempt's wait (FinishWith's) for the
			// same attempt at the same time.
			if n := len(c.run.Attempts); c.run.NotBefore.IsZero() && n > 0 && c.run.Attempts[n-1].Outcome == RunReleased {
				if want := c.p.notBefore(n, t0); !got.Equal(want) {
					t.Fatalf("released: %s, failed: %s", got, want)
				}
			}
		})
	}
}

func TestBeginWith_aSucceededRunIgnoresNotBefore(t *testing.T) {
	l := beginWith(t, Ledger{Lock: "nightly"}, nodeA, t0).Ledger
	l, _ = l.FinishWith("r1", 1, AttemptResult{Outcome: RunTimedOut, ExitCode: code(143)}, retryPolicy, t0)
	l = beginWith(t, l, nodeB, t0.Add(time.Minute)).Ledger
	l, err := l.FinishWith("r1", 2, AttemptResult{Outcome: RunSucceeded, ExitCode: code(0)}, retryPolicy, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if d := beginWith(t, l, nodeC, t0.Add(2*time.Minute)); d.Kind != BeginAlreadySucceeded {
		t.Fatalf("%v, want already succeeded", d.Kind)
	}
}

func TestFinishWith_keepsOutputAndTimedOut(t *testing.T) {
	l := beginWith(t, Ledger{Lock: "nightly"}, nodeA, t0).Ledger
	l, err := l.FinishWith("r1", 1, AttemptResult{Outcome: RunTimedOut, Output: "took too long\n"}, AttemptPolicy{}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	a := l.Runs[0].Attempts[0]
	if a.Outcome != RunTimedOut || a.Output != "took too long\n" || a.ExitCode != nil || l.Runs[0].Outcome != RunTimedOut {
		t.Fatalf("attempt %+v, run %q", a, l.Runs[0].Outcome)
	}
	if !l.Runs[0].NotBefore.IsZero() {
		t.Fatalf("no retry_after: not_before %s, want none", l.Runs[0].NotBefore)
	}
	checkLedger(t, l)
	if _, err := l.FinishWith("r1", 1, AttemptResult{Outcome: RunCrashed}, AttemptPolicy{}, t0); err == nil {
		t.Fatal("finishing an attempt crashed: no error")
	}
}

func TestTailOutput_isTheBoundedEndAsValidUTF8(t *testing.T) {
	cases := []struct {
		name string
		in   string
		size int
		want string
	}{
		{"off", "abc", 0, ""},
		{"fits", "abc", 10, "abc"},
		{"the end", "0123456789", 4, "6789"},
		{"quotes count twice", `a"b"`, 4, `b"`},
		{"control bytes count six", "x\x01y", 6, "y"},
		{"a rune is not cut", "aé", 1, ""},
		{"invalid bytes become U+FFFD", "a\xffb", 10, "a\uFFFDb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := TailOutput([]byte(c.in), c.size)
			if got != c.want {
				t.Fatalf("TailOutput(%q, %d) = %q, want %q", c.in, c.size, got, c.want)
			}
			checkTail(t, got, c.size)
		})
	}
}

// checkTail: valid UTF-8 taking at most size bytes in the ledger's JSON.
func checkTail(t *testing.T, s string, size int) {
	t.Helper()
	b, err := marshalJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(s) || len(b)-2 > size {
		t.Fatalf("%q: valid %v, %d JSON bytes, want valid and at most %d", s, utf8.ValidString(s), len(b)-2, size)
	}
}

func FuzzTailOutput(f *testing.F) {
	f.Add([]byte("hello\n\"world\"\x00\xff"), 7)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		size = size % (MaxKeepOutput + 1)
		checkTail(t, TailOutput(b, size), max(size, 0))
	})
}

// The documented bound: keep runs of max_attempts attempts, each with the
// largest output the lock allows of the worst bytes (each escaped to 6),
// the longest node names and loss reasons (escaped to twice their size)
// and a full list of pruned runs, fit Consul's limit on a KV value.
func TestKeepOutputBudget_aFullLedgerFitsConsulsLimit(t *testing.T) {
	for _, c := range []struct{ keep, attempts int }{{20, 3}, {1, 1}, {5, 10}, {100, 5}, {1000, 1}} {
		size := KeepOutputBudget(c.keep, c.attempts)
		if size == 0 {
			if err := ValidateKeepOutput(1, c.keep, c.attempts); err == nil {
				t.Fatalf("keep %d x %d: budget 0 but 1 byte accepted", c.keep, c.attempts)
			}
			continue
		}
		worst := TailOutput([]byte(strings.Repeat("\x01", size)), size)
		node := strings.Repeat(`"`, 256)
		l := Ledger{Lock: strings.Repeat("n", 128)}
		for p := range MaxPrunedRuns {
			l.Pruned = append(l.Pruned, PrunedRun{ID: fmt.Sprintf("p%0*d", MaxRunIDLength-1, p), Outcome: RunSucceeded})
		}
		for r := 0; r < c.keep; r++ {
			run := Run{ID: fmt.Sprintf("%0*d", MaxRunIDLength, r), Outcome: RunLost, NotBefore: t0}
			for a := 1; a <= c.attempts; a++ {
				run.Attempts = append(run.Attempts, Attempt{Number: a, Node: node, Session: nodeA.Session, FencingToken: ^uint64(0),
					Started: t0.Add(123456789 * time.Nanosecond), Finished: t0.Add(987654321 * time.Nanosecond), ExitCode: code(255),
					Outcome: RunLost, Output: worst, Reason: strings.Repeat(`"`, MaxAttemptReason)})
			}
			l.Runs = append(l.Runs, run)
		}
		b, err := encodeLedger(l)
		if err != nil {
			t.Fatalf("keep %d x %d attempts x %d bytes: %v", c.keep, c.attempts, size, err)
		}
		back, err := decodeLedger(b)
		if err != nil || back.Runs[len(back.Runs)-1].Attempts[0].Output != worst {
			t.Fatalf("keep %d x %d: outputs dropped or undecodable (%v): the budget is not what fits", c.keep, c.attempts, err)
		}
		t.Logf("keep %d x %d attempts: -keep-output up to %d bytes; worst ledger %d of %d bytes", c.keep, c.attempts, size, len(b), MaxLedgerBytes)
		if err := ValidateKeepOutput(size+1, c.keep, c.attempts); err == nil && size < MaxKeepOutput {
			t.Fatalf("keep %d x %d: %d bytes accepted above the budget", c.keep, c.attempts, size+1)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestEncodeLedger_dropsTheOldestOutputsToFit(t *testing.T) {
	big := strings.Repeat("x", MaxKeepOutput)
	l := Ledger{Lock: "nightly"}
	for r := 0; r < 12; r++ {
		l.Runs = append(l.Runs, Run{ID: "r" + itoa(r), Outcome: RunFailed, Attempts: []Attempt{{Number: 1, Node: "n", Session: nodeA.Session,
			FencingToken: 1, Started: t0, Finished: t0, ExitCode: code(1), Outcome: RunFailed, Output: big}}})
	}
	b, err := encodeLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxLedgerBytes {
		t.Fatalf("%d bytes > %d", len(b), MaxLedgerBytes)
	}
	back, _ := decodeLedger(b)
	if back.Runs[0].Attempts[0].Output != big || back.Runs[11].Attempts[0].Output != "" {
		t.Fatal("want the newest output kept and the oldest dropped")
	}
}

func TestRunOnce_jobControlBadInputNamesTheAttribute(t *testing.T) {
	base := RunOnce{Period: time.Hour}
	cases := []struct {
		name  string
		edit  func(*RunOnce)
		field string
	}{
		{"negative max_runtime", func(r *RunOnce) { r.MaxRuntime = -time.Second }, FieldRunOnceMaxRuntime},
		{"max_runtime below 1s", func(r *RunOnce) { r.MaxRuntime = time.Millisecond }, FieldRunOnceMaxRuntime},
		{"negative retry_after", func(r *RunOnce) { r.RetryAfter = -time.Minute }, FieldRunOnceRetryAfter},
		{"retry_after over a day", func(r *RunOnce) { r.RetryAfter = 25 * time.Hour }, FieldRunOnceRetryAfter},
		{"backoff below 1", func(r *RunOnce) { r.RetryBackoff = 0.5 }, FieldRunOnceRetryBackoff},
		{"backoff over 10", func(r *RunOnce) { r.RetryBackoff = 11 }, FieldRunOnceRetryBackoff},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.edit(&r)
			fes := validation.AsFieldErrors(r.Validate())
			if len(fes) != 1 || fes[0].Field != c.field || fes[0].Allowed == "" {
				t.Fatalf("Validate: %v, want one error naming %s with the allowed range", fes, c.field)
			}
		})
	}
	ok := base
	ok.MaxRuntime, ok.RetryAfter, ok.RetryBackoff = time.Minute, 0, 1
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	var fe *validation.FieldError
	if err := ValidateRetryBackoff(FieldRunOnceRetryBackoff, 0); !errors.As(err, &fe) || fe.Field != FieldRunOnceRetryBackoff {
		t.Fatalf("backoff 0 as an attribute: %v", err)
	}
}
