package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Overlap: what a runner for one run does when it finds another run's
// attempt holding the lock (run_once.overlap), the ledger entries the
// policies write, and the slots of a backfill.

// Overlap is run_once.overlap.
type Overlap string

// Overlap policies, as CronJob's concurrencyPolicy Allow/Forbid/Replace
// and Temporal's BufferOne/Skip/TerminateOther.
const (
	// OverlapWait (default): wait behind the running run, then run.
	OverlapWait Overlap = "wait"
	// OverlapSkip: record this run skipped and exit ExitRunSkipped.
	OverlapSkip Overlap = "skip"
	// OverlapReplace: end the running attempt's session as `consullock
	// release` does (lock-delay kept, its command stopped by its runner's
	// stop rule), record that attempt replaced, and run after the
	// lock-delay. A run older than the running one is skipped instead: the
	// newer run supersedes it (so two runs never replace each other in
	// turn).
	OverlapReplace Overlap = "replace"
)

// OverlapValues are the allowed run_once.overlap values.
var OverlapValues = []string{string(OverlapWait), string(OverlapSkip), string(OverlapReplace)}

// FieldRunOnceOverlap names run_once.overlap.
const FieldRunOnceOverlap = "run_once.overlap"

// Outcomes the overlap policies record.
const (
	// RunSkipped (run_once.overlap "skip"): the run was not started because
	// another run held the lock; the attempt has no session (Node is the
	// runner's that skipped it, Reason names the run that held).
	RunSkipped RunOutcome = "skipped"
	// RunReplaced (run_once.overlap "replace"): a newer run ended this
	// attempt's session; Reason names that run.
	RunReplaced RunOutcome = "replaced"
)

// ExitRunSkipped is the exit code of `consullock run` for a run not
// started under run_once.overlap: skipped because another run held the
// lock, or found skipped or replaced already.
const ExitRunSkipped = 117

// Superseded reports whether o is an overlap policy's outcome: the run is
// done with unless a backfill runs it again.
func (o RunOutcome) Superseded() bool { return o == RunSkipped || o == RunReplaced }

// Counted is how many of r's attempts count toward max_attempts: not a
// skipped or replaced one (the run was set aside under run_once.overlap,
// not tried and failed), so that a backfill can still run it.
func (r Run) Counted() int {
	n := 0
	for _, a := range r.Attempts {
		if !a.Outcome.Superseded() {
			n++
		}
	}
	return n
}

// ValidateOverlap checks a run_once.overlap value ("" is OverlapWait).
func ValidateOverlap(field, v string) error {
	if v == "" || slices.Contains(OverlapValues, v) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: v, Allowed: fmt.Sprintf("one of %q, %q or %q", OverlapWait, OverlapSkip, OverlapReplace)}
}

// OverlapAction is what a runner for run id does under policy p while
// run other holds the lock.
type OverlapAction int

const (
	OverlapActWait    OverlapAction = iota // wait for the lock
	OverlapActSkip                         // record this run skipped, exit ExitRunSkipped
	OverlapActReplace                      // end other's session, record it replaced, acquire after the lock-delay
)

// DecideOverlap is the action of a runner for run id (at: its slot's time,
// zero when it is no slot) finding run other (otherAt likewise) holding
// the lock. The same run is waited for under every policy; so is any run
// by a backfill (backfill: it runs old slots one at a time and neither
// skips nor replaces). Under replace, a run whose slot is older than the
// holder's is skipped: the newer run supersedes it.
func DecideOverlap(p Overlap, id string, at time.Time, other string, otherAt time.Time, backfill bool) OverlapAction {
	switch {
	case id == other || backfill:
		return OverlapActWait
	case p == OverlapSkip:
		return OverlapActSkip
	case p == OverlapReplace && !at.IsZero() && !otherAt.IsZero() && at.Before(otherAt):
		return OverlapActSkip
	case p == OverlapReplace:
		return OverlapActReplace
	}
	return OverlapActWait
}

// RunningAttempt is the run and attempt running under session in l; ok is
// false when none is.
func (l Ledger) RunningAttempt(session string) (run string, a Attempt, ok bool) {
	for _, r := range l.Runs {
		if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Session == session && r.Attempts[n-1].Outcome == RunRunning {
			return r.ID, r.Attempts[n-1], true
		}
	}
	return "", Attempt{}, false
}

