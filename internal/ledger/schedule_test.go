package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// wallPredicates are schedules with an independent reading of what local
// wall-clock minute they match, written without the cron parser.
var wallPredicates = []struct {
	expr  string
	match func(w time.Time) bool // w: a wall time, in UTC
}{
	{"30 2 * * *", func(w time.Time) bool { return w.Hour() == 2 && w.Minute() == 30 }},
	{"30 1 * * *", func(w time.Time) bool { return w.Hour() == 1 && w.Minute() == 30 }},
	{"*/15 * * * *", func(w time.Time) bool { return w.Minute()%15 == 0 }},
	{"0 9 * * 1-5", func(w time.Time) bool {
		return w.Hour() == 9 && w.Minute() == 0 && w.Weekday() >= time.Monday && w.Weekday() <= time.Friday
	}},
	{"@monthly", func(w time.Time) bool { return w.Day() == 1 && w.Hour() == 0 && w.Minute() == 0 }},
	{"0 0 31 * *", func(w time.Time) bool { return w.Day() == 31 && w.Hour() == 0 && w.Minute() == 0 }},
	{"5 0 1 * mon", func(w time.Time) bool { // either day field (cron's rule)
		return (w.Day() == 1 || w.Weekday() == time.Monday) && w.Hour() == 0 && w.Minute() == 5
	}},
}

// zoneClock is the independent computation: the zone's clock stepped
// minute by minute, each instant with its wall time, whether that wall time
// is seen for the first time, and the wall times the clock jumped over
// right before it.
type zoneClock struct {
	at, wall []time.Time
	first    []bool
	skipped  map[int][]time.Time
}

func newZoneClock(loc *time.Location, from, to time.Time) zoneClock {
	var z zoneClock
	z.skipped = map[int][]time.Time{}
	seen := map[int64]bool{}
	wallOf := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	prev := wallOf(from.Add(-time.Minute))
	for t := from; t.Before(to); t = t.Add(time.Minute) {
		w := wallOf(t)
		for s := prev.Add(time.Minute); s.Before(w); s = s.Add(time.Minute) {
			z.skipped[len(z.at)] = append(z.skipped[len(z.at)], s)
		}
		z.at, z.wall, z.first = append(z.at, t), append(z.wall, w), append(z.first, !seen[w.Unix()])
		seen[w.Unix()] = true
		prev = w
	}
	return z
}

// slots: an instant is a slot when its wall time matches and is seen for
// the first time (a doubled time: its first occurrence), or when the clock
// jumped over a matching wall time right before it (a skipped time: the
// first instant after the jump).
func (z zoneClock) slots(match func(time.Time) bool) []time.Time {
	var out []time.Time
	for i, t := range z.at {
		slot := z.first[i] && match(z.wall[i])
		for _, s := range z.skipped[i] {
			slot = slot || match(s)
		}
		if slot {
			out = append(out, t)
		}
	}
	return out
}

// TestSchedule_everyMinuteOfAYear checks Prev and Next at every minute of
// 2026 (and Prev a second before and 30s after each slot), in three zones,
// against the zone's clock stepped minute by minute.
func TestSchedule_everyMinuteOfAYear(t *testing.T) {
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "UTC"} {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			from, to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := newZoneClock(loc, from.AddDate(0, -2, 0), to.AddDate(0, 2, 0))
			for _, p := range wallPredicates {
				s, err := ParseSchedule(p.expr, zone)
				if err != nil {
					t.Fatal(err)
				}
				want := clock.slots(p.match)
				i := 0 // want[i] is the latest slot at or before t
				for tt := from; tt.Before(to); tt = tt.Add(time.Minute) {
					for i+1 < len(want) && !want[i+1].After(tt) {
						i++
					}
					if got, ok := s.Prev(tt); !ok || !got.Equal(want[i]) {
						t.Fatalf("%q in %s: Prev(%s) = %s, want %s", p.expr, zone, tt.In(loc), got.In(loc), want[i].In(loc))
					}
					if next, ok := s.Next(tt); !ok || !next.Equal(want[i+1]) {
						t.Fatalf("%q in %s: Next(%s) = %s, want %s", p.expr, zone, tt.In(loc), next.In(loc), want[i+1].In(loc))
					}
				}
				// Between minutes: a second before and 30 seconds after each slot.
				for j := 1; j < len(want); j++ {
					if got, _ := s.Prev(want[j].Add(-time.Second)); !got.Equal(want[j-1]) {
						t.Fatalf("%q in %s: Prev(1s before %s) = %s", p.expr, zone, want[j].In(loc), got.In(loc))
					}
					if got, _ := s.Prev(want[j].Add(30 * time.Second)); !got.Equal(want[j]) {
						t.Fatalf("%q in %s: Prev(30s after %s) = %s", p.expr, zone, want[j].In(loc), got.In(loc))
					}
				}
			}
		})
	}
}

