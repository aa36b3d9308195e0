// Package lockmodel is the pure domain of consullock: lock and session
// declarations, their validation, the failover arithmetic, the key and flag
// conventions shared with Consul's api.Lock and api.Semaphore, who holds a
// lock, and where the registry keeps its records (RegistryKey, the Kind
// folders). The run-once rules are in package ledger, the holder-service
// rules in holdersvc (NewHolderCheck gives its check a profile's numbers),
// ACL rules in aclrules, field errors in validation, and the
// versioned registry record codec (the declarations', the run ledger's and
// pauses' records) in package record, which imports this one.
//
// It imports nothing from Consul or Terraform so that the provider, the
// controller and the runner apply exactly the same rules.
//
// # A session profile, declared and resolved
//
// SessionProfile is a profile as declared: what the provider's schema maps,
// with unset fields at their zero values; Validate and Warnings judge it.
// Profile is the same profile with its defaults applied (SessionProfile.Resolve),
// and it is what everything that needs the defaults takes: creating a session
// (lockproto.CreateSession, libhold.Acquire), the stop rule (NewStopRule,
// StopWarning), the worst-case gap, the holder check (NewHolderCheck) and the
// compliance check (Violations). The decoders resolve once, where a
// declaration is read (record.DecodeSessionProfileRecord, and so
// lockproto.ReadDeclaration); programs that build a profile themselves (the
// runner's -key flags, the library's explicit TTL, the ephemeral lock's
// inline settings, the controller's leader session) validate it and resolve
// it once.
//
// # Who holds a lock
//
// Holders is the one rule for who holds a lock, which the data source
// (consul.ReadLock), status, the controller (judging, max_hold,
// consullock_lock_holder_info) and the protocol (lockproto, a holder
// watching for loss) share. The holders come sorted by session ID.
//
// A mutex is held by the session its key names.
//
// A semaphore slot is held, as api.Semaphore's monitor judges it, by a
// session that both
//
//   - is listed in the holder table <prefix>/.lock ({"Limit":N,
//     "Holders":{...}}), and
//   - holds its own contender key <prefix>/<session>.
//
// The table alone is not proof: api.Semaphore prunes a dead holder from it
// only when someone writes it next, and a holder that lost its contender
// key (released, deleted, or taken by another session) is listed until
// then while it holds nothing; its own monitor already says it lost. A
// contender key alone is not proof either: a waiter holds its key before
// it gets into the table. The table's Limit does not count: a resize keeps
// every listed holder its slot. A table that does not decode has no
// holders.
//
// When the observer read the sessions too (Sessions non-nil), a holder
// whose session that read does not list is left out. In one Consul state
// this never happens: ending a session releases or deletes its keys in the
// same Raft write. It happens when the two reads are not the same moment,
// and bounds the error: a session read newer than the key read (status
// reads keys first) drops a holder that has ended since, correctly; one
// older (the controller's separate watches) leaves out a holder whose
// session it has not seen yet, for at most one round of its session watch,
// and never reports a session that had ended by the newer read as holding.
// An observer without a session read (the data source, which reports the
// key read's moment and flags a holder that ended a moment later; the
// protocol, whose own session is alive while it renews) passes nil.
//
// # How a mutex's waiters take the lock
//
// How a mutex's waiters take the lock when it is released (consullock_lock's
// waiters).
//
// With WaitersRace (the default, and what `consul lock` and api.Lock do)
// every waiter blocks on the lock key, so a release wakes all of them and
// each tries to acquire: one Raft write per waiter and hand-over, all but one
// refused.
//
// With WaitersQueue each waiting `consullock run` first writes an entry
// <prefix>/.queue/<session>, acquired with its own session (so Consul clears
// it when the session ends), and waits in the order of the entries'
// CreateIndex: the first in line blocks on the lock key, every other entry
// blocks on the entry before it. A release then wakes one waiter, and the
// hand-over costs the same requests for 2 waiters as for 100. Acquiring stays
// the same lock transaction (the fencing token is unchanged); the queue only
// decides who tries, so waiters that do not queue (`consul lock`, older
// runners) are still excluded and may still win a race. The price is liveness
// after a crash: a waiter killed while first in line keeps the waiters behind
// it from trying until Consul ends its session (at most about 2 x ttl after
// its last renewal), as a killed holder does.
//
// WaitersHandOff is WaitersQueue with one Raft write fewer per hand-over: a
// releasing runner hands the lock to the first in line in its release
// transaction (HandOff: unlock, lock with that waiter's session and the
// holder value of its entry, delete its entry), so the waiter wakes holding
// the lock instead of waking to acquire it. Its price is a longer stall
// after a crash: a waiter killed while first in line is given the lock, and
// the lock then waits for Consul to end that session and for the session's
// lock-delay (ttl x 2 + lock_delay at most) before anyone else may take it.
package lockmodel
