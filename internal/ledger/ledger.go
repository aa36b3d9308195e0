package ledger

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// The run ledger: per lock, the runs of a run-once job and their attempts,
// one JSON record at <registry_prefix>/runs/<lock name>
// (internal/record/RECORDS.md). The holder writes it twice per attempt,
// each time in a Consul transaction guarded by its session holding the
// lock key: the attempt's start before the command starts (Begin), and its
// outcome in the transaction that releases the lock (Finish), so that no
// later holder acquires without seeing it. Everyone else only reads it.

// RunOutcome is the outcome of an attempt, or of a run (its latest
// attempt's, or RunExhausted).
type RunOutcome string

const (
	// RunRunning: the attempt started and has not finished.
	RunRunning RunOutcome = "running"
	// RunSucceeded: the command exited 0. The run is done; no other
	// attempt starts.
	RunSucceeded RunOutcome = "succeeded"
	// RunFailed: the command exited non-zero (or could not start).
	RunFailed RunOutcome = "failed"
	// RunLost: the lock was lost while the command ran; its runner stopped
	// it and recorded that it did.
	RunLost RunOutcome = "lost"
	// RunCrashed: the holder vanished without recording an outcome; the
	// next holder found its attempt still running under another session.
	RunCrashed RunOutcome = "crashed"
	// RunTimedOut: the command ran past its max_runtime; its runner
	// stopped it (SIGTERM, then SIGKILL after -grace) and recorded so.
	RunTimedOut RunOutcome = "timed_out"
	// RunReleased: an operator ended the holder's session with
	// `consullock release` while the attempt ran (ReleasedBy, Reason say
	// who and why). It counts toward max_attempts and is retried like a
	// lost attempt.
	RunReleased RunOutcome = "released"
	// RunExhausted (runs only): max_attempts attempts were made and none
	// succeeded; no further attempt starts unless max_attempts is raised.
	RunExhausted RunOutcome = "exhausted"
)

// AttemptOutcomes are the outcomes an attempt may have.
var AttemptOutcomes = []RunOutcome{RunRunning, RunSucceeded, RunFailed, RunLost, RunCrashed, RunTimedOut, RunReleased, RunSkipped, RunReplaced}

// RunOutcomes are the outcomes a run may have.
var RunOutcomes = append(slices.Clone(AttemptOutcomes), RunExhausted)

// Retried reports whether a run whose latest attempt ended with o gets
// another attempt (while attempts remain).
func (o RunOutcome) Retried() bool {
	return o == RunFailed || o == RunLost || o == RunCrashed || o == RunTimedOut || o == RunReleased
}

// Exit codes of `consullock run` for a run it does not execute.
const (
	// ExitRunAlreadySucceeded: the run ID already succeeded (on this node
	// or another); the command was not started. 0, because the job is done.
	ExitRunAlreadySucceeded = 0
	// ExitRunAlreadySucceededDistinct: the same, for a caller that asked to
	// tell it apart from running the command itself (the runner's flag).
	ExitRunAlreadySucceededDistinct = 122
	// ExitRunExhausted: the run ID used up max_attempts without a success;
	// the command was not started and the ledger's run says "exhausted".
	ExitRunExhausted = 121
)

// Attempt is one attempt of a run: one holder running the command.
type Attempt struct {
	// Number counts a run's attempts from 1.
	Number int
	// Node and Session are the holder's; FencingToken its acquisition's
	// Raft index (CONSUL_LOCK_FENCING_TOKEN).
	Node         string
	Session      string
	FencingToken uint64
	// Started is when the holder recorded the start, on its clock.
	Started time.Time
	// Finished is when the outcome was recorded (for a crashed attempt:
	// when the next holder found it); zero while running.
	Finished time.Time
	// ExitCode is the command's exit code; nil while running and when
	// there is none (crashed, or lost before the command exited).
	ExitCode *int
	Outcome  RunOutcome
	// Output and Stdout are the tails of the command's stderr and stdout
	// (-keep-output, TailOutput); "" when not kept.
	Output, Stdout string
	// Reason is, for a lost attempt, why the runner decided the lock was
	// lost (its loss reason, at most MaxAttemptReason bytes); for a
	// released attempt, the operator's reason. "" when unknown.
	Reason string
	// ReleasedBy is who released a released attempt's holder (`consullock
	// release`); "" for every other outcome.
	ReleasedBy string
	// ReleasedByAccessor is the accessor ID of the token that released it
	// (never its secret); "" when unknown and for every other outcome.
	ReleasedByAccessor string
}