func mustSchedule(t *testing.T, expr, zone string) Schedule {
	t.Helper()
	s, err := ParseSchedule(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestSchedule_dstEdges names each DST night of 2026 in both zones: a
// skipped time gives one slot at the end of the gap, a doubled time one
// slot at its first occurrence, and the run ID says which.
func TestSchedule_dstEdges(t *testing.T) {
	cases := []struct {
		name, zone, expr string
		at               string // a trigger
		wantID           string // the run ID of the trigger
	}{
		{"berlin spring forward: 02:30 does not exist", "Europe/Berlin", "30 2 * * *", "2026-03-29T01:10:00Z", "2026-03-29T03:00:00+02:00"},
		{"berlin spring forward: before the gap's end", "Europe/Berlin", "30 2 * * *", "2026-03-29T00:59:59Z", "2026-03-28T02:30:00+01:00"},
		{"berlin fall back: first 02:30", "Europe/Berlin", "30 2 * * *", "2026-10-25T00:30:00Z", "2026-10-25T02:30:00+02:00"},
		{"berlin fall back: second 02:30 is the same run", "Europe/Berlin", "30 2 * * *", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00+02:00"},
		{"berlin day after", "Europe/Berlin", "30 2 * * *", "2026-10-26T01:30:00Z", "2026-10-26T02:30:00+01:00"},
		{"new york spring forward: 02:30 does not exist", "America/New_York", "30 2 * * *", "2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00"},
		{"new york fall back: first 01:30", "America/New_York", "30 1 * * *", "2026-11-01T05:45:00Z", "2026-11-01T01:30:00-04:00"},
		{"new york fall back: second 01:30 is the same run", "America/New_York", "30 1 * * *", "2026-11-01T06:45:00Z", "2026-11-01T01:30:00-04:00"},
		{"new york hourly: the repeated 01:00 is not a slot", "America/New_York", "0 * * * *", "2026-11-01T06:30:00Z", "2026-11-01T01:00:00-04:00"},
		{"new york hourly: 02:00 EST", "America/New_York", "0 * * * *", "2026-11-01T07:00:00Z", "2026-11-01T02:00:00-05:00"},
		{"utc", "", "@daily", "2026-07-01T12:00:00Z", "2026-07-01T00:00:00Z"},
		{"london winter writes Z", "Europe/London", "@daily", "2026-01-15T12:00:00Z", "2026-01-15T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustSchedule(t, c.expr, c.zone)
			slot, ok := s.Prev(utc(c.at))
			if !ok || s.SlotID(slot) != c.wantID {
				t.Fatalf("Prev(%s) = %s, want %s", c.at, s.SlotID(slot), c.wantID)
			}
			if err := ValidateRunID(s.SlotID(slot)); err != nil {
				t.Fatal(err)
			}
			if back := utc(c.wantID); !back.Equal(slot) {
				t.Fatalf("run ID %s reads back as %s, not the slot %s", c.wantID, back, slot)
			}
		})
	}
	// The gap collapses: every skipped quarter and 03:00 are one slot.
	s := mustSchedule(t, "*/15 * * * *", "Europe/Berlin")
	var ids []string
	for _, at := range s.Between(utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z"), 0) {
		ids = append(ids, s.SlotID(at))
	}
	if got, want := strings.Join(ids, " "), "2026-03-29T01:45:00+01:00 2026-03-29T03:00:00+02:00 2026-03-29T03:15:00+02:00 2026-03-29T03:30:00+02:00"; got != want {
		t.Fatalf("slots around the gap: %s, want %s", got, want)
	}
}

// TestSchedule_robfigDiffers records what robfig/cron's own Next (the one
// Kubernetes CronJob uses) does on the same nights, which the slot rule
// departs from: nothing at a skipped time, two firings at a doubled one.
func TestSchedule_robfigDiffers(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	sched, err := cron.ParseStandard("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		t.Fatalf("robfig parsed %T, not a SpecSchedule", sched)
	}
	spec.Location = berlin
	if next := sched.Next(utc("2026-03-28T12:00:00Z")); !next.Equal(utc("2026-03-30T00:30:00Z")) {
		t.Errorf("robfig after the 28th: %s; the note says it skips the 29th", next.UTC())
	}
	first := sched.Next(utc("2026-10-24T12:00:00Z"))
	second := sched.Next(first)
	if !first.Equal(utc("2026-10-25T00:30:00Z")) || !second.Equal(utc("2026-10-25T01:30:00Z")) {
		t.Errorf("robfig on the 25th: %s then %s; the note says it fires at both 02:30s", first.UTC(), second.UTC())
	}
	s := mustSchedule(t, "30 2 * * *", "Europe/Berlin")
	if got := len(s.Between(utc("2026-03-28T12:00:00Z"), utc("2026-03-29T12:00:00Z"), 0)); got != 1 {
		t.Errorf("Schedule on the 29th of March: %d slots, want 1", got)
	}
	if got := len(s.Between(utc("2026-10-24T12:00:00Z"), utc("2026-10-25T12:00:00Z"), 0)); got != 1 {
		t.Errorf("Schedule on the 25th of October: %d slots, want 1", got)
	}
}

func TestSchedule_monthly(t *testing.T) {
	s := mustSchedule(t, "0 0 31 * *", "Europe/Berlin")
	slot, _ := s.Prev(utc("2026-05-15T00:00:00Z"))
	if got := s.SlotID(slot); got != "2026-03-31T00:00:00+02:00" { // April has no 31st
		t.Fatalf("31st before 15 May: %s", got)
	}
	var ids []string
	for _, at := range s.NextSlots(utc("2026-01-01T00:00:00Z"), 3) {
		ids = append(ids, s.SlotID(at))
	}
	if got := strings.Join(ids, " "); got != "2026-01-31T00:00:00+01:00 2026-03-31T00:00:00+02:00 2026-05-31T00:00:00+02:00" {
		t.Fatalf("next 31sts: %s", got)
	}
	m := mustSchedule(t, "@monthly", "America/New_York")
	slot, _ = m.Prev(utc("2026-04-01T03:59:00Z")) // 23:59 on 31 March in New York
	if got := m.SlotID(slot); got != "2026-03-01T00:00:00-05:00" {
		t.Fatalf("@monthly: %s", got)
	}
	leap := mustSchedule(t, "0 0 29 2 *", "UTC")
	slot, ok := leap.Prev(utc("2103-01-01T00:00:00Z"))
	if !ok || leap.SlotID(slot) != "2096-02-29T00:00:00Z" {
		t.Fatalf("29 February across 2100: %s %v", slot, ok)
	}
}

func TestParseSchedule_invalid(t *testing.T) {
	cases := []struct {
		expr, zone string
		field      string
		want       string // in the message
	}{
		{"0 2 * *", "", FieldRunOnceSchedule, `"0 2 * *" is not allowed; 4 fields, not 5`},
		{"0 0 2 * * *", "", FieldRunOnceSchedule, "6 fields, not 5"},
		{"61 * * * *", "", FieldRunOnceSchedule, "above maximum (59)"},
		{"0 2 * * 7", "", FieldRunOnceSchedule, "above maximum (6)"},
		{"0 0 30 2 *", "", FieldRunOnceSchedule, "no date matches"},
		{"@every 1h", "", FieldRunOnceSchedule, "use run_once.period"},
		{"TZ=Europe/Berlin 0 2 * * *", "", FieldRunOnceSchedule, "set run_once.time_zone"},
		{"", "", FieldRunOnceSchedule, "empty"},
		{"@fortnightly", "", FieldRunOnceSchedule, "unrecognized descriptor"},
		{"0 2 * * *", "Mars/Olympus", FieldRunOnceTimeZone, `"Mars/Olympus" is not allowed; not a known time zone`},
		{"0 2 * * *", "Local", FieldRunOnceTimeZone, "differs from node to node"},
	}
	for _, c := range cases {
		_, err := ParseSchedule(c.expr, c.zone)
		fes := validation.AsFieldErrors(err)
		if len(fes) != 1 || fes[0].Field != c.field || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSchedule(%q, %q) = %v, want one %s error with %q", c.expr, c.zone, err, c.field, c.want)
		}
	}
	for _, ok := range []string{"@yearly", "@annually", "@weekly", "@daily", "@midnight", "@hourly", "0 2 * * MON-FRI", "*/5 8-18 * jan,jul ?"} {
		if _, err := ParseSchedule(ok, "Europe/Berlin"); err != nil {
			t.Errorf("ParseSchedule(%q): %v", ok, err)
		}
	}
}

func TestRunOnce_missedSlots(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", Keep: 5}
	run := func(id string) Run {
		return Run{ID: id, Outcome: RunSucceeded, Attempts: []Attempt{{Number: 1, Started: utc(id), Outcome: RunSucceeded}}}
	}
	day := func(d int) string { return fmt.Sprintf("2026-07-%02dT02:00:00+02:00", d) }
	ledger := Ledger{Runs: []Run{run(day(9)), run(day(6)), run(day(3))}} // newest first
	now := utc("2026-07-10T12:00:00Z")
	if got := strings.Join(r.MissedSlots(ledger, now), " "); got != day(7)+" "+day(8) {
		t.Fatalf("missed (keep 5: the 6th to the 10th) = %s", got)
	}
	// The 10th's slot has no run yet, and no deadline: it may still start.
	if got := r.MissedSlots(Ledger{Runs: []Run{run(day(9))}}, now); len(got) != 0 {
		t.Fatalf("missed with the latest slot pending = %v", got)
	}
	r.StartingDeadline = time.Hour
	if got := strings.Join(r.MissedSlots(Ledger{Runs: []Run{run(day(9))}}, now), " "); got != day(10) {
		t.Fatalf("missed past the deadline = %s", got)
	}
	if got := r.MissedSlots(Ledger{}, now); got != nil {
		t.Fatalf("missed with an empty ledger = %v", got)
	}
	// Declared on the 8th at noon: every slot since, run or not, counts.
	r.Since = utc("2026-07-08T12:00:00Z")
	if got := strings.Join(r.MissedSlots(Ledger{}, now), " "); got != day(9)+" "+day(10) {
		t.Fatalf("missed since the declaration = %s", got)
	}
	p := RunOnce{Period: time.Hour}
	if got := strings.Join(p.MissedSlots(Ledger{Runs: []Run{run("2026-07-10T09:00:00Z")}}, now), " "); got != "2026-07-10T10:00:00Z 2026-07-10T11:00:00Z" {
		t.Fatalf("missed period slots = %s", got)
	}
}

// A slot has one identity: a -run-id that is a timestamp is read as an
// instant, and every spelling of a slot's instant is that slot's run,
// named as SlotID writes it; any other instant is refused naming the
// schedule, the zone and the nearest slots; other run IDs are runs of
// their own.
func TestRunOnce_runIDSlot(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", Since: utc("2026-12-01T12:00:00Z")}
	const slot = "2026-12-07T02:00:00+01:00"
	for _, c := range []struct {
		name, id, want string // want "" with refused: an error
		slot           bool
		refused        []string // texts the error names
	}{
		{name: "canonical", id: slot, want: slot, slot: true},
		{name: "UTC spelling", id: "2026-12-07T01:00:00Z", want: slot, slot: true},
		{name: "another offset", id: "2026-12-06T20:00:00-05:00", want: slot, slot: true},
		{name: "with a fraction", id: "2026-12-07T01:00:00.000Z", want: slot, slot: true},
		{name: "summer slot in UTC", id: "2027-07-01T00:00:00Z", want: "2027-07-01T02:00:00+02:00", slot: true},
		{name: "not a slot", id: "2026-12-07T02:30:00+01:00", refused: []string{
			`-run-id: "2026-12-07T02:30:00+01:00"`, `run_once.schedule "0 2 * * *" in Europe/Berlin`,
			"nearest slots are 2026-12-07T02:00:00+01:00 before and 2026-12-08T02:00:00+01:00 after", "manual-"}},
		{name: "a second off", id: "2026-12-07T01:00:01Z", refused: []string{"2026-12-07T02:00:01+01:00 is not a slot"}},
		{name: "a fraction off", id: "2026-12-07T01:00:00.5Z", refused: []string{"2026-12-07T02:00:00.5+01:00 is not a slot"}},
		{name: "before the declaration", id: "2026-12-01T01:00:00Z", refused: []string{
			"the slot 2026-12-01T02:00:00+01:00", "precedes the declaration", "2026-12-01T13:00:00+01:00"}},
		{name: "a run of its own", id: "manual-2026-12-07", want: "manual-2026-12-07"},
		{name: "a date alone is not a timestamp", id: "2026-12-07", want: "2026-12-07"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, at, isSlot, err := r.RunIDSlot(c.id)
			if c.refused != nil {
				if err == nil {
					t.Fatalf("RunIDSlot(%q) = %q, %v; want refused", c.id, got, isSlot)
				}
				for _, text := range c.refused {
					if !strings.Contains(err.Error(), text) {
						t.Errorf("error %q does not name %q", err, text)
					}
				}
				return
			}
			if err != nil || got != c.want || isSlot != c.slot {
				t.Fatalf("RunIDSlot(%q) = %q, %v, %v; want %q, %v", c.id, got, isSlot, err, c.want, c.slot)
			}
			// Invariant: a slot's run is named and timed as Slot names the
			// trigger at its instant.
			if isSlot {
				if id, want, _ := r.Slot(at); id != got || !at.Equal(want) {
					t.Errorf("slot %q at %s, but Slot(%s) = %q at %s", got, at, at, id, want)
				}
			}
		})
	}
	// Without a schedule the ID is as given; a period slot as RunSlot writes it.
	p := RunOnce{Period: time.Hour}
	if id, _, isSlot, err := p.RunIDSlot("2026-12-07T01:00:00Z"); err != nil || id != "2026-12-07T01:00:00Z" || !isSlot {
		t.Errorf("period slot: %q %v %v", id, isSlot, err)
	}
	if id, _, isSlot, err := p.RunIDSlot("2026-12-07T01:30:00Z"); err != nil || id != "2026-12-07T01:30:00Z" || isSlot {
		t.Errorf("period non-slot: %q %v %v", id, isSlot, err)
	}
}

