package lockproto

import (
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// ObsKind is what one request to Consul told the runner about its hold.
type ObsKind int

const (
	// ObsRenewed: PUT /v1/session/renew answered 200. The server restarted
	// the session's TTL clock, so this is contact with the cluster.
	ObsRenewed ObsKind = iota + 1
	// ObsRenewFailed: the renewal got no answer or an error other than 404
	// (connection refused, "No cluster leader", 403, timeout).
	ObsRenewFailed
	// ObsSessionGone: the renewal answered 404: the session no longer
	// exists, so every key it held is released or deleted.
	ObsSessionGone
	// ObsKeyHeld: a consistent read shows the session still holds the lock.
	ObsKeyHeld
	// ObsKeyLost: a consistent read shows the session no longer holds the
	// lock (key released, deleted, or held by another session).
	ObsKeyLost
	// ObsReadFailed: a consistent read of the key failed (no leader,
	// connection trouble, ...).
	ObsReadFailed
)

func (k ObsKind) String() string {
	switch k {
	case ObsRenewed:
		return "renewed"
	case ObsRenewFailed:
		return "renew failed"
	case ObsSessionGone:
		return "session gone"
	case ObsKeyHeld:
		return "key held"
	case ObsKeyLost:
		return "key lost"
	case ObsReadFailed:
		return "read failed"
	}
	return "unknown"
}

// Observation is one result of the renewer or the watcher.
type Observation struct {
	// Session is the session the request was about; a holder ignores
	// observations about a session it has replaced.
	Session string
	Kind    ObsKind
	// At is when the request was sent. For a renewal that is a lower bound
	// of when the server restarted the TTL clock, which keeps the
	// contact-deadline conservative.
	At time.Time
	// Detail says what was seen, for the loss message and the log.
	Detail string
	// Cause is, for a renewal Consul refused, what the refusal means for
	// the hold ("the token lost session:write on web-1"); it leads the
	// loss reason when no renewal succeeds after it.
	Cause string
}

// Verdict is the judge's decision.
type Verdict struct {
	Lost   bool
	Reason string
}

// LossJudge decides from observations whether the lock is lost. It is pure:
// no clock, no I/O; the caller passes the time.
//
// The rules:
//   - the key no longer held by our session is loss, at once;
//   - a renewal answered 404 (session gone) is loss, at once;
//   - a failed request is not loss by itself: one "No cluster leader" or a
//     refused connection during an agent restart is ridden out (Consul
//     issue 1162);
//   - but no successful renewal for longer than the stop rule's LossAfter
//     is loss (lockmodel.StopRule): a holder cut off from the cluster must
//     have killed its command before another can take over, which with
//     health checks is lock_delay after the last renewal (the servers may
//     invalidate the session as soon as the node is declared failed), and
//     without them 2 x TTL + lock_delay; and never later than a TTL
//     (Consul issue 18271).
//
// A successful read does not count as contact: only a renewal restarts the
// server's TTL clock and shows the session alive. Contact is the renewal's
// send time, a lower bound of when the server saw it.
type LossJudge struct {
	rule        lockmodel.StopRule
	lastContact time.Time
	// cause is the Cause of the latest refused renewal since lastContact.
	cause   string
	decided Verdict
}

// NewLossJudge starts judging a session created (or last renewed) at
// contact under rule.
func NewLossJudge(rule lockmodel.StopRule, contact time.Time) *LossJudge {
	return &LossJudge{rule: rule, lastContact: contact}
}

// Observe records o and returns the Verdict so far. Once lost, always lost.
func (j *LossJudge) Observe(o Observation) Verdict {
	if j.decided.Lost {
		return j.decided
	}
	switch o.Kind {
	case ObsRenewed:
		if o.At.After(j.lastContact) {
			j.lastContact, j.cause = o.At, ""
		}
	case ObsRenewFailed:
		if o.Cause != "" && o.At.After(j.lastContact) {
			j.cause = o.Cause
		}
	case ObsSessionGone:
		j.decided = Verdict{Lost: true, Reason: "the session no longer exists (renewal answered 404): " +
			"it was destroyed or invalidated, and Consul released the lock" + suffix(o.Detail)}
	case ObsKeyLost:
		j.decided = Verdict{Lost: true, Reason: "the lock key is no longer held by this session" + suffix(o.Detail)}
	}
	return j.decided
}

// Check returns the Verdict at now: lost when the last successful renewal
// is more than LossAfter ago.
func (j *LossJudge) Check(now time.Time) Verdict {
	if j.decided.Lost {
		return j.decided
	}
	since := now.Sub(j.lastContact)
	if since <= j.rule.LossAfter() {
		return j.decided
	}
	r := j.rule
	why := fmt.Sprintf("longer than the session TTL %s: the cluster may be unreachable and will invalidate the session after about %s without renewal",
		lockmodel.FormatDuration(r.TTL), lockmodel.FormatDuration(lockmodel.SessionTTLMultiplier*r.TTL))
	if r.LossAfter() < r.TTL {
		why = fmt.Sprintf("%s, the longest this runner may go without contact: Consul may already have ended the session "+
			"and another holder may acquire from %s after the last renewal on (the command must be dead by then, %s grace included)",
			lockmodel.FormatDuration(r.LossAfter()), lockmodel.FormatDuration(r.TakeOverAfter()), lockmodel.FormatDuration(r.Grace))
	}
	reason := fmt.Sprintf("no successful session renewal for %s, %s", since.Round(time.Millisecond), why)
	if j.cause != "" {
		reason = j.cause + ": " + reason
	}
	j.decided = Verdict{Lost: true, Reason: reason}
	return j.decided
}

// Deadline is when Check turns to lost if no renewal succeeds before.
func (j *LossJudge) Deadline() time.Time {
	return j.lastContact.Add(j.rule.LossAfter())
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return " (" + detail + ")"
}

// LastContact is the send time of the latest renewal Consul answered (or
// the contact the judge started from).
func (j *LossJudge) LastContact() time.Time { return j.lastContact }

// LostError is an acquisition's error when the loss judge finds the lock
// lost the moment it was acquired (no renewal for too long while
// waiting). Its text is the judge's reason.
type LostError struct{ Reason string }

func (e *LostError) Error() string { return e.Reason }

// SessionGone is the error of an acquisition whose session ended while it
// waited (a renewal answered 404): it wraps ErrSessionInvalid, with what
// the renewer saw.
func SessionGone(detail string) error {
	if detail == "" {
		return ErrSessionInvalid
	}
	return &sessionGoneError{detail: detail}
}

type sessionGoneError struct{ detail string }

func (e *sessionGoneError) Error() string { return ErrSessionInvalid.Error() + " (" + e.detail + ")" }
func (e *sessionGoneError) Unwrap() error { return ErrSessionInvalid }
