package lockmodel

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
)

// TakeOverDelay is the least time between the end of a holder's session and
// another holder's start: the session's lock-delay, clamped to MaxLockDelay
// as the server does. StopRule counts on it; for a mutex Consul enforces it
// on the lock key, for a semaphore slot nothing in Consul does (a slot is an
// entry in the holder table, written by check-and-set, and lock-delay
// applies only to the dead session's own contender key), so a waiter must
// apply it itself: SlotFreeAt.
func TakeOverDelay(lockDelay time.Duration) time.Duration {
	return min(max(lockDelay, 0), MaxLockDelay)
}

// SlotFreeAt is when a semaphore waiter may prune a holder that is still
// listed in the holder table but whose session holds no key under the
// prefix (it ended: invalidated, expired or destroyed), and take its slot.
// seenDead is when this waiter first saw it so, and lockDelay is the dead
// holder's own lock-delay (DeadHolderLockDelay). The session ended no later
// than seenDead, so its holder's runner, which stops its command before
// TakeOverDelay has passed since the end (StopRule, with the holder's own
// profile), is done by then. A holder that leaves the table itself has
// released cleanly and frees its slot at once; this rule is only for those
// that did not.
func SlotFreeAt(seenDead time.Time, lockDelay time.Duration) time.Time {
	return seenDead.Add(TakeOverDelay(lockDelay))
}

// DeadHolderLockDelay is the lock-delay a semaphore waiter counts for a
// holder whose session ended (SlotFreeAt's lockDelay). known is what the
// waiter learnt of that holder's own lock-delay: the one the holder wrote
// into its contender key at admission (HolderLockDelay, readable with the
// key read a worker token has on the prefix), and its session's, read
// while the session lived (which needs session read on the holder's node).
// It is the largest of them, and MaxLockDelay when the waiter learnt
// nothing.
//
// Never the waiter's own declared lock-delay: the holder stopped by its
// own profile, which may be older than the waiter's (lock_delay lowered
// while older holders finish), and a waiter that assumed its own shorter
// delay would take the slot while the holder's command may still run:
// limit + 1 holders.
func DeadHolderLockDelay(known ...time.Duration) time.Duration {
	if len(known) == 0 {
		return MaxLockDelay
	}
	return TakeOverDelay(slices.Max(known))
}

// WithLockDelay writes lockDelay into a holder value (HolderValue's
// lock_delay) for a semaphore holder, so that waiters who cannot read its
// session still learn how long it needs to stop once its session ends.
// A value that is not a HolderValue (a user's own value) is returned
// unchanged: waiters then assume MaxLockDelay for it, unless they read the
// session while it lived.
func WithLockDelay(value []byte, lockDelay time.Duration) []byte {
	hv, ok := decodeHolderValue(value)
	if !ok {
		return value
	}
	hv.LockDelay = FormatDuration(TakeOverDelay(lockDelay))
	out, err := json.Marshal(hv)
	if err != nil {
		return value
	}
	return out
}

// HolderLockDelay reads the lock_delay a holder wrote into its
// value (WithLockDelay); false when value is not a HolderValue or carries
// none.
func HolderLockDelay(value []byte) (time.Duration, bool) {
	hv, ok := decodeHolderValue(value)
	if !ok || hv.LockDelay == "" {
		return 0, false
	}
	d, err := time.ParseDuration(hv.LockDelay)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// decodeHolderValue decodes value as a HolderValue and nothing else: a JSON
// object with only HolderValue's fields, so that re-encoding it loses
// nothing.
func decodeHolderValue(value []byte) (HolderValue, bool) {
	var hv HolderValue
	if len(value) == 0 || value[0] != '{' {
		return hv, false
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if dec.Decode(&hv) != nil || dec.More() {
		return hv, false
	}
	return hv, true
}