// A trigger up to TriggerSkew before a slot is that slot's, and waits
// until its time; any other trigger runs the latest slot, as Slot does.
func TestRunOnce_trigger(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin"}
	slot := utc("2026-12-07T01:00:00Z")
	const today, yesterday = "2026-12-07T02:00:00+01:00", "2026-12-06T02:00:00+01:00"
	for _, c := range []struct {
		name  string
		start time.Time
		want  string
		wait  time.Duration
	}{
		{"on time", slot, today, 0},
		{"a minute late", slot.Add(time.Minute), today, 0},
		{"2s early", slot.Add(-2 * time.Second), today, 2 * time.Second},
		{"at the skew", slot.Add(-TriggerSkew), today, TriggerSkew},
		{"a fraction early", slot.Add(-time.Millisecond), today, time.Millisecond},
		{"just beyond the skew", slot.Add(-TriggerSkew - time.Millisecond), yesterday, 0},
		{"an hour early", slot.Add(-time.Hour), yesterday, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, at, wait, err := r.Trigger(c.start)
			if err != nil || id != c.want || wait != c.wait {
				t.Fatalf("Trigger(%s) = %q, wait %s, %v; want %q, wait %s", c.start, id, wait, err, c.want, c.wait)
			}
			// Invariants: the trigger never runs a slot in its future once
			// it waited, nor one more than TriggerSkew ahead.
			if !c.start.Add(wait).Equal(at) && wait != 0 || at.Sub(c.start) > TriggerSkew {
				t.Errorf("slot %s, start %s, wait %s", at, c.start, wait)
			}
		})
	}
	// Period slots are the span the start falls in, early or not.
	if id, _, wait, err := (RunOnce{Period: time.Hour}).Trigger(slot.Add(-time.Second)); err != nil || id != "2026-12-07T00:00:00Z" || wait != 0 {
		t.Errorf("period trigger: %q %s %v", id, wait, err)
	}
}

