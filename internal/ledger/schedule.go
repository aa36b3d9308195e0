package ledger

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	// The zone rules, embedded: a node without a system zoneinfo (a
	// minimal container) still reads run_once.time_zone. A system copy,
	// when present, is read first, so nodes should share tzdata releases.
	_ "time/tzdata"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Calendar schedules: run_once.schedule, a cron expression read in
// run_once.time_zone, names runs by calendar slots instead of fixed-width
// period slots (runonce.go). The provider (plan-time validation and
// next_slots), the runner (the run ID of a trigger, starting_deadline), the
// controller and status (missed and next slots) all read it through
// Schedule, so they agree slot for slot.
//
// Slots. A slot is an instant. Each local date and wall-clock time the
// expression matches (robfig/cron/v3's reading of the five fields, the
// reading Kubernetes CronJob uses) gives one slot:
//   - a wall-clock time that occurs once: that instant;
//   - one that occurs twice (fall back): its first occurrence only. 01:30
//     America/New_York on the first Sunday of November is the 01:30 EDT
//     (05:30Z) slot; at 01:30 EST the latest slot is still that one, so a
//     trigger in the repeated hour finds its run done;
//   - one that does not exist (spring forward): the first instant after the
//     gap. 02:30 Europe/Berlin on the last Sunday of March is the 03:00 CEST
//     (01:00Z) slot.
//
// Slots falling on the same instant are one slot (every skipped time of a
// gap, and a time scheduled at the gap's end, e.g. "*/15 * * * *" gives one
// slot at 03:00 on that night). This is what cron (Vixie cron, cronie) does
// for jobs at fixed times: skipped jobs run right after the change, repeated
// ones are not run again. robfig/cron, and so a Kubernetes CronJob with
// timeZone, instead runs nothing for a skipped time and runs a repeated one
// twice (once per occurrence). Schedules in UTC (the default) have no such
// nights.

// Field names of the schedule, as users write them.
const (
	FieldRunOnceSchedule         = "run_once.schedule"
	FieldRunOnceTimeZone         = "run_once.time_zone"
	FieldRunOnceStartingDeadline = "run_once.starting_deadline"
)

// DefaultTimeZone is run_once.time_zone when it is not set.
const DefaultTimeZone = "UTC"

// MaxStartingDeadline is the longest run_once.starting_deadline.
const MaxStartingDeadline = MaxRunPeriod

// ScheduleAllowed describes a valid run_once.schedule.
const ScheduleAllowed = `a 5-field cron expression "minute hour day-of-month month day-of-week" ` +
	`(e.g. "0 2 * * 1-5": 02:00 on weekdays; day-of-week 0-6 or sun-sat, 0 is Sunday) ` +
	`or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly`

// TimeZoneAllowed describes a valid run_once.time_zone.
const TimeZoneAllowed = `an IANA time zone name such as "Europe/Berlin", "America/New_York" or "UTC" (the default)`

// scheduleParser reads standard 5-field cron expressions and the @
// shorthands; @every is refused in ParseSchedule (a fixed period is
// run_once.period).
var scheduleParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxScanDays bounds the search for a slot: the longest gap between two
// matching dates, 29 February with a non-leap 2100 in between, is 8 years.
const maxScanDays = 8*366 + 2

// Schedule is a parsed run_once.schedule in its time zone. The zero value
// is not a schedule; use ParseSchedule.
type Schedule struct {
	expr string
	zone string
	loc  *time.Location
	spec *cron.SpecSchedule
}

// ParseSchedule reads a run_once.schedule and run_once.time_zone ("" is
// DefaultTimeZone). Errors are FieldErrors quoting the expression or the
// zone and saying what is wrong.
func ParseSchedule(expr, zone string) (Schedule, error) {
	key := [2]string{expr, zone}
	if s, ok := parsedSchedules.Load(key); ok {
		if sched, ok := s.(Schedule); ok {
			return sched, nil
		}
	}
	s, err := parseSchedule(expr, zone)
	if err == nil && parsedCount.Add(1) <= maxParsedSchedules {
		parsedSchedules.Store(key, s)
	}
	return s, err
}

