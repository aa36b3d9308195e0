// Package oncalendar holds systemd calendar events (the OnCalendar= values
// of a .timer) made from a lock's run_once.schedule in its time zone, with
// the same elapses as the schedule's slots (ledger.Schedule), or the
// reason there are none.
//
// Exactness. systemd matches each component of a calendar event against
// the local wall-clock time in the event's zone (the suffix, "Europe/Berlin"),
// as cron does. The fields are read from the parsed expression's bit sets
// (robfig/cron, the parser ledger.ParseSchedule uses), never from the
// text, and written as lists, ranges and repetitions that denote the same
// sets, so steps ("5/20", "*/7") need no systemd counterpart of their own.
// Two cron rules have none and are handled here:
//   - cron matches a date when either day field matches if both are
//     restricted ("0 0 1 * 1": the 1st and every Monday); systemd requires
//     both. Such a schedule becomes two events, one per day field: a timer
//     elapses at the union of its OnCalendar= values.
//   - daylight saving. systemd computes a timer's next elapse from its last
//     trigger, in wall-clock time, with glibc's mktime. A doubled time
//     elapses once, at its first occurrence, as in lockmodel (checked with
//     systemd 252). A skipped time never elapses, where consullock runs
//     its slot at the end of the gap (02:30 on the spring-forward night
//     runs at 03:00): a schedule that matches a skipped time on a night
//     whose gap end it does not match is refused. Transitions off the
//     hour (Australia/Lord_Howe, Pacific/Chatham) or at midnight
//     (America/Havana, Asia/Beirut) are handled unlike the slots, and
//     systemd may even stop with "Infinite loop in calendar calculation"
//     there: a schedule with a slot within hours of one is refused. The
//     zone's transitions are checked for Horizon from now.
//
// One difference is left, and the runner absorbs it: a timer started (or
// randomly delayed into) the second pass of a doubled hour elapses again
// at the times it matches there; the runner takes such a trigger for the
// slot at the times' first occurrence, already begun, and exits as for a
// late trigger.
package oncalendar

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// Horizon is how far ahead the zone's transitions are checked: 28 years,
// the Gregorian calendar's cycle of weekdays and dates (1901 to 2099).
const Horizon = 28 * 366 * 24 * time.Hour

// Inexpressible is a schedule no set of calendar events elapses at
// exactly, and why.
type Inexpressible struct {
	Schedule, TimeZone string
	Reason             string
}

func (e *Inexpressible) Error() string {
	return fmt.Sprintf("run_once.schedule %q in %s has no exact systemd calendar event: %s", e.Schedule, e.TimeZone, e.Reason)
}

// parser is package ledger's schedule parser's configuration: the bit sets
// read here are the ones ledger.Schedule matches.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// starBit is robfig/cron's mark of a day field written "*" or "?".
const starBit = 1 << 63

// Events is the OnCalendar= values for s: one, or two when cron's rule
// for both day fields applies. now starts the daylight-saving check
// (Horizon). The error is an *Inexpressible.
func Events(s ledger.Schedule, now time.Time) ([]string, error) {
	parsed, err := parser.Parse(strings.TrimSpace(s.String()))
	if err != nil {
		return nil, fmt.Errorf("run_once.schedule %q: %w", s.String(), err) // ledger.ParseSchedule accepted it: not reached
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("run_once.schedule %q: not a calendar schedule", s.String())
	}
	if err := checkTransitions(s, now, now.Add(Horizon)); err != nil {
		return nil, err
	}
	clock := component(spec.Hour, 0, 23) + ":" + component(spec.Minute, 0, 59) + ":00 " + s.TimeZone()
	month := component(spec.Month, 1, 12)
	days := "*-" + month + "-" + component(spec.Dom, 1, 31)
	weekdays := weekdayList(spec.Dow)
	switch {
	case spec.Dow&starBit != 0: // every weekday: the dates decide
		return []string{days + " " + clock}, nil
	case spec.Dom&starBit != 0: // every date: the weekdays decide
		return []string{joinWeekdays(weekdays, "*-"+month+"-* "+clock)}, nil
	}
	// Neither day field starred: cron matches either.
	var out []string
	if anyDate(spec.Month, spec.Dom) {
		out = append(out, days+" "+clock)
	}
	return append(out, joinWeekdays(weekdays, "*-"+month+"-* "+clock)), nil
}

func joinWeekdays(w, rest string) string {
	if w == "" {
		return rest
	}
	return w + " " + rest
}

