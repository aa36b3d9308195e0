package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRunOnce_Validate(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name   string
		r      RunOnce
		fields []string // wanted error fields, in order; none = valid
		value  string   // the first error's value
	}{
		{name: "daily with defaults", r: RunOnce{Period: 24 * h}},
		{name: "hourly with an offset and explicit counts", r: RunOnce{Period: h, Offset: 5 * time.Minute, MaxAttempts: 100, Keep: 1000}},
		{name: "the shortest period", r: RunOnce{Period: time.Minute}},
		{name: "the longest period", r: RunOnce{Period: 366 * 24 * h, Offset: 365 * 24 * h}},
		{name: "period below a minute", r: RunOnce{Period: 59 * time.Second}, fields: []string{FieldRunOncePeriod}, value: "59s"},
		{name: "no period", r: RunOnce{}, fields: []string{FieldRunOncePeriod}, value: "0s"},
		{name: "period above a leap year", r: RunOnce{Period: 367 * 24 * h}, fields: []string{FieldRunOncePeriod}, value: "8808h0m0s"},
		{name: "offset equal to the period", r: RunOnce{Period: h, Offset: h}, fields: []string{FieldRunOnceOffset}, value: "1h0m0s"},
		{name: "negative offset", r: RunOnce{Period: h, Offset: -time.Second}, fields: []string{FieldRunOnceOffset}, value: "-1s"},
		{name: "max_attempts above 100", r: RunOnce{Period: h, MaxAttempts: 101}, fields: []string{FieldRunOnceMaxAttempts}, value: "101"},
		{name: "negative max_attempts", r: RunOnce{Period: h, MaxAttempts: -1}, fields: []string{FieldRunOnceMaxAttempts}, value: "-1"},
		{name: "keep above 1000", r: RunOnce{Period: h, Keep: 1001}, fields: []string{FieldRunOnceKeep}, value: "1001"},
		{name: "a schedule", r: RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", StartingDeadline: time.Hour}},
		{name: "a schedule in UTC by default", r: RunOnce{Schedule: "@monthly"}},
		{name: "schedule and period", r: RunOnce{Schedule: "@daily", Period: h}, fields: []string{FieldRunOncePeriod}, value: "1h0m0s"},
		{name: "time_zone without schedule", r: RunOnce{Period: h, TimeZone: "Europe/Berlin"}, fields: []string{FieldRunOnceTimeZone}, value: "Europe/Berlin"},
		{name: "bad schedule and zone", r: RunOnce{Schedule: "0 25 * * *", TimeZone: "Europe/Berlim"}, fields: []string{FieldRunOnceTimeZone, FieldRunOnceSchedule}, value: "Europe/Berlim"},
		{name: "starting_deadline below a second", r: RunOnce{Schedule: "@daily", StartingDeadline: time.Millisecond}, fields: []string{FieldRunOnceStartingDeadline}, value: "1ms"},
		{name: "every problem at once", r: RunOnce{Period: time.Second, Offset: -1, MaxAttempts: 500, Keep: -3},
			fields: []string{FieldRunOncePeriod, FieldRunOnceOffset, FieldRunOnceMaxAttempts, FieldRunOnceKeep}, value: "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validation.AsFieldErrors(tc.r.Validate())
			if len(errs) != len(tc.fields) {
				t.Fatalf("Validate() = %v, want errors for %v", errs, tc.fields)
			}
			for i, e := range errs {
				if e.Field != tc.fields[i] || e.Allowed == "" {
					t.Errorf("error %d = %+v, want field %s with the allowed range", i, e, tc.fields[i])
				}
			}
			if len(errs) > 0 && errs[0].Value != tc.value {
				t.Errorf("value = %q, want %q", errs[0].Value, tc.value)
			}
		})
	}
}