// parsedSchedules caches valid schedules by expression and zone: the
// controller judges every declared schedule at each scrape. Bounded by
// maxParsedSchedules (then schedules are parsed each time).
var (
	parsedSchedules sync.Map
	parsedCount     atomic.Int64
)

const maxParsedSchedules = 4096

func parseSchedule(expr, zone string) (Schedule, error) {
	var errs validation.FieldErrors
	loc, zerr := LoadTimeZone(zone)
	if zerr != nil {
		errs = append(errs, validation.AsFieldErrors(zerr)...)
	}
	spec, serr := parseCron(expr)
	if serr != nil {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceSchedule, Value: validation.Truncate(expr, 200), Allowed: serr.Error() + "; want " + ScheduleAllowed})
	}
	if len(errs) > 0 {
		return Schedule{}, errs
	}
	if zone == "" {
		zone = DefaultTimeZone
	}
	return Schedule{expr: expr, zone: zone, loc: loc, spec: spec}, nil
}

// LoadTimeZone reads a run_once.time_zone ("" is DefaultTimeZone). "Local"
// is refused: it would differ from node to node.
func LoadTimeZone(zone string) (*time.Location, error) {
	if zone == "" {
		zone = DefaultTimeZone
	}
	bad := func(what string) error {
		return &validation.FieldError{Field: FieldRunOnceTimeZone, Value: validation.Truncate(zone, 100), Allowed: what + "; want " + TimeZoneAllowed}
	}
	if zone == "Local" {
		return nil, bad("the node's local zone differs from node to node")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, bad("not a known time zone")
	}
	return loc, nil
}

func parseCron(expr string) (*cron.SpecSchedule, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, fmt.Errorf("empty")
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return nil, fmt.Errorf("a zone prefix is not read here: set run_once.time_zone")
	case strings.HasPrefix(e, "@every"):
		return nil, fmt.Errorf("@every is a fixed period: use run_once.period")
	}
	if !strings.HasPrefix(e, "@") {
		if n := len(strings.Fields(e)); n != 5 {
			return nil, fmt.Errorf("%d fields, not 5", n)
		}
	}
	s, err := scheduleParser.Parse(e)
	if err != nil {
		return nil, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok || spec.Second != 1 {
		return nil, fmt.Errorf("not a calendar schedule")
	}
	if !anyDate(spec) {
		return nil, fmt.Errorf("no date matches (day-of-month and month never meet)")
	}
	return spec, nil
}

// String is the expression as written.
func (s Schedule) String() string { return s.expr }

// TimeZone is the zone's name ("UTC" when none was given).
func (s Schedule) TimeZone() string { return s.zone }

// Location is the zone.
func (s Schedule) Location() *time.Location { return s.loc }

// SlotID is the run ID of the slot at t: t in the schedule's zone in RFC
// 3339 with seconds and the zone's offset, as time.RFC3339 writes it:
// "2026-03-29T03:00:00+02:00", "2026-11-01T01:30:00-04:00", and "Z" for a
// zero offset ("2026-12-01T00:00:00Z" in UTC, also Europe/London in
// winter). The same instant gives the same ID on every node.
func (s Schedule) SlotID(t time.Time) string {
	return t.In(s.loc).Truncate(time.Second).Format(time.RFC3339)
}

