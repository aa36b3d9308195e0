package ledger

import (
	"fmt"
	"strconv"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Run once: a lock whose command must run once per run, not merely one at
// a time. A run is named by a run ID, the same on every node for one firing
// of the schedule: given explicitly (`consullock run -run-id ID`) or derived
// from the lock's run_once period (RunSlot). The run ledger (ledger.go)
// records each run's attempts.

// Run-once limits and defaults.
const (
	// MinRunPeriod is the shortest run_once period. A run ID is the period
	// slot a trigger falls in, so every node's trigger for one firing must
	// land in the same slot: the slot must be much wider than clock skew
	// plus trigger jitter (timers, schedulers), and a crashed attempt must
	// be taken over (worst_case_gap, at least 20s with Consul's minimum
	// TTL) well within it. A minute is the finest schedule cron offers.
	MinRunPeriod = time.Minute

	// MaxRunPeriod is the longest run_once period: a leap year.
	MaxRunPeriod = 366 * 24 * time.Hour

	// DefaultMaxAttempts is how many attempts a run gets when run_once
	// does not say.
	DefaultMaxAttempts = 3

	// MaxMaxAttempts is the largest max_attempts.
	MaxMaxAttempts = 100

	// DefaultRunKeep is how many runs the ledger keeps when run_once does
	// not say.
	DefaultRunKeep = 20

	// MaxRunKeep is the largest keep: the ledger is one KV value, which
	// Consul limits to 512 KiB by default (kv_max_value_size).
	MaxRunKeep = 1000

	// MaxRunIDLength is the longest run ID, in bytes.
	MaxRunIDLength = 128
)

// RunOnce is a lock's run_once block.
type RunOnce struct {
	// Period is the width of a run slot; with no explicit run ID, the run
	// ID is the slot containing the runner's start (RunSlot).
	Period time.Duration
	// Offset moves the slot boundaries: slots start at the Unix epoch plus
	// Offset plus a whole number of periods. 0 <= Offset < Period.
	Offset time.Duration
	// MaxAttempts is how many attempts one run gets; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// Keep is how many runs the ledger keeps; 0 means DefaultRunKeep.
	Keep int
	// Schedule, instead of Period and Offset, names runs by calendar
	// slots: a cron expression read in TimeZone (ParseSchedule); with no
	// explicit run ID, the run ID is the latest slot at or before the
	// runner's start (Slot).
	Schedule string
	// TimeZone is the IANA zone Schedule is read in; "" means
	// DefaultTimeZone. Only with Schedule.
	TimeZone string
	// StartingDeadline: a runner that starts more than this after its
	// slot's time (Trigger) does not start the slot (JudgeTrigger,
	// ExitRunPastDeadline) unless the ledger shows it begun (SlotBegun);
	// 0 is no deadline: the latest slot may start until the next slot's
	// time. Not applied to an explicit run ID (a backfill).
	StartingDeadline time.Duration
	// Since is when the lock was declared with these slots (created, or
	// its schedule, time_zone, period or offset last changed), written by
	// the provider: no slot before it is missed (MissedSlots), nor run
	// (JudgeTrigger, RunIDSlot). Zero when unknown (a record written
	// before it existed).
	Since time.Time
	// MaxRuntime stops an attempt's command this long after it started
	// (SIGTERM, SIGKILL after -grace; outcome "timed_out"); 0 is none.
	MaxRuntime time.Duration
	// RetryAfter is the wait before the attempt after the first retried
	// one, RetryBackoff (>= 1; 0 means DefaultRetryBackoff) its factor per
	// attempt (jobcontrol.go).
	RetryAfter   time.Duration
	RetryBackoff float64
	// Overlap is what a runner does when another run holds the lock
	// (overlap.go); "" is OverlapWait.
	Overlap Overlap
}

// WithDefaults returns r with MaxAttempts and Keep defaulted.
func (r RunOnce) WithDefaults() RunOnce {
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Keep == 0 {
		r.Keep = DefaultRunKeep
	}
	if r.Schedule != "" && r.TimeZone == "" {
		r.TimeZone = DefaultTimeZone
	}
	return r
}

// Field names of the run_once block, as users write them.
const (
	FieldRunOnce            = "run_once"
	FieldRunOncePeriod      = "run_once.period"
	FieldRunOnceOffset      = "run_once.offset"
	FieldRunOnceMaxAttempts = "run_once.max_attempts"
	FieldRunOnceKeep        = "run_once.keep"
)

var (
	runPeriodAllowed   = fmt.Sprintf("a duration from %s to %s (a leap year)", MinRunPeriod, MaxRunPeriod)
	maxAttemptsAllowed = fmt.Sprintf("an integer from 1 to %d", MaxMaxAttempts)
	runKeepAllowed     = fmt.Sprintf("an integer from 1 to %d", MaxRunKeep)

	startingDeadlineAllowed = fmt.Sprintf("a duration from 1s to %s, or unset for no deadline", MaxStartingDeadline.String())
)

// Validate reports every problem of r as FieldErrors named
// "run_once.period" and so on. Zero MaxAttempts and Keep mean their
// defaults.
func (r RunOnce) Validate() error {
	var errs validation.FieldErrors
	switch {
	case r.Schedule != "":
		if r.Period != 0 || r.Offset != 0 {
			errs = append(errs, &validation.FieldError{Field: FieldRunOncePeriod, Value: r.Period.String(), Allowed: fmt.Sprintf(
				"no run_once.period or run_once.offset with run_once.schedule (%q): set one of run_once.period and run_once.schedule", r.Schedule)})
		}
		errs = append(errs, validation.AsFieldErrors(func() error { _, err := ParseSchedule(r.Schedule, r.TimeZone); return err }())...)
	case r.TimeZone != "":
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceTimeZone, Value: r.TimeZone, Allowed: "a time zone only with run_once.schedule (run_once.period slots are in UTC)"})
		fallthrough
	default:
		if r.Period == 0 {
			errs = append(errs, &validation.FieldError{Field: FieldRunOncePeriod, Value: r.Period.String(), Allowed: runPeriodAllowed + ", or run_once.schedule instead"})
		} else if r.Period < MinRunPeriod || r.Period > MaxRunPeriod {
			errs = append(errs, &validation.FieldError{Field: FieldRunOncePeriod, Value: r.Period.String(), Allowed: runPeriodAllowed})
		}
	}
	if r.StartingDeadline != 0 && (r.StartingDeadline < time.Second || r.StartingDeadline > MaxStartingDeadline) {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceStartingDeadline, Value: r.StartingDeadline.String(), Allowed: startingDeadlineAllowed})
	}
	if r.Offset < 0 || (r.Period > 0 && r.Offset >= r.Period) {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceOffset, Value: r.Offset.String(), Allowed: fmt.Sprintf(
			"a duration from 0s to less than the period (%s)", r.Period.String())})
	}
	if r.MaxAttempts < 0 || r.MaxAttempts > MaxMaxAttempts {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceMaxAttempts, Value: strconv.Itoa(r.MaxAttempts), Allowed: maxAttemptsAllowed})
	}
	if r.Keep < 0 || r.Keep > MaxRunKeep {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceKeep, Value: strconv.Itoa(r.Keep), Allowed: runKeepAllowed})
	}
	errs = append(errs, validation.AsFieldErrors(ValidateOverlap(FieldRunOnceOverlap, string(r.Overlap)))...)
	errs = append(errs, r.validateJobControl()...)
	return errs.Err()
}

