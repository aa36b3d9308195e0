package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestDecideOverlap(t *testing.T) {
	t1 := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	t2 := t1.Add(24 * time.Hour)
	for _, c := range []struct {
		name     string
		p        Overlap
		id       string
		at       time.Time
		other    string
		otherAt  time.Time
		backfill bool
		want     OverlapAction
	}{
		{"wait waits", OverlapWait, "b", t2, "a", t1, false, OverlapActWait},
		{"unset waits", "", "b", t2, "a", t1, false, OverlapActWait},
		{"the same run is waited for under skip", OverlapSkip, "a", t1, "a", t1, false, OverlapActWait},
		{"the same run is waited for under replace", OverlapReplace, "a", t1, "a", t1, false, OverlapActWait},
		{"skip skips", OverlapSkip, "b", t2, "a", t1, false, OverlapActSkip},
		{"replace replaces an older slot", OverlapReplace, "b", t2, "a", t1, false, OverlapActReplace},
		{"replace skips a run older than the holder's", OverlapReplace, "a", t1, "b", t2, false, OverlapActSkip},
		{"replace replaces a run that is no slot", OverlapReplace, "manual", time.Time{}, "a", t1, false, OverlapActReplace},
		{"a backfill waits under skip", OverlapSkip, "b", t2, "a", t1, true, OverlapActWait},
		{"a backfill waits under replace", OverlapReplace, "b", t2, "a", t1, true, OverlapActWait},
	} {
		if got := DecideOverlap(c.p, c.id, c.at, c.other, c.otherAt, c.backfill); got != c.want {
			t.Errorf("%s: DecideOverlap = %d, want %d", c.name, got, c.want)
		}
	}
}

// Skipped and replaced runs survive the record codec, are not begun again
// except by a backfill, and the skip never touches a run that succeeded
// or runs.
func TestLedger_skipAndReplace(t *testing.T) {
	now := time.Date(2026, 12, 7, 2, 0, 5, 0, time.UTC)
	h := holder.Holder{Node: "worker-1", Session: "11111111-2222-3333-4444-555555555555", FencingToken: 7}
	l := Ledger{Lock: "nightly"}
	d, err := l.Begin("a", h, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	l = d.Ledger
	if _, changed, _ := l.Skip("a", "worker-2", "x", now); changed {
		t.Fatal("Skip changed a run that has an attempt running")
	}
	l, changed, err := l.Skip("b", "worker-2", "a", now)
	if err != nil || !changed {
		t.Fatalf("Skip(b) = %v, %v", changed, err)
	}
	l, run, n, found := l.Replace(h.Session, "c", now)
	if !found || run != "a" || n != 1 {
		t.Fatalf("Replace = %q, %d, %v", run, n, found)
	}
	if lost, err := d.Ledger.FinishWithReason("a", 1, RunLost, nil, "session ended", now); err != nil {
		t.Fatal(err)
	} else if out, _, _, found := lost.Replace(h.Session, "c", now); !found || out.Runs[0].Outcome != RunReplaced {
		t.Errorf("an attempt its runner recorded lost first is not replaced: %+v", out.Runs[0])
	}
	data, err := encodeLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeLedger(data)
	if err != nil {
		t.Fatalf("a ledger with skipped and replaced runs does not decode: %v\n%s", err, data)
	}
	for id, want := range map[string]RunOutcome{"a": RunReplaced, "b": RunSkipped} {
		r, ok := back.Superseded(id)
		if !ok || r.Outcome != want || !strings.Contains(r.Attempts[len(r.Attempts)-1].Reason, map[string]string{"a": "c", "b": "a"}[id]) {
			t.Errorf("run %s after the codec: %+v, want %s naming the other run", id, r, want)
		}
		d, err := back.Begin(id, h, 3, now)
		if err != nil || d.Kind != BeginSuperseded || d.Changed {
			t.Errorf("Begin(%s) = %v, %v; want BeginSuperseded without a write", id, d.Kind, err)
		}
		d, err = back.BeginWith(id, h, AttemptPolicy{MaxAttempts: 3, Backfill: true}, now)
		if err != nil || d.Kind != BeginRun || d.Attempt != 2 {
			t.Errorf("a backfill's Begin(%s) = %v attempt %d, %v; want attempt 2", id, d.Kind, d.Attempt, err)
		}
		// A skipped or replaced attempt does not count toward max_attempts:
		// with max_attempts 1 the backfill still runs the run.
		d, err = back.BeginWith(id, h, AttemptPolicy{MaxAttempts: 1, Backfill: true}, now)
		if err != nil || d.Kind != BeginRun || d.Attempt != 2 {
			t.Errorf("a backfill's Begin(%s) under max_attempts 1 = %v attempt %d, %v; want attempt 2 (a superseded attempt does not count)", id, d.Kind, d.Attempt, err)
		}
		if r, _ := back.Superseded(id); r.Exhausted(1) {
			t.Errorf("run %s reads exhausted under max_attempts 1 with only a superseded attempt", id)
		}
	}
}

func TestRunOnce_backfillSlots(t *testing.T) {
	ro := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", Since: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC) // 02:00 in Berlin: included
	now := to.Add(time.Hour)
	ids, err := ro.BackfillSlots(from, to, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids, " "), "2026-12-02T02:00:00+01:00 2026-12-03T02:00:00+01:00 2026-12-04T02:00:00+01:00"; got != want {
		t.Errorf("slots = %s, want %s (from the declaration, both ends included)", got, want)
	}
	for _, c := range []struct {
		from, to time.Time
		field    string
	}{
		{to, from, "-to"},
		{from, now.Add(time.Minute), "-to"},
		{from.AddDate(-3, 0, 0), to, "-from"},
	} {
		var fe *validation.FieldError
		if _, err := ro.BackfillSlots(c.from, c.to, now); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("BackfillSlots(%s, %s) = %v, want an error naming %s", c.from, c.to, err, c.field)
		}
	}
	if _, err := (RunOnce{Period: time.Hour}).BackfillSlots(from, to, now); err == nil {
		t.Error("a lock without a schedule has backfill slots")
	}
	if err := (RunOnce{Period: time.Hour, Overlap: "forbid"}).Validate(); err == nil || !strings.Contains(err.Error(), "run_once.overlap") {
		t.Errorf("overlap \"forbid\" validates: %v", err)
	}
}
