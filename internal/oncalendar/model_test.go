package oncalendar

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// event is a calendar event as systemd reads the ones Events writes
// ("Mon..Fri *-*-01/2 02:00:00 Europe/Berlin"), parsed from the text: the
// tests' reading of the output, independent of how Events wrote it.
type event struct {
	weekdays                  map[time.Weekday]bool // nil: every day
	months, days, hours, mins map[int]bool
	loc                       *time.Location
}

func parseEvent(s string) (event, error) {
	f := strings.Fields(s)
	var e event
	if len(f) == 4 {
		w, err := weekdaySet(f[0])
		if err != nil {
			return e, err
		}
		e.weekdays, f = w, f[1:]
	}
	if len(f) != 3 {
		return e, fmt.Errorf("%q: want [weekdays] *-MM-DD HH:MM:00 ZONE", s)
	}
	date, clock := strings.Split(f[0], "-"), strings.Split(f[1], ":")
	if len(date) != 3 || date[0] != "*" || len(clock) != 3 || clock[2] != "00" {
		return e, fmt.Errorf("%q: want *-MM-DD HH:MM:00", s)
	}
	var err error
	for _, c := range []struct {
		text   string
		lo, hi int
		set    *map[int]bool
	}{{date[1], 1, 12, &e.months}, {date[2], 1, 31, &e.days}, {clock[0], 0, 23, &e.hours}, {clock[1], 0, 59, &e.mins}} {
		if *c.set, err = valueSet(c.text, c.lo, c.hi); err != nil {
			return e, fmt.Errorf("%q: %w", s, err)
		}
	}
	e.loc, err = time.LoadLocation(f[2])
	return e, err
}

// valueSet reads a component: "*", or a comma list of "v", "a..b" and
// "a/n" (a, a+n, ... up to hi).
func valueSet(text string, lo, hi int) (map[int]bool, error) {
	set := map[int]bool{}
	if text == "*" {
		for v := lo; v <= hi; v++ {
			set[v] = true
		}
		return set, nil
	}
	for _, item := range strings.Split(text, ",") {
		a, b, step := item, item, 1
		if x, n, ok := strings.Cut(item, "/"); ok {
			s, err := strconv.Atoi(n)
			if err != nil || s < 1 {
				return nil, fmt.Errorf("repetition %q", item)
			}
			a, b, step = x, strconv.Itoa(hi), s
		} else if x, y, ok := strings.Cut(item, ".."); ok {
			a, b = x, y
		}
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || from < lo || to > hi || from > to {
			return nil, fmt.Errorf("item %q", item)
		}
		for v := from; v <= to; v += step {
			set[v] = true
		}
	}
	return set, nil
}

func weekdaySet(text string) (map[time.Weekday]bool, error) {
	order := []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	set := map[time.Weekday]bool{}
	for _, item := range strings.Split(text, ",") {
		a, b, _ := strings.Cut(item, "..")
		if b == "" {
			b = a
		}
		i, j := slices.Index(order, a), slices.Index(order, b)
		if i < 0 || j < i {
			return nil, fmt.Errorf("weekdays %q", text)
		}
		for p := i; p <= j; p++ {
			set[time.Weekday((p+1)%7)] = true
		}
	}
	return set, nil
}

func (e event) dateMatches(y int, m time.Month, d int) bool {
	wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()
	return e.months[int(m)] && e.days[d] && (e.weekdays == nil || e.weekdays[wd])
}

// elapses is the first n elapses after from of a timer with these events,
// by systemd's rule as the tests state it (and check against
// systemd-analyze where it exists): an event elapses at a wall-clock time
// it matches, at the time's first occurrence, and never at a time the
// clocks skip.
func elapses(events []event, from time.Time, n int) []time.Time {
	var out []time.Time
	loc := events[0].loc
	day := from.In(loc)
	day = time.Date(day.Year(), day.Month(), day.Day()-1, 0, 0, 0, 0, time.UTC) // a wall date
	for i := 0; i < 12*366 && len(out) < n; i, day = i+1, day.AddDate(0, 0, 1) {
		var found []time.Time
		for _, e := range events {
			if !e.dateMatches(day.Year(), day.Month(), day.Day()) {
				continue
			}
			for h := 0; h < 24; h++ {
				for mi := 0; mi < 60 && e.hours[h]; mi++ {
					if !e.mins[mi] {
						continue
					}
					if at, ok := firstOccurrence(day.Add(time.Duration(h)*time.Hour+time.Duration(mi)*time.Minute), loc); ok && at.After(from) {
						found = append(found, at)
					}
				}
			}
		}
		slices.SortFunc(found, func(a, b time.Time) int { return a.Compare(b) })
		found = slices.CompactFunc(found, func(a, b time.Time) bool { return a.Equal(b) })
		out = append(out, found...)
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// firstOccurrence is the earliest instant whose wall-clock time in loc is
// w (a wall time written in UTC); false when the clocks skip it.
func firstOccurrence(w time.Time, loc *time.Location) (time.Time, bool) {
	var best time.Time
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := w.Add(probe).In(loc).Zone()
		at := w.Add(-time.Duration(off) * time.Second)
		l := at.In(loc)
		if time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Equal(w) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	return best, !best.IsZero()
}
