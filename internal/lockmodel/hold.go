package lockmodel

import (
	"encoding/json"
	"time"
)

// HoldEvidence is what an observer (the controller, status) has itself seen
// of one hold, on its own clock.
type HoldEvidence struct {
	// FirstSeen is when the observer first saw the hold; zero when it has
	// no observation of its own (status reading once).
	FirstSeen time.Time
	// NotBefore is when the observer last saw the lock without this hold
	// (unheld, held by another session, or by an earlier acquisition of
	// the same session); zero when it never did, because the hold already
	// existed when it first looked (a controller that just started or took
	// over, status).
	NotBefore time.Time
}

// HoldStart is the one rule for when a hold began, which the controller
// (max_hold, consullock_lock_holder_held_seconds) and status (held for)
// share. value is the holder's value (a mutex key's value, a semaphore
// holder's contender key value); ok is false when the start is unknown.
//
// The hold began at the "started" time the holder wrote into its value
// (HolderValue: consullock run and the ephemeral lock write it at each
// acquisition), clamped to what the observer saw itself:
//
//   - not after FirstSeen (or now, without one): the observer saw the hold
//     then, so it began no later; a holder clock ahead of ours is not
//     believed beyond that;
//   - not before NotBefore: the observer saw the lock without this hold
//     then, so it began later; a holder clock behind ours is not believed
//     beyond that.
//
// A value without "started" (`consul lock`'s own, api.Lock's) gives
// FirstSeen: the observer times the hold from when it first saw it (ok is
// false when it has no FirstSeen either).
//
// Why the holder's clock at all: timing only from FirstSeen restarts every
// count when a controller restarts or leadership moves to another replica,
// so a holder could escape max_hold forever. The price is clock skew: when
// the observer did not see the hold begin (no NotBefore), a holder whose
// clock is k behind the observer's is judged k older than it is, and in
// enforce mode its session may be ended k early. The error never exceeds
// the skew: the judged age is at most the true age plus k (and, with
// NotBefore, at most the true age). Keep clocks in sync (NTP) and max_hold
// well above any skew.
func HoldStart(value []byte, seen HoldEvidence, now time.Time) (start time.Time, ok bool) {
	started, claimed := holderStarted(value)
	if !claimed {
		return seen.FirstSeen, !seen.FirstSeen.IsZero()
	}
	upper := now
	if !seen.FirstSeen.IsZero() && seen.FirstSeen.Before(upper) {
		upper = seen.FirstSeen
	}
	if started.After(upper) {
		started = upper
	}
	if !seen.NotBefore.IsZero() && started.Before(seen.NotBefore) {
		started = seen.NotBefore
	}
	return started, true
}

// holderStarted reads the "started" of a HolderValue; false when value is
// not one or carries no start.
func holderStarted(value []byte) (time.Time, bool) {
	if len(value) == 0 || value[0] != '{' {
		return time.Time{}, false
	}
	var hv HolderValue
	if json.Unmarshal(value, &hv) != nil || hv.Started.IsZero() {
		return time.Time{}, false
	}
	return hv.Started, true
}