// A late trigger, or one for a slot before the lock's declaration, is
// refused unless the ledger shows the slot begun (done, or running): the
// deadline judges starting a slot, not joining one begun in time.
func TestRunOnce_judgeTriggerAndSlotBegun(t *testing.T) {
	slot := utc("2026-12-07T01:00:00Z")
	const id = "2026-12-07T02:00:00+01:00"
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", StartingDeadline: 10 * time.Minute, MaxAttempts: 2,
		Since: utc("2026-12-01T12:00:00Z")}
	for _, c := range []struct {
		name  string
		r     RunOnce
		at    time.Time
		start time.Time
		want  SlotRefusal
	}{
		{"on time", r, slot, slot.Add(time.Minute), ""},
		{"at the deadline", r, slot, slot.Add(10 * time.Minute), ""},
		{"past the deadline", r, slot, slot.Add(11 * time.Minute), SlotPastDeadline},
		{"no deadline", RunOnce{Schedule: r.Schedule, TimeZone: r.TimeZone}, slot, slot.Add(23 * time.Hour), ""},
		{"before the declaration", r, utc("2026-12-01T01:00:00Z"), utc("2026-12-01T12:00:05Z"), SlotBeforeSince},
		{"at the declaration's second", RunOnce{Schedule: "* * * * *", Since: utc("2026-12-01T12:00:00Z").Add(300 * time.Millisecond)},
			utc("2026-12-01T12:00:00Z"), utc("2026-12-01T12:00:01Z"), ""},
		{"unknown declaration", RunOnce{Schedule: r.Schedule}, utc("2026-12-01T01:00:00Z"), utc("2026-12-01T01:00:05Z"), ""},
		{"period slot before the declaration", RunOnce{Period: 24 * time.Hour, Since: utc("2026-12-01T12:00:00Z")},
			utc("2026-12-01T00:00:00Z"), utc("2026-12-01T12:05:00Z"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, got := c.r.JudgeTrigger(c.at, c.start); got != c.want {
				t.Fatalf("JudgeTrigger = %q, want %q", got, c.want)
			}
		})
	}
	attempt := func(n int, o RunOutcome) Attempt { return Attempt{Number: n, Outcome: o} }
	for _, c := range []struct {
		name  string
		l     Ledger
		begun bool
	}{
		{"no run", Ledger{}, false},
		{"another run", Ledger{Runs: []Run{{ID: "manual-1", Outcome: RunSucceeded, Attempts: []Attempt{attempt(1, RunSucceeded)}}}}, false},
		{"succeeded", Ledger{Runs: []Run{{ID: id, Outcome: RunSucceeded, Attempts: []Attempt{attempt(1, RunSucceeded)}}}}, true},
		{"running", Ledger{Runs: []Run{{ID: id, Outcome: RunRunning, Attempts: []Attempt{attempt(1, RunRunning)}}}}, true},
		{"exhausted", Ledger{Runs: []Run{{ID: id, Outcome: RunExhausted, Attempts: []Attempt{attempt(1, RunFailed), attempt(2, RunFailed)}}}}, true},
		{"failed, attempts left", Ledger{Runs: []Run{{ID: id, Outcome: RunFailed, Attempts: []Attempt{attempt(1, RunFailed)}}}}, false},
		{"pruned, succeeded", Ledger{Pruned: []PrunedRun{{ID: id, Outcome: RunSucceeded}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := r.SlotBegun(c.l, id); got != c.begun {
				t.Fatalf("SlotBegun = %v, want %v", got, c.begun)
			}
		})
	}
}