// MaxAttemptReason bounds an attempt's reason, so that a lost attempt
// costs a bounded part of the ledger (MaxLedgerBytes).
const MaxAttemptReason = 512

// Run is one run ID's history.
type Run struct {
	ID       string
	Outcome  RunOutcome
	Attempts []Attempt // oldest first, numbered 1, 2, ...
	// NotBefore: no attempt of the run starts before it (retry_after,
	// jobcontrol.go); zero when the next attempt may start at once, and
	// while an attempt runs.
	NotBefore time.Time
}

// NotBeforeUnder is when the run's next attempt may start under policy
// p: its NotBefore or, when the latest attempt was released and no wait
// is recorded (`consullock release` ends a session without knowing the
// policy), the release's time plus p's wait, as after a failed attempt.
// Zero: no wait.
func (r Run) NotBeforeUnder(p AttemptPolicy) time.Time {
	n := len(r.Attempts)
	if !r.NotBefore.IsZero() || n == 0 || r.Attempts[n-1].Outcome != RunReleased {
		return r.NotBefore
	}
	last := r.Attempts[n-1]
	return p.notBefore(last.Number, last.Finished)
}

// Succeeded returns the run's succeeded attempt, if any.
func (r Run) Succeeded() (Attempt, bool) {
	for _, a := range r.Attempts {
		if a.Outcome == RunSucceeded {
			return a, true
		}
	}
	return Attempt{}, false
}

// Ledger is a lock's run history.
type Ledger struct {
	Lock string
	Runs []Run // most recently begun first
	// Pruned is what remains of the done runs Prune dropped (most recently
	// pruned first), at most MaxPrunedRuns; Forgotten what fell off it.
	Pruned    []PrunedRun
	Forgotten Forgotten
}

// PrunedRun is a run Prune dropped from Runs that is done: its ID and its
// outcome, succeeded or exhausted. Begin does not run it again. Pruned
// runs that are not done (failed, lost or crashed with attempts left) are
// not kept: run again, they start over at attempt 1.
type PrunedRun struct {
	ID      string
	Outcome RunOutcome // RunSucceeded or RunExhausted
}

// MaxPrunedRuns bounds Ledger.Pruned: past it, the oldest pruned runs are
// forgotten (Forgotten). About 50 bytes each in the record.
const MaxPrunedRuns = 1000

// Forgotten counts the done runs that fell off Ledger.Pruned, and Through
// is the latest of their run IDs that is an RFC 3339 time (a run_once
// period slot's ID; zero when none was): Begin refuses a run ID it cannot
// find that is such a time at or before Through, since it may be a
// forgotten run that succeeded. Any other run ID it cannot find is new to
// it.
type Forgotten struct {
	Runs    int
	Through time.Time
}

// ErrRunForgotten: Begin was asked for a run ID that is not in the ledger
// but may be one of the runs it forgot (Forgotten): it is not run.
var ErrRunForgotten = errors.New("the run may be one the ledger has forgotten")

// prunedRun finds run id among the pruned runs.
func (l Ledger) prunedRun(id string) (PrunedRun, bool) {
	for _, p := range l.Pruned {
		if p.ID == id {
			return p, true
		}
	}
	return PrunedRun{}, false
}

// forgets reports whether run id, not in the ledger, may be a run the
// ledger forgot: a time at or before Forgotten.Through.
func (l Ledger) forgets(id string) bool {
	if l.Forgotten.Runs == 0 || l.Forgotten.Through.IsZero() {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, id)
	return err == nil && !t.After(l.Forgotten.Through)
}

