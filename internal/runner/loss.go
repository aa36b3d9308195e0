package runner

import (
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// obsKind is what one request to Consul told the runner about its hold.
type obsKind int

const (
	// obsRenewed: PUT /v1/session/renew answered 200. The server restarted
	// the session's TTL clock, so this is contact with the cluster.
	obsRenewed obsKind = iota + 1
	// obsRenewFailed: the renewal got no answer or an error other than 404
	// (connection refused, "No cluster leader", 403, timeout).
	obsRenewFailed
	// obsSessionGone: the renewal answered 404: the session no longer
	// exists, so every key it held is released or deleted.
	obsSessionGone
	// obsKeyHeld: a consistent read shows the session still holds the lock.
	obsKeyHeld
	// obsKeyLost: a consistent read shows the session no longer holds the
	// lock (key released, deleted, or held by another session).
	obsKeyLost
	// obsReadFailed: a consistent read of the key failed (no leader,
	// connection trouble, ...).
	obsReadFailed
)

func (k obsKind) String() string {
	switch k {
	case obsRenewed:
		return "renewed"
	case obsRenewFailed:
		return "renew failed"
	case obsSessionGone:
		return "session gone"
	case obsKeyHeld:
		return "key held"
	case obsKeyLost:
		return "key lost"
	case obsReadFailed:
		return "read failed"
	}
	return "unknown"
}

// observation is one result of the renewer or the watcher.
type observation struct {
	// session is the session the request was about; the loop ignores
	// observations about a session it has replaced.
	session string
	kind    obsKind
	// at is when the request was sent. For a renewal that is a lower bound
	// of when the server restarted the TTL clock, which keeps the
	// contact-deadline conservative.
	at time.Time
	// detail says what was seen, for the loss message and the log.
	detail string
}

// verdict is the judge's decision.
type verdict struct {
	lost   bool
	reason string
}

// lossJudge decides from observations whether the lock is lost. It is pure:
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
type lossJudge struct {
	rule        lockmodel.StopRule
	lastContact time.Time
	decided     verdict
}

// newLossJudge starts judging a session created (or last renewed) at
// contact under rule.
func newLossJudge(rule lockmodel.StopRule, contact time.Time) *lossJudge {
	return &lossJudge{rule: rule, lastContact: contact}
}

// observe records o and returns the verdict so far. Once lost, always lost.
func (j *lossJudge) observe(o observation) verdict {
	if j.decided.lost {
		return j.decided
	}
	switch o.kind {
	case obsRenewed:
		if o.at.After(j.lastContact) {
			j.lastContact = o.at
		}
	case obsSessionGone:
		j.decided = verdict{lost: true, reason: "the session no longer exists (renewal answered 404): " +
			"it was destroyed or invalidated, and Consul released the lock" + suffix(o.detail)}
	case obsKeyLost:
		j.decided = verdict{lost: true, reason: "the lock key is no longer held by this session" + suffix(o.detail)}
	}
	return j.decided
}

// check returns the verdict at now: lost when the last successful renewal
// is more than LossAfter ago.
func (j *lossJudge) check(now time.Time) verdict {
	if j.decided.lost {
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
	j.decided = verdict{lost: true, reason: fmt.Sprintf("no successful session renewal for %s, %s", since.Round(time.Millisecond), why)}
	return j.decided
}

// deadline is when check turns to lost if no renewal succeeds before.
func (j *lossJudge) deadline() time.Time {
	return j.lastContact.Add(j.rule.LossAfter())
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return " (" + detail + ")"
}
