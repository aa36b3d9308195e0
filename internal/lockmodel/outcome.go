package lockmodel

import "time"

// The outcome of a run-once attempt after its command exited: how long
// its runner keeps trying to record it (OutcomeDeadlines), and so the
// longest the runner stays after its command (OutcomeWait).
//
// The command has exited: nothing more runs under the lock, so the loss
// judge (which exists to stop the command in time) no longer bounds what
// the runner does. What bounds it is Consul's own arithmetic:
//
//  1. The fenced transaction (check-session, the ledger's check-and-set,
//     unlock) is safe whenever it commits, and while the session may still
//     hold the lock no other holder can read the attempt as crashed. It is
//     sent again until Consul answers that the session no longer holds the
//     key, or until SessionTTLMultiplier x TTL after the last confirmed
//     renewal (the server invalidates a session that long after its last
//     renewal, when no health check ends it sooner, unless a Raft election
//     restarted its timer: then step 2's check-and-set still records the
//     outcome, as the session's owner), and never past that long after the
//     command exited.
//  2. Then a next holder can acquire only after the lock-delay that follows
//     the session's end, and it records the attempt crashed only once it
//     has acquired: within that lock-delay the outcome is written with a
//     check-and-set of the ledger, and only while the attempt still reads
//     "running". At least MinAfterLossWindow, so that a lock-delay of 0
//     still gets a try.
//
// An outcome neither step recorded is reported (ExitOutcomeNotRecorded in
// the runner): the next holder records the attempt crashed and may run the
// command again.

// MinAfterLossWindow is the shortest window of step 2.
const MinAfterLossWindow = 10 * time.Second

// OutcomeDeadlines are the deadlines of recording an outcome: Fenced is
// when step 1 ends (2 x TTL after the last renewal), AfterLoss when step 2
// ends.
type OutcomeDeadlines struct {
	Fenced    time.Time
	LockDelay time.Duration
}

// NewOutcomeDeadlines computes the deadlines for a session of ttl and
// lockDelay (clamped as Consul clamps it).
func NewOutcomeDeadlines(ttl, lockDelay time.Duration, lastContact, exited time.Time) OutcomeDeadlines {
	gone := lastContact.Add(SessionTTLMultiplier * ttl)
	if latest := exited.Add(SessionTTLMultiplier * ttl); gone.After(latest) {
		gone = latest
	}
	return OutcomeDeadlines{Fenced: gone, LockDelay: TakeOverDelay(lockDelay)}
}

// AfterLoss is when step 2, begun at from (Consul answered that the
// session no longer holds the key, or Fenced passed), ends.
func (d OutcomeDeadlines) AfterLoss(from time.Time) time.Time {
	return from.Add(max(d.LockDelay, MinAfterLossWindow))
}

// OutcomeWait is the longest a runner's two steps take after its command
// exited, for a session of ttl and lockDelay: every request of a step is
// bounded by the step's deadline, so 2 x TTL, then the lock-delay (at least
// MinAfterLossWindow).
func OutcomeWait(ttl, lockDelay time.Duration) time.Duration {
	return SessionTTLMultiplier*ttl + max(TakeOverDelay(lockDelay), MinAfterLossWindow)
}
