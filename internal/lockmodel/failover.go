package lockmodel

import (
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
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

// NewStopRule is the rule for profile p and the runner's grace, with the
// runner's renewal timeout and StopMargin.
func NewStopRule(p Profile, grace time.Duration) StopRule {
	return StopRule{
		TTL: p.TTL, LockDelay: p.LockDelay, HealthChecks: len(p.NodeChecks)+len(p.ServiceChecks) > 0,
		RenewEvery: p.RenewEvery, RenewTimeout: RenewTimeout(p.RenewEvery), Grace: grace, Margin: StopMargin,
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

// GuardKillAfter is when, after the last confirmed contact, the command's
// guard kills its process tree itself: half the margin after DeadBy. The
// guard acts only when the runner did not (the runner was frozen or
// starved: it cannot count its own deadline), and still Margin/2 before
// the earliest take-over when the rule is feasible.
func (r StopRule) GuardKillAfter() time.Duration {
	return r.DeadBy() + r.Margin/2
}

// Verdict says in one line, with the numbers, why the rule is not
// feasible; "" when it is. Fix says what to change.
func (r StopRule) Verdict() string {
	if r.Feasible() {
		return ""
	}
	renew := fmt.Sprintf("renew_every %s + renewal timeout %s", FormatDuration(r.RenewEvery), FormatDuration(r.RenewTimeout))
	if r.MinLossAfter() >= r.TTL {
		return fmt.Sprintf("A holder must stop a ttl %s after its last renewal, but a renewal alone may take %s = %s.",
			FormatDuration(r.TTL), renew, FormatDuration(r.MinLossAfter()))
	}
	need := r.MinLossAfter() + r.Grace + r.Margin
	takeOver := fmt.Sprintf("2 x ttl + lock_delay = %s", FormatDuration(r.TakeOverAfter()))
	if r.HealthChecks {
		takeOver = fmt.Sprintf("lock_delay %s", FormatDuration(r.LockDelay))
		if r.LockDelay > MaxLockDelay {
			takeOver = fmt.Sprintf("lock_delay %s (Consul's cap)", FormatDuration(MaxLockDelay))
		}
		takeOver += " (health checks)"
	}
	return fmt.Sprintf("Another holder may take over %s after a cut-off holder's last renewal, but stopping it takes %s + -grace %s + margin %s = %s.",
		takeOver, renew, FormatDuration(r.Grace), FormatDuration(r.Margin), FormatDuration(need))
}

// Fix says in one line which attribute to set to what for the rule to be
// feasible (with the same grace); "" when it is feasible.
func (r StopRule) Fix() string {
	if r.Feasible() {
		return ""
	}
	attr, value, ok := r.fix()
	switch {
	case !ok:
		return fmt.Sprintf("Set lock_delay = %q and lower renew_every, or give the runner a shorter -grace.", FormatDuration(MaxLockDelay))
	case attr == "lock_delay":
		return fmt.Sprintf("Set lock_delay = %q or longer.", FormatDuration(value))
	default:
		return fmt.Sprintf("Set renew_every = %q or shorter.", FormatDuration(value))
	}
}

// fix is the smallest change of one attribute that makes the rule
// feasible: lock_delay raised to a whole number of seconds (at most
// MaxLockDelay), else renew_every lowered to a whole number of seconds
// (or 500, 200, 100 ms). ok is false when neither alone does.
func (r StopRule) fix() (attr string, value time.Duration, ok bool) {
	for l := r.LockDelay.Truncate(time.Second) + time.Second; l <= MaxLockDelay; l += time.Second {
		if r.with("lock_delay", l).Feasible() {
			return "lock_delay", l, true
		}
	}
	var candidates []time.Duration
	for e := (r.RenewEvery - 1).Truncate(time.Second); e >= time.Second; e -= time.Second {
		candidates = append(candidates, e)
	}
	for _, e := range append(candidates, 500*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond) {
		if e < r.RenewEvery && r.with("renew_every", e).Feasible() {
			return "renew_every", e, true
		}
	}
	return "", 0, false
}

// with is r with lock_delay or renew_every (and its renewal timeout)
// set to v.
func (r StopRule) with(attr string, v time.Duration) StopRule {
	switch attr {
	case "lock_delay":
		r.LockDelay = v
	case "renew_every":
		r.RenewEvery, r.RenewTimeout = v, RenewTimeout(v)
	}
	return r
}

// StopWarning is the plan warning for profile p when `consullock run` with
// its default -grace cannot stop a holder cut off from Consul before
// another may take over; nil when it can. Its detail is two lines: the
// verdict and the fix.
func (p Profile) StopWarning() *validation.Warning {
	r := NewStopRule(p, DefaultRunnerGrace)
	if r.Feasible() {
		return nil
	}
	field, _, ok := r.fix()
	if !ok {
		field = "lock_delay"
	}
	return &validation.Warning{
		Field:   field,
		Summary: "Holders Cut Off From Consul Cannot Stop In Time",
		Detail:  r.Verdict() + "\n" + r.Fix(),
	}
}