// Prev is the latest slot at or before t (the run of a trigger at t), and
// false only if there is none in the 8 years before t.
//
// Clock skew: each node reads its own clock. Nodes whose clocks differ by
// k agree on the slot only when triggers fire more than k after a slot's
// time: a trigger at exactly 02:00 puts a node whose clock is slow in the
// previous slot, and the job runs twice. Fire triggers a little after the
// slot (e.g. schedule "0 2 * * *", timers at 02:01), with clocks kept by
// NTP, or pass -run-id from the scheduler.
func (s Schedule) Prev(t time.Time) (time.Time, bool) {
	tw, up, _ := s.wallAround(t)
	// A wall time W can be a slot at or before t only if W <= tw + up.
	limit := tw + up
	c := civilDay(floorDiv(limit, 86400))
	for i := 0; i < maxScanDays; i, c = i+1, c.prev() {
		d := c.days
		if !c.matches(s.spec) {
			continue
		}
		maxMin := min((limit-d*86400)/60, 24*60-1)
		for hours := s.spec.Hour & below(int(maxMin/60)); hours != 0; {
			h := bits.Len64(hours) - 1
			hours &^= 1 << uint(h)
			top := 59
			if h == int(maxMin/60) {
				top = int(maxMin % 60)
			}
			for mins := s.spec.Minute & below(top); mins != 0; {
				mi := bits.Len64(mins) - 1
				mins &^= 1 << uint(mi)
				if at := resolveWall(s.loc, c.year, c.month, c.day, h, mi); !at.After(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// Next is the earliest slot after t, and false only if there is none in
// the 8 years after t.
func (s Schedule) Next(t time.Time) (time.Time, bool) {
	tw, _, down := s.wallAround(t)
	// A wall time W can be a slot after t only if W > tw - down.
	limit := tw - down
	c := civilDay(floorDiv(limit, 86400))
	for i := 0; i < maxScanDays; i, c = i+1, c.next() {
		d := c.days
		if !c.matches(s.spec) {
			continue
		}
		minMin := max(floorDiv(limit-d*86400, 60), 0) // W <= limit is skipped below
		for hours := s.spec.Hour &^ below(int(minMin/60)-1) &^ starBit; hours != 0; {
			h := bits.TrailingZeros64(hours)
			hours &^= 1 << uint(h)
			if h > 23 {
				break
			}
			low := 0
			if h == int(minMin/60) {
				low = int(minMin % 60)
			}
			for mins := s.spec.Minute &^ below(low-1) &^ starBit; mins != 0; {
				mi := bits.TrailingZeros64(mins)
				mins &^= 1 << uint(mi)
				if mi > 59 {
					break
				}
				if at := resolveWall(s.loc, c.year, c.month, c.day, h, mi); at.After(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// wallAround is t's wall clock in the zone as Unix seconds (the wall time
// read as UTC), and how far the zone's offset rises (up) and falls (down)
// from t's within two days of t: a wall time W resolves to an instant at or
// before t only if W <= tw+up, after t only if W > tw-down.
func (s Schedule) wallAround(t time.Time) (tw, up, down int64) {
	local := t.In(s.loc)
	_, off := local.Zone()
	tw = t.Unix() + int64(off)
	const near = 48 * time.Hour
	if start, end := local.ZoneBounds(); (start.IsZero() || t.Sub(start) > near) && (end.IsZero() || end.Sub(t) > near) {
		return tw, 0, 0 // the offset holds for two days either side
	}
	for _, probe := range []time.Duration{-near, near} {
		_, o := t.Add(probe).In(s.loc).Zone()
		up = max(up, int64(o-off))
		down = max(down, int64(off-o))
	}
	return tw, up, down
}

// below is the bits 0..n (none for n < 0).
func below(n int) uint64 {
	if n < 0 {
		return 0
	}
	return 1<<uint(n+1) - 1
}

// civil is a date, stepped a day at a time by the slot search.
type civil struct {
	days  int64 // since 1970-01-01
	year  int
	month time.Month
	day   int
	wd    time.Weekday
}

func civilDay(d int64) civil {
	y, m, dd := civilDate(d)
	return civil{days: d, year: y, month: m, day: dd, wd: time.Weekday(((d % 7) + 11) % 7)} // 1970-01-01 was a Thursday
}

func (c civil) matches(spec *cron.SpecSchedule) bool { return dateMatches(spec, c.month, c.day, c.wd) }

func (c civil) next() civil {
	c.days, c.day, c.wd = c.days+1, c.day+1, (c.wd+1)%7
	if c.day > daysIn(c.year, c.month) {
		c.day, c.month = 1, c.month+1
		if c.month > time.December {
			c.month, c.year = time.January, c.year+1
		}
	}
	return c
}

func (c civil) prev() civil {
	c.days, c.day, c.wd = c.days-1, c.day-1, (c.wd+6)%7
	if c.day < 1 {
		c.month--
		if c.month < time.January {
			c.month, c.year = time.December, c.year-1
		}
		c.day = daysIn(c.year, c.month)
	}
	return c
}

func daysIn(y int, m time.Month) int {
	switch m {
	case time.February:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// civilDate is the proleptic Gregorian date d days after 1970-01-01
// (Howard Hinnant's civil_from_days).
func civilDate(d int64) (int, time.Month, int) {
	z := d + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day := doy - (153*mp+2)/5 + 1
	month := mp + 3
	if month > 12 {
		month -= 12
	}
	year := yoe + era*400
	if month <= 2 {
		year++
	}
	return int(year), time.Month(month), int(day)
}

// NextSlots is the n slots after t.
func (s Schedule) NextSlots(t time.Time, n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		next, ok := s.Next(t)
		if !ok {
			break
		}
		out = append(out, next)
		t = next
	}
	return out
}

// Between is the slots in (from, to], oldest first, at most the last limit
// of them (limit <= 0: all).
func (s Schedule) Between(from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := from; ; {
		next, ok := s.Next(t)
		if !ok || next.After(to) {
			break
		}
		out = append(out, next)
		if limit > 0 && len(out) > limit {
			out = out[1:]
		}
		t = next
	}
	return out
}

// resolveWall is the slot instant of wall-clock time h:mi on date y-m-d in
// loc: the first occurrence of a doubled time, the end of the gap for a
// skipped one (see the package rule above).
func resolveWall(loc *time.Location, y int, m time.Month, d, h, mi int) time.Time {
	g := time.Date(y, m, d, h, mi, 0, 0, loc)
	start, end := g.ZoneBounds()
	const near = 48 * time.Hour
	if (start.IsZero() || g.Sub(start) > near) && (end.IsZero() || end.Sub(g) > near) {
		return g // no zone change nearby: the time exists once
	}
	// The zones around g, in time order; each is [from, to) with one offset.
	type zone struct {
		from, to time.Time
		offset   int
	}
	var zones []zone
	zoneAt := func(t time.Time) zone {
		_, off := t.Zone()
		f, e := t.ZoneBounds()
		return zone{f, e, off}
	}
	cur := zoneAt(g)
	if !cur.from.IsZero() {
		zones = append(zones, zoneAt(cur.from.Add(-time.Second)))
	}
	zones = append(zones, cur)
	if !cur.to.IsZero() {
		zones = append(zones, zoneAt(cur.to))
	}
	wall := time.Date(y, m, d, h, mi, 0, 0, time.UTC)
	in := func(z zone, t time.Time) bool {
		return (z.from.IsZero() || !t.Before(z.from)) && (z.to.IsZero() || t.Before(z.to))
	}
	for _, z := range zones { // first occurrence first
		if at := wall.Add(-time.Duration(z.offset) * time.Second); in(z, at) {
			return at.In(loc)
		}
	}
	// Skipped: the wall time falls in the gap at a boundary b where the
	// offset grows; the slot is b, the first instant after the gap.
	for i := 1; i < len(zones); i++ {
		b := zones[i].from
		before, after := wall.Add(-time.Duration(zones[i-1].offset)*time.Second), wall.Add(-time.Duration(zones[i].offset)*time.Second)
		if after.Before(b) && !before.Before(b) {
			return b.In(loc)
		}
	}
	return g
}

// starBit is robfig/cron's mark of a field written "*" (or "?"): with
// either day field starred, a date must match both day fields; with
// neither, either (cron's rule, "0 0 1 * 1": the 1st and every Monday).
const starBit = 1 << 63

// dateMatches reports whether spec's day-of-month, month and day-of-week
// fields match day d of month m, a wd, as robfig/cron matches them.
func dateMatches(spec *cron.SpecSchedule, m time.Month, d int, wd time.Weekday) bool {
	if spec.Month&(1<<uint(m)) == 0 {
		return false
	}
	domMatch := spec.Dom&(1<<uint(d)) != 0
	dowMatch := spec.Dow&(1<<uint(wd)) != 0
	if spec.Dom&starBit != 0 || spec.Dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// anyDate reports whether some date matches spec ("0 0 30 2 *" none).
func anyDate(spec *cron.SpecSchedule) bool {
	if spec.Dom&starBit == 0 && spec.Dow&starBit == 0 {
		return true // either day field: every week has a matching weekday
	}
	days := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if spec.Month&(1<<uint(m)) == 0 {
			continue
		}
		for d := 1; d <= days[m]; d++ {
			if spec.Dom&(1<<uint(d)) != 0 {
				return true // and some year has that date on a matching weekday
			}
		}
	}
	return false
}

// ExitRunPastDeadline is the exit code of `consullock run` when it started
// more than run_once.starting_deadline after its slot's time, or for a slot
// that precedes the lock's declaration (JudgeTrigger), and the run ledger
// does not show the slot begun by another runner (SlotBegun): the command
// was not started and the ledger was not written (the slot stays missed
// unless it is backfilled with -run-id).
const ExitRunPastDeadline = 119

// ParsedSchedule is r's Schedule in its TimeZone; r.Schedule must be set.
func (r RunOnce) ParsedSchedule() (Schedule, error) {
	return ParseSchedule(r.Schedule, r.TimeZone)
}

// Slot is the run of a runner started at start, when no run ID is given:
// for a schedule the latest slot at or before start (Schedule.Prev, named
// by SlotID), else the period slot containing start (RunSlot). at is the
// slot's scheduled time. r must be valid.
func (r RunOnce) Slot(start time.Time) (id string, at time.Time, err error) {
	if r.Schedule == "" {
		id, at = RunSlot(start, r.Period, r.Offset)
		return id, at, nil
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return "", time.Time{}, err
	}
	at, ok := s.Prev(start)
	if !ok {
		return "", time.Time{}, &validation.FieldError{Field: FieldRunOnceSchedule, Value: r.Schedule, Allowed: "a schedule with a slot in the 8 years before the start"}
	}
	return s.SlotID(at), at, nil
}

// PastDeadline is how late a runner started at start is for the slot
// scheduled at at, and whether that is more than StartingDeadline (never
// with no deadline). Clock skew between the nodes moves late by the skew.
func (r RunOnce) PastDeadline(at, start time.Time) (late time.Duration, past bool) {
	late = start.Sub(at)
	return late, r.StartingDeadline > 0 && late > r.StartingDeadline
}

// TriggerSkew is how long before a slot's time a trigger without -run-id
// still belongs to that slot (RunOnce.Trigger): a runner started at
// 01:59:58 by its clock for a schedule "0 2 * * *" runs the 02:00 slot,
// after waiting until 02:00 by its clock, not the day before's.
//
// Why 5s: a scheduler fires at or after the slot's time by its own clock;
// a runner reads its own, which may be behind by the nodes' clock skew
// (milliseconds under NTP, a few seconds on a node whose clock is still
// being slewed after a boot or a resumed VM). Five seconds covers that
// with room, and is small against the shortest slot width (MinRunPeriod, a
// minute): only a trigger for the previous slot that fires within 5s of
// the next one is taken for the next one, and it is long past any useful
// starting_deadline by then. It is also the longest a runner waits before
// it tries to acquire.
//
// Why wait rather than run at once: the command's scheduled time
// (CONSUL_LOCK_SCHEDULED_TIME) is never in the future, so a job that
// processes what exists up to its slot (a day's partition at midnight)
// never starts before the slot; and a runner on a clock that is ahead
// cannot start a slot before the nodes whose clocks are right consider it
// begun.
const TriggerSkew = 5 * time.Second

// Trigger is the slot a runner started at start runs when no run ID is
// given: Slot's, except with a schedule, where a slot at most TriggerSkew
// after start is the trigger's own (an early trigger), and wait is how
// long the runner waits until its time (0 for a slot at or before start).
// Period slots are Slot's. r must be valid.
func (r RunOnce) Trigger(start time.Time) (id string, at time.Time, wait time.Duration, err error) {
	if r.Schedule != "" {
		s, err := r.ParsedSchedule()
		if err != nil {
			return "", time.Time{}, 0, err
		}
		if next, ok := s.Next(start); ok && next.Sub(start) <= TriggerSkew {
			return s.SlotID(next), next, next.Sub(start), nil
		}
	}
	id, at, err = r.Slot(start)
	return id, at, 0, err
}

// SlotRefusal is why a trigger without -run-id does not start its slot
// (JudgeTrigger); "" when it may.
type SlotRefusal string

// Slot refusals. Both exit ExitRunPastDeadline unless the run ledger shows
// the slot begun (SlotBegun).
const (
	SlotPastDeadline SlotRefusal = "started past run_once.starting_deadline"
	SlotBeforeSince  SlotRefusal = "the slot precedes the declaration of the lock's slots"
)

// JudgeTrigger says whether a runner started at start may start the slot
// scheduled at at: not more than StartingDeadline after it (PastDeadline,
// late is how late it is), and never a schedule's slot before r.Since
// (the lock was declared, or its slots last changed, after the slot's
// time: the slot was not the lock's when it fell due). An unknown Since
// (zero) refuses nothing.
func (r RunOnce) JudgeTrigger(at, start time.Time) (late time.Duration, refusal SlotRefusal) {
	late, past := r.PastDeadline(at, start)
	switch {
	case r.precedesSince(at):
		return late, SlotBeforeSince
	case past:
		return late, SlotPastDeadline
	}
	return late, ""
}

// precedesSince reports whether the schedule's slot at at precedes
// r.Since (a slot at the declaration's second is the lock's). Period slots
// are spans, and a trigger runs the one it falls in: never refused so.
func (r RunOnce) precedesSince(at time.Time) bool {
	return r.Schedule != "" && !r.Since.IsZero() && at.Before(r.Since.Truncate(time.Second))
}

// SlotBegun reports whether ledger l shows run id begun: done (succeeded,
// or its attempts used up under r's max_attempts) or with an attempt
// running. A trigger that JudgeTrigger refuses goes on as an on-time one
// would for a begun slot (exits as done, or waits for the running attempt
// as any waiter does): the slot was started in time by another runner,
// and its late trigger is no miss. A run that is not begun (absent, or its
// last attempt failed with attempts left) is refused: starting it now
// would start the slot late.
func (r RunOnce) SlotBegun(l Ledger, id string) bool {
	if _, done := l.DoneRun(id, r.WithDefaults().MaxAttempts); done {
		return true
	}
	i := l.Find(id)
	return i >= 0 && l.Runs[i].Outcome == RunRunning
}

// RunIDSlot reads a run ID given with -run-id. With a schedule, a run ID
// that parses as an RFC 3339 timestamp is an instant: one that is a
// slot's, in any spelling (2026-12-07T01:00:00Z for the slot
// 2026-12-07T02:00:00+01:00 in Europe/Berlin, or with a fraction of a
// second), is that slot's run, named canonical by SlotID, at its time
// (slot true); any other instant, and a slot that precedes r.Since, is a
// *FieldError for "-run-id" naming the schedule, its zone and the nearest
// slots. Any other run ID (manual-2026-12-07, or a date alone) is a run of
// its own, returned as given with slot false: it is never a slot's run, so
// running it neither runs nor skips a slot. Without a schedule, the ID is
// returned as given, a slot when ScheduledTime reads it (a period slot as
// RunSlot writes it).
func (r RunOnce) RunIDSlot(id string) (canonical string, at time.Time, slot bool, err error) {
	if r.Schedule == "" {
		at, slot = r.ScheduledTime(id)
		return id, at, slot, nil
	}
	t, ok := parseTimestamp(id)
	if !ok {
		return id, time.Time{}, false, nil // not a timestamp: a run of its own
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return "", time.Time{}, false, err
	}
	prev, havePrev := s.Prev(t)
	if havePrev && prev.Equal(t) && !r.precedesSince(prev) {
		return s.SlotID(prev), prev, true, nil
	}
	where := fmt.Sprintf("of run_once.schedule %q in %s", r.Schedule, s.TimeZone())
	slotText := func(at time.Time, ok bool) string {
		if !ok {
			return "none within 8 years"
		}
		return s.SlotID(at)
	}
	var why string
	if havePrev && prev.Equal(t) {
		why = fmt.Sprintf("the slot %s %s precedes the declaration of the lock's slots (%s) and is never run",
			s.SlotID(prev), where, r.Since.In(s.Location()).Format(time.RFC3339))
	} else {
		next, haveNext := s.Next(t)
		why = fmt.Sprintf("%s is not a slot %s: the nearest slots are %s before and %s after",
			t.In(s.Location()).Format(time.RFC3339Nano), where, slotText(prev, havePrev), slotText(next, haveNext))
	}
	return "", time.Time{}, false, &validation.FieldError{Field: "-run-id", Value: id, Allowed: why +
		"; give a slot's time (any RFC 3339 spelling of its instant), or a run ID that is not a timestamp (e.g. manual-2026-12-07) for a run of its own"}
}

// ScheduledTime is the scheduled time of the run named id, when id names
// a slot of r as Slot writes it (a derived run ID, or one given with
// -run-id to backfill a missed slot); false for any other run ID.
func (r RunOnce) ScheduledTime(id string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, id)
	if err != nil || (r.Schedule == "" && r.Period <= 0) {
		return time.Time{}, false
	}
	got, at, err := r.Slot(t)
	if err != nil || got != id || !at.Equal(t) {
		return time.Time{}, false
	}
	return at, true
}

// NextSlot is the first slot of r after t (schedule or period), and false
// when there is none. r must be valid.
func (r RunOnce) NextSlot(t time.Time) (time.Time, bool) {
	if r.Schedule == "" {
		if r.Period <= 0 {
			return time.Time{}, false
		}
		_, start := RunSlot(t, r.Period, r.Offset)
		return start.Add(r.Period), true
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return time.Time{}, false
	}
	return s.Next(t)
}

// MissedSlots is the run IDs of r's slots that have no run in the ledger,
// oldest first: among the last keep slots up to now, those after r.Since
// (the slots' declaration), or, when that is unknown, after the oldest run
// the ledger keeps (named by its slot, else its first attempt's start; an
// empty ledger then has none). The latest slot is not missed while a
// runner may still start it: before its starting_deadline, or, with no
// deadline, until the next slot. `consullock backfill` runs them.
func (r RunOnce) MissedSlots(l Ledger, now time.Time) []string {
	r = r.WithDefaults()
	prev, name := r.slots()
	if prev == nil {
		return nil
	}
	var since time.Time
	ran := map[string]bool{}
	for _, run := range l.Runs {
		ran[run.ID] = true
		if id, _, slot, err := r.RunIDSlot(run.ID); err == nil && slot {
			ran[id] = true // a slot's run under another spelling (written before runners named it by SlotID)
		}
		at, ok := r.ScheduledTime(run.ID)
		if !ok && len(run.Attempts) > 0 {
			at, ok = run.Attempts[0].Started, true
		}
		if ok && (since.IsZero() || at.Before(since)) {
			since = at
		}
	}
	if !r.Since.IsZero() {
		since = r.Since.Add(-time.Nanosecond) // a slot at the declaration counts
	}
	if since.IsZero() {
		return nil
	}
	var out []string
	at, ok := prev(now)
	for n := 0; ok && n < r.Keep && at.After(since); n++ {
		_, past := r.PastDeadline(at, now)
		if n > 0 || past { // an older slot: no trigger now runs it
			if id := name(at); !ran[id] {
				out = append(out, id)
			}
		}
		at, ok = prev(at.Add(-time.Nanosecond))
	}
	slices.Reverse(out)
	return out
}

// slots is r's slot rule parsed once: prev is the latest slot at or
// before t, name its run ID; nil for an invalid r.
func (r RunOnce) slots() (prev func(time.Time) (time.Time, bool), name func(time.Time) string) {
	if r.Schedule == "" {
		if r.Period <= 0 {
			return nil, nil
		}
		return func(t time.Time) (time.Time, bool) {
				_, at := RunSlot(t, r.Period, r.Offset)
				return at, true
			}, func(t time.Time) string {
				id, _ := RunSlot(t, r.Period, r.Offset)
				return id
			}
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return nil, nil
	}
	return s.Prev, s.SlotID
}

// parseTimestamp reads id as an RFC 3339 time; false when it is not one.
func parseTimestamp(id string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, id)
	return t, err == nil
}
