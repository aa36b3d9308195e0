package lockmodel

import (
	"fmt"
	"time"
)

// When must a holder cut off from Consul stop its command? The rule lives
// here, once, for the runner (which applies it) and the provider (which
// warns at plan when a profile cannot satisfy it).
//
// Times count from the holder's last confirmed contact: the send time of
// its last renewal that Consul answered with 200 (a lower bound of when the
// server restarted the session's TTL clock and saw the session alive).
//
//   - With health checks (node_checks, by default serfHealth, or
//     service_checks) the servers invalidate the session as soon as a check
//     fails, which for a frozen or cut-off node can be any moment after the
//     last contact. Another holder may then acquire after the lock-delay:
//     take-over is possible from lock_delay on. (For a semaphore slot the
//     waiter applies the lock-delay itself: SlotFreeAt.)
//   - Without checks only the TTL ends the session: the servers invalidate it
//     after SessionTTLMultiplier x TTL without renewal, then the lock-delay
//     runs: take-over from 2 x ttl + lock_delay on.
//
// The runner decides the lock is lost at LossAfter (SIGTERM), kills at
// LossAfter + grace (SIGKILL), and keeps Margin before the take-over for
// the kill to land. It also never holds past a TTL without renewal.

// Runner defaults that the plan warning assumes (the runner's flags).
const (
	// DefaultRunnerGrace is `consullock run -grace`'s default: the time
	// between SIGTERM and SIGKILL.
	DefaultRunnerGrace = 5 * time.Second
	// StopMargin is kept between the runner's SIGKILL and the earliest
	// take-over: time for the kill to land and for the runner to be
	// scheduled on a loaded host.
	StopMargin = time.Second
	// MaxRenewTimeout bounds one renewal request: one that has not
	// answered by then counts as failed, so a hung agent (a request that
	// never answers) is noticed like a refused one.
	MaxRenewTimeout = 2 * time.Second
)

// RenewTimeout is how long one renewal request may take: MaxRenewTimeout,
// or the renewal interval when that is shorter.
func RenewTimeout(renewEvery time.Duration) time.Duration {
	return min(renewEvery, MaxRenewTimeout)
}

// StopRule holds the numbers that decide when a holder must stop.
type StopRule struct {
	TTL       time.Duration
	LockDelay time.Duration // as declared; clamped to MaxLockDelay here
	// HealthChecks: the session is bound to node or service checks.
	HealthChecks bool
	RenewEvery   time.Duration
	RenewTimeout time.Duration
	Grace        time.Duration
	Margin       time.Duration
}

// NewStopRule is the rule for profile p (defaults applied here) and the
// runner's grace, with the runner's renewal timeout and StopMargin.
func NewStopRule(p SessionProfile, grace time.Duration) StopRule {
	d := p.WithDefaults()
	return StopRule{
		TTL: d.TTL, LockDelay: d.LockDelay, HealthChecks: len(d.NodeChecks)+len(d.ServiceChecks) > 0,
		RenewEvery: d.RenewEvery, RenewTimeout: RenewTimeout(d.RenewEvery), Grace: grace, Margin: StopMargin,
	}
}

// TakeOverAfter is the earliest time after the last confirmed contact at
// which another holder may acquire the lock.
func (r StopRule) TakeOverAfter() time.Duration {
	delay := TakeOverDelay(r.LockDelay)
	if r.HealthChecks {
		return delay
	}
	return SessionTTLMultiplier*r.TTL + delay
}

// safeLossAfter is when loss must be decided for the command to be dead
// Margin before the take-over, and never later than a TTL without renewal.
// It may be zero or negative: then no holder can be safe.
func (r StopRule) safeLossAfter() time.Duration {
	return min(r.TTL, r.TakeOverAfter()-r.Margin-r.Grace)
}

// MinLossAfter is the shortest loss decision a healthy holder survives: a
// renewal is sent every RenewEvery and may take RenewTimeout to answer, so
// the last confirmed contact can be that old while all is well.
func (r StopRule) MinLossAfter() time.Duration {
	return r.RenewEvery + r.RenewTimeout
}