func TestValidateRunID(t *testing.T) {
	for _, ok := range []string{
		"a", "2026-12-01T00:00:00Z", "periodic-1733011200", "pipeline:4711", "job@host+1.2_3",
		strings.Repeat("x", 128),
	} {
		if err := ValidateRunID(ok); err != nil {
			t.Errorf("ValidateRunID(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		"", strings.Repeat("x", 129), "a b", "a/b", "a\nb", "ä", "$(rm)", "a;b", "a=b", "run\x00id",
	} {
		err := ValidateRunID(bad)
		fes := validation.AsFieldErrors(err)
		if len(fes) != 1 || fes[0].Field != "-run-id" || !strings.Contains(fes[0].Allowed, "128 bytes") {
			t.Errorf("ValidateRunID(%q) = %v, want a -run-id error with the allowed form", bad, err)
		}
	}
}

func TestRunSlot(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h := time.Hour
	for _, tc := range []struct {
		name           string
		t              string
		period, offset time.Duration
		id             string
	}{
		{"daily: the UTC day", "2026-12-01T13:45:00Z", 24 * h, 0, "2026-12-01T00:00:00Z"},
		{"daily: exactly on the boundary belongs to the new slot", "2026-12-01T00:00:00Z", 24 * h, 0, "2026-12-01T00:00:00Z"},
		{"daily: a nanosecond before belongs to the old", "2026-11-30T23:59:59.999999999Z", 24 * h, 0, "2026-11-30T00:00:00Z"},
		{"local time zones do not matter", "2026-12-01T01:30:00+02:00", 24 * h, 0, "2026-11-30T00:00:00Z"},
		{"daily with a 2h offset: slots start at 02:00 UTC", "2026-12-01T01:59:00Z", 24 * h, 2 * h, "2026-11-30T02:00:00Z"},
		{"daily with a 2h offset, after 02:00", "2026-12-01T02:00:01Z", 24 * h, 2 * h, "2026-12-01T02:00:00Z"},
		{"hourly", "2026-12-01T13:45:10Z", h, 0, "2026-12-01T13:00:00Z"},
		{"every 15 minutes offset 5m", "2026-12-01T13:04:59Z", 15 * time.Minute, 5 * time.Minute, "2026-12-01T12:50:00Z"},
		{"a sub-second offset shows in the ID", "2026-12-01T13:45:10Z", h, 500 * time.Millisecond, "2026-12-01T13:00:00.5Z"},
		{"before the epoch", "1969-12-31T23:30:00Z", h, 0, "1969-12-31T23:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, start := RunSlot(at(tc.t), tc.period, tc.offset)
			if id != tc.id {
				t.Fatalf("RunSlot(%s, %s, %s) = %q, want %q", tc.t, tc.period, tc.offset, id, tc.id)
			}
			// Invariants: the ID is the start, a valid run ID, and the
			// slot contains t.
			if !start.Equal(at(tc.id)) || start.Location() != time.UTC {
				t.Errorf("start = %v, want %s in UTC", start, tc.id)
			}
			if err := ValidateRunID(id); err != nil {
				t.Errorf("slot ID is not a valid run ID: %v", err)
			}
			if tt := at(tc.t); tt.Before(start) || !tt.Before(start.Add(tc.period)) {
				t.Errorf("%s is not in [%v, %v)", tc.t, start, start.Add(tc.period))
			}
		})
	}
}

func TestRunOnce_scheduleNamesBoth(t *testing.T) {
	err := RunOnce{Schedule: "@daily", Period: time.Hour}.Validate()
	if err == nil || !strings.Contains(err.Error(), "run_once.period") || !strings.Contains(err.Error(), "run_once.schedule") {
		t.Fatalf("Validate() = %v, want both attributes named", err)
	}
}

func TestRunOnce_slotAndDeadline(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin", StartingDeadline: 10 * time.Minute}
	start := time.Date(2026, 7, 1, 0, 5, 0, 0, time.UTC) // 02:05 CEST
	id, at, err := r.Slot(start)
	if err != nil || id != "2026-07-01T02:00:00+02:00" || !at.Equal(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Slot = %s %s %v", id, at, err)
	}
	if late, past := r.PastDeadline(at, start); late != 5*time.Minute || past {
		t.Fatalf("5 minutes late: %s %v", late, past)
	}
	if late, past := r.PastDeadline(at, start.Add(6*time.Minute)); late != 11*time.Minute || !past {
		t.Fatalf("11 minutes late: %s %v", late, past)
	}
	if _, past := (RunOnce{Schedule: "0 2 * * *"}).PastDeadline(at, start.Add(24*time.Hour)); past {
		t.Fatal("no deadline, yet past it")
	}
	id, _, err = RunOnce{Period: time.Hour}.Slot(start)
	if err != nil || id != "2026-07-01T00:00:00Z" {
		t.Fatalf("period Slot = %s %v", id, err)
	}
}

func TestRunOnce_scheduledTime(t *testing.T) {
	r := RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin"}
	for id, ok := range map[string]bool{
		"2026-07-01T02:00:00+02:00": true,
		"2026-07-01T00:00:00Z":      false, // the same instant, not as the slot is written
		"2026-07-01T02:01:00+02:00": false, // not a slot
		"nightly-42":                false,
	} {
		if _, got := r.ScheduledTime(id); got != ok {
			t.Errorf("ScheduledTime(%q) = %v, want %v", id, got, ok)
		}
	}
	if at, ok := (RunOnce{Period: time.Hour}).ScheduledTime("2026-07-01T05:00:00Z"); !ok || at.Hour() != 5 {
		t.Errorf("period slot: %s %v", at, ok)
	}
}

// A schedule without starting_deadline warns, naming the attribute and
// the default bound; a deadline, or a period, does not.
func TestRunOnce_DeadlineWarnings(t *testing.T) {
	ws := RunOnce{Schedule: "0 2 * * *"}.DeadlineWarnings()
	if len(ws) != 1 || ws[0].Field != FieldRunOnceSchedule || !strings.Contains(ws[0].Detail, FieldRunOnceStartingDeadline) ||
		!strings.Contains(ws[0].Detail, "up to the next slot's time") {
		t.Fatalf("DeadlineWarnings = %+v", ws)
	}
	for _, r := range []RunOnce{{Schedule: "0 2 * * *", StartingDeadline: time.Minute}, {Period: time.Hour}} {
		if ws := r.DeadlineWarnings(); len(ws) != 0 {
			t.Errorf("%+v warns: %+v", r, ws)
		}
	}
}