// DeadlineWarnings advises on a schedule without starting_deadline: a
// trigger then runs the latest slot however late it starts, until the next
// slot's time (a day late for a daily schedule), after a reboot, a resumed
// VM or a timer catching up.
func (r RunOnce) DeadlineWarnings() []validation.Warning {
	if r.Schedule == "" || r.StartingDeadline != 0 {
		return nil
	}
	return []validation.Warning{{
		Field:   FieldRunOnceSchedule,
		Summary: "Schedule Without Starting Deadline",
		Detail: fmt.Sprintf("run_once.schedule (%q) has no run_once.starting_deadline: a runner started without -run-id "+
			"runs the latest slot however late it starts, up to the next slot's time (a whole day for a daily "+
			"schedule), e.g. after a reboot, a resumed VM or a timer catching up. Set run_once.starting_deadline "+
			"(e.g. \"10m\") to bound how late a slot may start: a later runner then exits %d, unless the slot was "+
			"already begun, and the slot is listed missed.", r.Schedule, ExitRunPastDeadline),
	}}
}

// ValidateRunID checks an explicit run ID (`consullock run -run-id`):
// 1 to MaxRunIDLength bytes of letters, digits and . _ : @ + -, so that it
// is safe in logs, environment variables and file names, and the same bytes
// on every node. The error is a *FieldError for "-run-id".
func ValidateRunID(id string) error {
	return ValidateRunIDField("-run-id", id)
}

// RunIDAllowed describes a valid run ID.
var RunIDAllowed = fmt.Sprintf("1 to %d bytes of letters, digits, '.', '_', ':', '@', '+' or '-' "+
	"(the same on every node for one run, e.g. a scheduler's job ID or a date)", MaxRunIDLength)

// ValidateRunIDField is ValidateRunID for a run ID read from field (a
// ledger record's run_id).
func ValidateRunIDField(field, id string) error {
	ok := len(id) >= 1 && len(id) <= MaxRunIDLength
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '@' || c == '+' || c == '-'
	}
	if ok {
		return nil
	}
	return &validation.FieldError{Field: field, Value: validation.Truncate(id, MaxRunIDLength+8), Allowed: RunIDAllowed}
}

// RunSlot is the run of a run_once lock that a runner started at t belongs
// to: the UTC period slot containing t, where slots start at the Unix epoch
// plus offset plus whole periods. id is the slot's start in RFC 3339
// ("2026-12-01T00:00:00Z"; a fraction of a second only when offset has
// one), a valid run ID.
//
// Clock skew: every node computes the slot on its own clock. Nodes whose
// clocks differ by k agree on the slot only when the trigger fires more
// than k away from a slot boundary: a trigger at 00:00:00 with a 24h
// period puts a node whose clock is slow in yesterday's slot, and the job
// runs twice (once per slot). Fire triggers well inside the slot (e.g.
// period 24h, trigger at 00:05 UTC, clocks kept by NTP), or set offset so
// that boundaries fall far from the triggers; when that cannot be
// guaranteed, pass an explicit -run-id from the scheduler instead.
func RunSlot(t time.Time, period, offset time.Duration) (id string, start time.Time) {
	if period <= 0 {
		panic("ledger.RunSlot: period must be positive")
	}
	origin := time.Unix(0, 0).UTC().Add(offset)
	// t.Sub saturates outside the years 1678..2262; a runner's clock is
	// well inside them.
	n := floorDiv(int64(t.Sub(origin)), int64(period))
	start = origin.Add(time.Duration(n) * period)
	return start.Format(time.RFC3339Nano), start
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// ValidateRunPeriod checks a run_once period on its own, as a *FieldError
// for field, for a validator that judges one attribute.
func ValidateRunPeriod(field string, d time.Duration) error {
	for _, fe := range validation.AsFieldErrors(RunOnce{Period: d}.Validate()) {
		if fe.Field == FieldRunOncePeriod {
			c := *fe
			c.Field = field
			return &c
		}
	}
	return nil
}