// Feasible reports whether a holder can both keep the lock while Consul
// answers and stop its command before any take-over when it does not:
// RenewEvery + RenewTimeout + Grace + Margin < take-over (with health
// checks: < lock_delay; so lock_delay 0 never is), and RenewEvery +
// RenewTimeout < TTL.
func (r StopRule) Feasible() bool {
	return r.MinLossAfter() < r.safeLossAfter()
}

// LossAfter is how long after the last confirmed contact the runner
// decides the lock is lost and sends SIGTERM. When the rule is not
// feasible it is MinLossAfter: the holder stays usable, and the warning
// (Problem) says that a take-over can come before the command is dead.
func (r StopRule) LossAfter() time.Duration {
	return max(r.safeLossAfter(), r.MinLossAfter())
}

// DeadBy is when, after the last confirmed contact, the command has been
// killed at the latest: LossAfter + Grace.
func (r StopRule) DeadBy() time.Duration {
	return r.LossAfter() + r.Grace
}

// Problem explains, with the numbers, why the rule is not feasible; "" when
// it is. graceSource names where the grace comes from, e.g. "-grace" or
// "the runner's default -grace".
func (r StopRule) Problem(graceSource string) string {
	if r.Feasible() {
		return ""
	}
	need := r.RenewEvery + r.RenewTimeout + r.Grace + r.Margin
	if r.HealthChecks {
		return fmt.Sprintf("a holder cut off from Consul cannot be stopped in time: with health checks Consul may end "+
			"the session the moment the node fails, and another holder may acquire lock_delay %s after the last renewal "+
			"(lock_delay is clamped to %s), but the runner needs renew_every %s + renewal timeout %s + %s %s + margin %s = %s "+
			"to renew, notice and kill. Raise lock_delay above %s, or lower renew_every or the grace",
			FormatDuration(r.LockDelay), FormatDuration(MaxLockDelay), FormatDuration(r.RenewEvery), FormatDuration(r.RenewTimeout),
			graceSource, FormatDuration(r.Grace), FormatDuration(r.Margin), FormatDuration(need), FormatDuration(need))
	}
	return fmt.Sprintf("a holder cut off from Consul cannot be stopped in time: without health checks another holder may "+
		"acquire 2 x ttl + lock_delay = %s after the last renewal, and the runner stops a holder at the latest a ttl (%s) "+
		"without renewal, but it needs renew_every %s + renewal timeout %s to renew, and %s %s + margin %s more to kill. "+
		"Raise ttl or lock_delay, or lower renew_every or the grace",
		FormatDuration(r.TakeOverAfter()), FormatDuration(r.TTL), FormatDuration(r.RenewEvery), FormatDuration(r.RenewTimeout),
		graceSource, FormatDuration(r.Grace), FormatDuration(r.Margin))
}

// StopWarning is the plan warning for profile p when `consullock run` with
// its default -grace cannot stop a holder cut off from Consul before
// another may take over; nil when it can.
func (p SessionProfile) StopWarning() *Warning {
	r := NewStopRule(p, DefaultRunnerGrace)
	problem := r.Problem("the runner's default -grace")
	if problem == "" {
		return nil
	}
	return &Warning{
		Field:   "lock_delay",
		Summary: "Holders Cut Off From Consul Cannot Stop In Time",
		Detail: fmt.Sprintf("With ttl %s, lock_delay %s, renew_every %s and %s, %s (assuming `consullock run` with its "+
			"default -grace %s; a shorter -grace helps). The runner will stop its command %s after its last renewal, "+
			"SIGKILL at %s, while another holder may start at %s.",
			FormatDuration(r.TTL), FormatDuration(r.LockDelay), FormatDuration(r.RenewEvery), checksText(r.HealthChecks), problem,
			FormatDuration(DefaultRunnerGrace), FormatDuration(r.LossAfter()), FormatDuration(r.DeadBy()), FormatDuration(r.TakeOverAfter())),
	}
}

func checksText(health bool) string {
	if health {
		return "health checks (node_checks/service_checks)"
	}
	return "no health checks"
}