// DoneRun is run id when it is done (succeeded, or attempts used up under
// maxAttempts), from Runs or Pruned; ok is false otherwise. A pruned run
// has no attempts.
func (l Ledger) DoneRun(id string, maxAttempts int) (Run, bool) {
	if i := l.Find(id); i >= 0 {
		r := l.Runs[i]
		if _, ok := r.Succeeded(); ok || r.Outcome == RunExhausted && r.Counted() >= maxAttempts {
			return r, true
		}
		return Run{}, false
	}
	if p, ok := l.prunedRun(id); ok {
		return Run{ID: p.ID, Outcome: p.Outcome}, true
	}
	return Run{}, false
}

// Find returns the index of run id in l.Runs, or -1.
func (l Ledger) Find(id string) int {
	for i, r := range l.Runs {
		if r.ID == id {
			return i
		}
	}
	return -1
}

// AttemptOutcome is the outcome l records for attempt n of run id ("" when
// it has none): how a writer that lost a check-and-set learns whether the
// ledger already says what it meant to write.
func (l Ledger) AttemptOutcome(id string, n int) RunOutcome {
	if i := l.Find(id); i >= 0 {
		for _, a := range l.Runs[i].Attempts {
			if a.Number == n {
				return a.Outcome
			}
		}
	}
	return ""
}

// LastRun is the most recently begun run; ok is false for an empty ledger.
func (l Ledger) LastRun() (Run, bool) {
	if len(l.Runs) == 0 {
		return Run{}, false
	}
	return l.Runs[0], true
}

// clone copies l deeply enough that editing a copy's runs and attempts
// leaves l as it was.
func (l Ledger) clone() Ledger {
	out := Ledger{Lock: l.Lock, Runs: make([]Run, len(l.Runs)), Pruned: slices.Clone(l.Pruned), Forgotten: l.Forgotten}
	for i, r := range l.Runs {
		r.Attempts = slices.Clone(r.Attempts)
		out.Runs[i] = r
	}
	return out
}

// BeginKind is what Begin decided.
type BeginKind int

const (
	// BeginRun: run the command as attempt Attempt, after writing Ledger.
	BeginRun BeginKind = iota + 1
	// BeginAlreadySucceeded: do not run; Succeeded ran it. Release, exit
	// ExitRunAlreadySucceeded.
	BeginAlreadySucceeded
	// BeginExhausted: do not run; the run used up its attempts (Attempts).
	// Write Ledger when Changed, release, exit ExitRunExhausted.
	BeginExhausted
	// BeginWait: do not run yet; the run's NotBefore (retry_after) is
	// after now. Write Ledger when Changed (a crashed attempt recorded),
	// release the lock, wait until NotBefore without holding it, try again.
	BeginWait
	// BeginSuperseded: do not run; the run was skipped or replaced under
	// run_once.overlap (Attempts). Release, exit ExitRunSkipped. Only a
	// backfill (AttemptPolicy.Backfill) runs such a run again.
	BeginSuperseded
)

func (k BeginKind) String() string {
	switch k {
	case BeginRun:
		return "run"
	case BeginAlreadySucceeded:
		return "already succeeded"
	case BeginExhausted:
		return "attempts exhausted"
	case BeginWait:
		return "wait for not_before"
	case BeginSuperseded:
		return "skipped or replaced"
	}
	return fmt.Sprintf("BeginKind(%d)", int(k))
}

// BeginDecision is Begin's answer.
type BeginDecision struct {
	Kind BeginKind
	// Attempt is the attempt to run (BeginRun).
	Attempt int
	// Ledger is the ledger to write: with the attempt running (BeginRun),
	// or with a crashed attempt recorded and the run exhausted
	// (BeginExhausted with Changed).
	Ledger Ledger
	// Changed is false when Ledger is the ledger Begin was given: nothing
	// to write (the holder's own attempt already recorded, or a run
	// already marked exhausted).
	Changed bool
	// Succeeded is the attempt that succeeded (BeginAlreadySucceeded);
	// zero for a pruned run (Pruned).
	Succeeded Attempt
	// Pruned: the run is done, as the ledger's pruned runs say (no
	// attempts kept).
	Pruned bool
	// Attempts are the run's attempts (BeginExhausted, BeginWait).
	Attempts []Attempt
	// NotBefore is when the next attempt may start (BeginWait).
	NotBefore time.Time
}