// Skip records run id skipped by a runner on node because run holder held
// the lock: a run that does not exist yet gets one attempt "skipped"; a
// run whose latest attempt is not running gets its next one (a failed run
// retried at a later trigger). changed is false, l unchanged, when the
// run cannot be skipped: it succeeded, is superseded already, or an
// attempt of it runs.
func (l Ledger) Skip(id, node, holder string, now time.Time) (out Ledger, changed bool, err error) {
	if err := ValidateRunID(id); err != nil {
		return l, false, err
	}
	out = l.clone()
	i := out.Find(id)
	if i < 0 {
		out.Runs = slices.Insert(out.Runs, 0, Run{ID: id})
		i = 0
	}
	run := &out.Runs[i]
	if _, ok := run.Succeeded(); ok || run.Outcome.Superseded() || run.Outcome == RunRunning && len(run.Attempts) > 0 {
		return l, false, nil
	}
	run.Attempts = append(run.Attempts, Attempt{Number: len(run.Attempts) + 1, Node: node, Started: now.UTC(), Finished: now.UTC(),
		Outcome: RunSkipped, Reason: truncateReason(fmt.Sprintf("run %s held the lock (run_once.overlap %q)", holder, OverlapSkip))})
	run.Outcome, run.NotBefore = RunSkipped, time.Time{}
	return out, true, nil
}

// Replace records the latest attempt of session, running or recorded
// lost (its runner saw the session end first), replaced by run by: found
// false, l unchanged, when there is no such attempt.
func (l Ledger) Replace(session, by string, now time.Time) (out Ledger, run string, attempt int, found bool) {
	for i, r := range l.Runs {
		n := len(r.Attempts)
		if n == 0 || r.Attempts[n-1].Session != session || r.Attempts[n-1].Outcome != RunRunning && r.Attempts[n-1].Outcome != RunLost {
			continue
		}
		out = l.clone()
		at := &out.Runs[i].Attempts[n-1]
		at.Outcome, at.Finished, at.ExitCode = RunReplaced, now.UTC(), nil
		at.Reason = truncateReason(fmt.Sprintf("replaced by run %s (run_once.overlap %q)", by, OverlapReplace))
		out.Runs[i].Outcome, out.Runs[i].NotBefore = RunReplaced, time.Time{}
		return out, r.ID, at.Number, true
	}
	return l, "", 0, false
}

// Superseded is run id when its latest attempt was skipped or replaced:
// no runner starts it again, but a backfill does.
func (l Ledger) Superseded(id string) (Run, bool) {
	if i := l.Find(id); i >= 0 && l.Runs[i].Outcome.Superseded() {
		return l.Runs[i], true
	}
	return Run{}, false
}

// MaxBackfillSlots bounds the slots of one backfill: a range holding more
// is refused (a typo in a year, or a minutely schedule over months), and
// it is the most runs a ledger keeps (MaxRunKeep).
const MaxBackfillSlots = MaxRunKeep

// BackfillSlots are the slots of r's schedule in [from, to], oldest first,
// as run IDs, leaving out those before the declaration (Since). It refuses
// (a *FieldError naming -from or -to) a reversed range, a range reaching
// past now, and one holding more than MaxBackfillSlots slots (counted
// before leaving any out); r needs a schedule.
func (r RunOnce) BackfillSlots(from, to, now time.Time) ([]string, error) {
	if r.Schedule == "" {
		return nil, &validation.FieldError{Field: FieldRunOnceSchedule, Value: "", Allowed: "a schedule: backfill runs the slots of run_once.schedule"}
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return nil, err
	}
	switch {
	case to.Before(from):
		return nil, &validation.FieldError{Field: "-to", Value: to.Format(time.RFC3339), Allowed: fmt.Sprintf("a time at or after -from (%s)", from.Format(time.RFC3339))}
	case to.After(now):
		return nil, &validation.FieldError{Field: "-to", Value: to.Format(time.RFC3339), Allowed: fmt.Sprintf("a time at or before now (%s): slots not yet due are not backfilled", now.UTC().Format(time.RFC3339))}
	}
	var ids []string
	for t, n := from.Add(-time.Nanosecond), 0; ; n++ {
		next, ok := s.Next(t)
		if !ok || next.After(to) {
			break
		}
		t = next
		if n == MaxBackfillSlots {
			return nil, &validation.FieldError{Field: "-from", Value: from.Format(time.RFC3339), Allowed: fmt.Sprintf(
				"a range of at most %d slots of run_once.schedule %q (%s to %s holds more): backfill it in parts", MaxBackfillSlots, r.Schedule,
				from.Format(time.RFC3339), to.Format(time.RFC3339))}
		}
		if !r.precedesSince(next) {
			ids = append(ids, s.SlotID(next))
		}
	}
	return ids, nil
}
