package lockmodel

import "time"

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
// holder's session lock-delay (the declared profile's when it cannot be
// read). The session ended no later than seenDead, so its holder's runner,
// which stops its command before TakeOverDelay has passed since the end
// (StopRule), is done by then. A holder that leaves the table itself has
// released cleanly and frees its slot at once; this rule is only for those
// that did not.
func SlotFreeAt(seenDead time.Time, lockDelay time.Duration) time.Time {
	return seenDead.Add(TakeOverDelay(lockDelay))
}