// Begin decides what holder h, which holds the lock, does with run id. The
// rules, in order:
//
//   - a run that succeeded is not run again: AlreadySucceeded;
//   - an attempt still "running" under h's own session is h's own (its
//     start was recorded, then asked again): Run it, nothing to write;
//   - an attempt still "running" under another session is "crashed": h
//     acquired the lock, so that holder is gone without recording an
//     outcome (its release would have);
//   - a run skipped or replaced under run_once.overlap is Superseded,
//     unless p is a backfill's;
//   - a run with maxAttempts attempts (crashed ones count; skipped and
//     replaced ones do not: Counted) is Exhausted,
//     and says so ("exhausted");
//   - else h runs attempt n+1, recorded "running" before the command
//     starts. Failed, lost and crashed runs are thus retried until
//     maxAttempts, and raising max_attempts gives an exhausted run more.
//
// A run no longer in Runs but among the pruned runs is done: succeeded
// (AlreadySucceeded) or exhausted (Exhausted, with no attempts), with
// Pruned set. A run ID in neither that may be a forgotten run (Forgotten)
// is refused with ErrRunForgotten. A new run goes first in the ledger.
// Begin never prunes (see Prune). It refuses an invalid run ID or
// maxAttempts, and a holder without session.
func (l Ledger) Begin(id string, h holder.Holder, maxAttempts int, now time.Time) (BeginDecision, error) {
	return l.BeginWith(id, h, AttemptPolicy{MaxAttempts: maxAttempts}, now)
}

// BeginWith is Begin under policy p: with p's retry wait, an attempt found
// crashed, or found released with no wait recorded, sets the run's
// NotBefore (NotBeforeUnder), and a run whose NotBefore is after now is
// BeginWait (rules in jobcontrol.go), checked after Exhausted.
func (l Ledger) BeginWith(id string, h holder.Holder, p AttemptPolicy, now time.Time) (BeginDecision, error) {
	maxAttempts := p.MaxAttempts
	if err := ValidateRunID(id); err != nil {
		return BeginDecision{}, err
	}
	if maxAttempts < 1 || maxAttempts > MaxMaxAttempts {
		return BeginDecision{}, &validation.FieldError{Field: FieldRunOnceMaxAttempts, Value: fmt.Sprint(maxAttempts), Allowed: maxAttemptsAllowed}
	}
	if h.Session == "" {
		return BeginDecision{}, errors.New("ledger: Begin needs the holder's session")
	}
	out := l.clone()
	i := out.Find(id)
	if i < 0 {
		if p, ok := l.prunedRun(id); ok {
			if p.Outcome == RunSucceeded {
				return BeginDecision{Kind: BeginAlreadySucceeded, Ledger: l, Pruned: true}, nil
			}
			return BeginDecision{Kind: BeginExhausted, Ledger: l, Pruned: true}, nil
		}
		if l.forgets(id) {
			return BeginDecision{}, fmt.Errorf("%w: run %q is not in the ledger of lock %q, which has forgotten %d pruned runs with run IDs up to %s "+
				"(it remembers the last %d pruned runs that succeeded or used up their attempts); not running it",
				ErrRunForgotten, id, l.Lock, l.Forgotten.Runs, l.Forgotten.Through.UTC().Format(time.RFC3339Nano), MaxPrunedRuns)
		}
		out.Runs = slices.Insert(out.Runs, 0, Run{ID: id, Outcome: RunRunning})
		i = 0
	}
	run := &out.Runs[i]
	if a, ok := run.Succeeded(); ok {
		return BeginDecision{Kind: BeginAlreadySucceeded, Ledger: l, Succeeded: a}, nil
	}
	if run.Outcome.Superseded() && !p.Backfill {
		return BeginDecision{Kind: BeginSuperseded, Ledger: l, Attempts: slices.Clone(run.Attempts)}, nil
	}
	changed := false
	if n := len(run.Attempts); n > 0 && run.Attempts[n-1].Outcome == RunRunning {
		last := &run.Attempts[n-1]
		if last.Session == h.Session {
			return BeginDecision{Kind: BeginRun, Attempt: last.Number, Ledger: l}, nil
		}
		last.Outcome, last.Finished, last.ExitCode = RunCrashed, now.UTC(), nil
		run.Outcome = RunCrashed
		run.NotBefore = p.notBefore(last.Number, now)
		changed = true
	}
	if nb := run.NotBeforeUnder(p); !nb.Equal(run.NotBefore) {
		run.NotBefore, changed = nb, true
	}
	if run.Counted() >= maxAttempts {
		if run.Outcome != RunExhausted {
			run.Outcome, changed = RunExhausted, true
		}
		d := BeginDecision{Kind: BeginExhausted, Ledger: l, Changed: changed, Attempts: slices.Clone(run.Attempts)}
		if changed {
			d.Ledger = out
		}
		return d, nil
	}
	if run.NotBefore.After(now) {
		d := BeginDecision{Kind: BeginWait, Ledger: l, Changed: changed, NotBefore: run.NotBefore, Attempts: slices.Clone(run.Attempts)}
		if changed {
			d.Ledger = out
		}
		return d, nil
	}
	run.NotBefore = time.Time{}
	n := len(run.Attempts) + 1
	run.Attempts = append(run.Attempts, Attempt{
		Number: n, Node: h.Node, Session: h.Session, FencingToken: h.FencingToken,
		Started: now.UTC(), Outcome: RunRunning,
	})
	run.Outcome = RunRunning
	return BeginDecision{Kind: BeginRun, Attempt: n, Ledger: out, Changed: true}, nil
}