// component writes the values of bits in [lo, hi] as systemd does: "*"
// for all, "a/n" for a, a+n, ... up to hi, else a list of values and
// ranges "a..b", two digits each.
func component(bits uint64, lo, hi int) string {
	var vals []int
	for v := lo; v <= hi; v++ {
		if bits&(1<<uint(v)) != 0 {
			vals = append(vals, v)
		}
	}
	if len(vals) == hi-lo+1 {
		return "*"
	}
	two := func(v int) string { return fmt.Sprintf("%02d", v) }
	if len(vals) >= 3 {
		step := vals[1] - vals[0]
		repeat := step > 1 && vals[len(vals)-1]+step > hi
		for i := 2; repeat && i < len(vals); i++ {
			repeat = vals[i]-vals[i-1] == step
		}
		if repeat {
			return two(vals[0]) + "/" + strconv.Itoa(step)
		}
	}
	return runs(vals, two)
}

// runs writes vals (ascending) as a comma list, three or more consecutive
// values as a range "a..b".
func runs(vals []int, name func(int) string) string {
	var parts []string
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1]-vals[j] == 1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, name(vals[i])+".."+name(vals[j]))
		case j == i+1:
			parts = append(parts, name(vals[i]), name(vals[j]))
		default:
			parts = append(parts, name(vals[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// weekdayList writes the weekdays of a day-of-week field in systemd's
// order (Monday first, so that no range wraps), "" for all seven.
func weekdayList(bits uint64) string {
	var days []int // positions Monday=0 .. Sunday=6
	for pos := 0; pos < 7; pos++ {
		if bits&(1<<uint((pos+1)%7)) != 0 {
			days = append(days, pos)
		}
	}
	if len(days) == 7 {
		return ""
	}
	names := [7]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	return runs(days, func(p int) string { return names[p] })
}

// anyDate reports whether some month of the month field has a day of the
// day-of-month field ("30 2": none).
func anyDate(months, doms uint64) bool {
	longest := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		for d := 1; months&(1<<uint(m)) != 0 && d <= longest[m]; d++ {
			if doms&(1<<uint(d)) != 0 {
				return true
			}
		}
	}
	return false
}

// checkTransitions refuses s when, at a transition of its zone in
// [from, to), a timer would miss one of its slots: see the package doc.
func checkTransitions(s ledger.Schedule, from, to time.Time) error {
	loc := s.Location()
	wall, err := ledger.ParseSchedule(s.String(), "UTC") // the expression over wall-clock times
	if err != nil {
		return err
	}
	refuse := func(format string, a ...any) error {
		return &Inexpressible{Schedule: s.String(), TimeZone: s.TimeZone(), Reason: fmt.Sprintf(format, a...)}
	}
	for t := from; t.Before(to); {
		_, b := t.In(loc).ZoneBounds()
		if b.IsZero() || !b.After(t) {
			return nil // no later transition
		}
		t = b
		_, before := b.Add(-time.Second).In(loc).Zone()
		_, after := b.In(loc).Zone()
		if after == before {
			continue // a new name or rule, the same offset (Europe/London in 2038)
		}
		leave, arrive := b.Add(time.Duration(before)*time.Second).UTC(), b.Add(time.Duration(after)*time.Second).UTC() // wall times
		next, ok := s.Next(b.Add(-time.Nanosecond))
		if !ok {
			return nil
		}
		day, at := b.In(loc).Format("2006-01-02"), next.In(loc).Format(time.RFC3339)
		simple := leave.Minute() == 0 && arrive.Minute() == 0 && leave.Hour() > 0 && arrive.Hour() > 0 && leave.Day() == arrive.Day()
		switch {
		case simple && after > before:
			// systemd skips the skipped times and elapses from the gap's
			// end on: it misses the gap end's slot when only a skipped
			// time gave it.
			if w, ok := wall.Prev(arrive); next.Equal(b) && (!ok || !w.Equal(arrive)) {
				return refuse("on %s the clocks skip from %s to %s; consullock runs the skipped time's slot at %s and systemd skips it "+
					"(a schedule that matches no time from %s to %s on such nights, or time_zone \"UTC\", has a timer)",
					day, leave.Format("15:04"), arrive.Format("15:04"), at, leave.Format("15:04"), arrive.Add(-time.Minute).Format("15:04"))
			}
		case !simple:
			// Off the hour (Lord Howe, Chatham) or at midnight (Havana,
			// Beirut): systemd's search steps to the next whole hour after
			// a time the clocks skip, and may stop with "Infinite loop in
			// calendar calculation" near a repeated midnight.
			if first, ok := s.Next(b.Add(-2*time.Hour - time.Nanosecond)); ok && first.Before(b.Add(3*time.Hour)) {
				return refuse("on %s the clocks change from %s to %s, off the hour or at midnight, where systemd's elapses "+
					"differ from the slots; this schedule has a slot at %s", day, leave.Format("15:04"), arrive.Format("15:04"), first.In(loc).Format(time.RFC3339))
			}
		}
	}
	return nil
}