// A slot's run written under another spelling of its instant (by a runner
// that did not name it by SlotID) is that slot's: not missed.
func TestRunOnce_missedSlotsReadsAnySpelling(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", Keep: 3, Since: utc("2026-12-04T12:00:00Z")}
	l := Ledger{Runs: []Run{{ID: "2026-12-06T01:00:00Z", Outcome: RunSucceeded}, {ID: "2026-12-05T02:00:00+01:00", Outcome: RunSucceeded}}}
	if got := r.MissedSlots(l, utc("2026-12-07T12:00:00Z")); len(got) != 0 {
		t.Fatalf("missed = %v, want none (the 7th may still start)", got)
	}
}

// BenchmarkSchedule prints the cost of a trigger's run ID (Prev) and of a
// next slot in a DST zone.
func BenchmarkSchedule(b *testing.B) {
	s, err := ParseSchedule("30 2 * * 1-5", "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	t0 := utc("2026-03-27T12:00:00Z")
	b.Run("Prev", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			s.Prev(t0.Add(time.Duration(i%10000) * time.Minute))
		}
	})
	b.Run("Next", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			s.Next(t0.Add(time.Duration(i%10000) * time.Minute))
		}
	})
	b.Run("MissedSlots", func(b *testing.B) {
		r := RunOnce{Schedule: "*/5 * * * *", TimeZone: "Europe/Berlin", Keep: 1000, Since: t0.Add(-24 * time.Hour)}
		for b.Loop() {
			r.MissedSlots(Ledger{}, t0)
		}
	})
}