// ErrAttemptNotRunning: Finish was asked to record the outcome of an
// attempt that is not running (another holder marked it crashed, or it
// already has another outcome).
var ErrAttemptNotRunning = errors.New("the attempt is not running in the ledger")

// Finish records the outcome of attempt n of run id: succeeded, failed or
// lost, with the command's exit code (nil when it has none) and the time.
// The run takes the attempt's outcome. Recording the outcome the attempt
// already has, with the same exit code, changes nothing (a retried
// transaction); anything else on an attempt that is not running is
// ErrAttemptNotRunning.
func (l Ledger) Finish(id string, n int, outcome RunOutcome, exitCode *int, now time.Time) (Ledger, error) {
	return l.FinishWith(id, n, AttemptResult{Outcome: outcome, ExitCode: exitCode}, AttemptPolicy{}, now)
}

// FinishWithReason is Finish that also records, for a lost attempt, why
// the lock was lost (cut to MaxAttemptReason bytes). Another outcome
// keeps no reason: a command that exited by itself ended the attempt,
// whatever happened to the lock afterwards.
func (l Ledger) FinishWithReason(id string, n int, outcome RunOutcome, exitCode *int, reason string, now time.Time) (Ledger, error) {
	return l.FinishWith(id, n, AttemptResult{Outcome: outcome, ExitCode: exitCode, Reason: reason}, AttemptPolicy{}, now)
}

// FinishWith is Finish of result res (also "timed_out", the kept output
// and a lost attempt's reason) under policy p: a retried outcome of the
// latest attempt sets the run's NotBefore to now plus p's wait
// (jobcontrol.go) while attempts remain.
func (l Ledger) FinishWith(id string, n int, res AttemptResult, p AttemptPolicy, now time.Time) (Ledger, error) {
	outcome, exitCode, reason := res.Outcome, res.ExitCode, res.Reason
	if outcome != RunLost {
		reason = ""
	}
	switch outcome {
	case RunSucceeded, RunFailed, RunLost, RunTimedOut:
	default:
		return l, fmt.Errorf("ledger: an attempt finishes %q, %q, %q or %q, not %q", RunSucceeded, RunFailed, RunLost, RunTimedOut, outcome)
	}
	switch {
	case outcome == RunSucceeded && (exitCode == nil || *exitCode != 0):
		return l, errors.New("ledger: a succeeded attempt has exit code 0")
	case outcome == RunFailed && (exitCode == nil || *exitCode == 0):
		return l, errors.New("ledger: a failed attempt has a non-zero exit code")
	}
	i := l.Find(id)
	if i < 0 {
		return l, fmt.Errorf("run %q is not in the ledger of lock %q", id, l.Lock)
	}
	j := slices.IndexFunc(l.Runs[i].Attempts, func(a Attempt) bool { return a.Number == n })
	if j < 0 {
		return l, fmt.Errorf("run %q has no attempt %d in the ledger of lock %q", id, n, l.Lock)
	}
	a := l.Runs[i].Attempts[j]
	if a.Outcome != RunRunning {
		if a.Outcome == outcome && equalExitCodes(a.ExitCode, exitCode) {
			return l, nil
		}
		return l, fmt.Errorf("%w: run %q attempt %d is %q", ErrAttemptNotRunning, id, n, a.Outcome)
	}
	out := l.clone()
	run := &out.Runs[i]
	at := &run.Attempts[j]
	at.Outcome, at.Finished, at.Output, at.Stdout, at.Reason = outcome, now.UTC(), res.Output, res.Stdout, truncateReason(reason)
	if exitCode != nil {
		c := *exitCode
		at.ExitCode = &c
	}
	if j == len(run.Attempts)-1 {
		run.Outcome = outcome
		if outcome.Retried() {
			run.NotBefore = p.notBefore(n, now)
		}
	}
	return out, nil
}

