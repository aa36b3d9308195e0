package runner

import (
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// A run's outcome is decided once, by decideOutcome, from what reached the
// command before it exited. The events arrive at the supervisor in any
// order: the command's exit (the guard's report), the guard's expiry of
// its kill-by, the loss judge's verdict, max_runtime, and the answer of
// the release that records the outcome. What counts is their order at the
// command, which the guard's reports keep (guard.go): a stop reached the
// command only if the guard delivered it, or its kill-by expired, before
// it reported the command's exit. So:
//
//   - a command that exited by itself is recorded with its own exit code,
//     whatever the guard or the loss judge reports after its exit (a
//     runner stopped or starved while its command finished, then waking
//     to a verdict of its stop rule);
//   - lost only when a stop for the loss of the lock, or the guard's
//     expiry, reached the command before it exited;
//   - timed_out only when the max_runtime stop reached it first;
//   - failed with the runner's own code when the command never started,
//     lost if it never started because the lock was lost after the
//     attempt was recorded.
//
// The release's answer does not change the outcome: a release that
// commits proves the session still held the lock, and one that does not
// (the outcome is then recorded after the loss, runonce.go) cannot tell
// when the lock was lost; the stop rule (lockmodel.StopRule) has the
// command stopped before any other holder can start, so a command that
// exited by itself did so alone. An outcome that cannot be recorded makes
// the exit code ExitOutcomeNotRecorded (cleanup).

// stopCause is why a stop was sent to the command.
type stopCause int

const (
	stopNone     stopCause = iota // no stop reached the command: it exited by itself
	stopLoss                      // the lock was lost (the loss judge, or a release by an operator)
	stopExpiry                    // the guard's kill-by passed (the runner confirmed no renewal in time)
	stopDeadline                  // max_runtime passed
	stopCancel                    // the runner's context ended (a signal to the runner is forwarded, not a stop)
)

// commandReports is what the guard reported of the command, in the order
// it reported it (child.see reads each report into it).
type commandReports struct {
	exited bool // the command's exit was reported
	// expiredFirst: the kill-by expired before the command's exit.
	expiredFirst bool
	// delivered is the highest sequence number of the runner's signals
	// delivered to the command before its exit (0: none).
	delivered int64
}

// see reads one report of the guard (a message kind and its number).
func (r *commandReports) see(kind string, n int64) {
	switch kind {
	case msgExited, msgFinished:
		r.exited = true
	case msgExpired:
		if !r.exited {
			r.expiredFirst = true
		}
	case msgDelivered:
		if !r.exited {
			r.delivered = max(r.delivered, n)
		}
	}
}

// stopSent is a stop the runner sent: its cause and the sequence number of
// its first signal (child.signal numbers them from 1).
type stopSent struct {
	cause stopCause
	seq   int64
}

// stopBeforeExit is the stop that reached the command before it exited,
// stopNone if none did. sent are the stops the runner sent, first first;
// guarded tells whether delivery is known (without a guard a signal sent
// before the exit was seen counts as delivered).
func stopBeforeExit(r commandReports, sent []stopSent, guarded bool) stopCause {
	if r.expiredFirst {
		return stopExpiry
	}
	for _, s := range sent {
		if !guarded || (s.seq > 0 && s.seq <= r.delivered) {
			return s.cause
		}
	}
	return stopNone
}

// decideOutcome is the attempt's outcome and the exit code recorded with
// it: started tells whether the command ran, own is its own exit code
// when it exited (nil if it did not), stop what reached it before it
// exited, runnerCode the runner's exit code when the command never ran.
func decideOutcome(started bool, own *int, stop stopCause, runnerCode int) (ledger.RunOutcome, *int) {
	switch {
	case !started && stop == stopLoss:
		return ledger.RunLost, nil
	case !started:
		return ledger.RunFailed, &runnerCode
	case stop == stopDeadline:
		return ledger.RunTimedOut, own
	case stop == stopLoss || stop == stopExpiry:
		return ledger.RunLost, nil
	case own != nil && *own == 0:
		return ledger.RunSucceeded, own
	case own != nil:
		return ledger.RunFailed, own
	}
	return ledger.RunLost, nil // started, never exited: the runner stopped waiting for it after a loss
}