// Release records that the holder session of the attempt running under
// session was ended by `consullock release`: outcome released, by, reason,
// at now. found is false when no attempt of that session is running (the
// lock is not a run-once lock's current attempt): then l is returned
// unchanged.
func (l Ledger) Release(session, by, reason string, now time.Time) (out Ledger, run string, attempt int, found bool) {
	for i, r := range l.Runs {
		for j, a := range r.Attempts {
			if a.Session != session || a.Outcome != RunRunning {
				continue
			}
			out = l.clone()
			at := &out.Runs[i].Attempts[j]
			at.Outcome, at.Finished, at.ReleasedBy, at.Reason = RunReleased, now.UTC(), by, truncateReason(reason)
			if j == len(r.Attempts)-1 {
				out.Runs[i].Outcome = RunReleased
			}
			return out, r.ID, a.Number, true
		}
	}
	return l, "", 0, false
}

// truncateReason cuts reason to MaxAttemptReason bytes, on a rune
// boundary.
func truncateReason(reason string) string {
	if len(reason) <= MaxAttemptReason {
		return reason
	}
	cut := MaxAttemptReason - len("...")
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut] + "..."
}

func equalExitCodes(a, b *int) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// Prune keeps the keep most recently begun runs, and run current (the one
// being written) wherever it is: the ledger stays bounded, and the holder
// that writes it never drops its own run. Of the runs it drops, those that
// are done (succeeded, exhausted) go first in Pruned, as their ID and
// outcome, so that Begin never runs them again; past MaxPrunedRuns the
// oldest are forgotten (Forgotten).
func (l Ledger) Prune(keep int, current string) Ledger {
	if keep < 1 {
		keep = 1
	}
	if len(l.Runs) <= keep {
		return l
	}
	out := Ledger{Lock: l.Lock, Runs: slices.Clone(l.Runs[:keep]), Forgotten: l.Forgotten}
	dropped := slices.Clone(l.Runs[keep:])
	if i := l.Find(current); i >= keep {
		// The run current replaces was begun after every other dropped.
		replaced := out.Runs[keep-1]
		out.Runs[keep-1] = l.Runs[i]
		dropped = slices.Delete(dropped, i-keep, i-keep+1)
		dropped = slices.Insert(dropped, 0, replaced)
	}
	for _, r := range dropped {
		_, succeeded := r.Succeeded()
		switch {
		case succeeded:
			out.Pruned = append(out.Pruned, PrunedRun{ID: r.ID, Outcome: RunSucceeded})
		case r.Outcome == RunExhausted:
			out.Pruned = append(out.Pruned, PrunedRun{ID: r.ID, Outcome: RunExhausted})
		}
	}
	out.Pruned = append(out.Pruned, l.Pruned...)
	if len(out.Pruned) > MaxPrunedRuns {
		for _, p := range out.Pruned[MaxPrunedRuns:] {
			out.Forgotten.Runs++
			if t, err := time.Parse(time.RFC3339Nano, p.ID); err == nil && t.After(out.Forgotten.Through) {
				out.Forgotten.Through = t.UTC()
			}
		}
		out.Pruned = slices.Clip(out.Pruned[:MaxPrunedRuns])
	}
	return out
}
