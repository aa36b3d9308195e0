package lockproto

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The waiter queue of a mutex declared with waiters = "queue" (the
// protocol is lockmodel's, waiters.go):
//
//   - before it waits, a runner writes its entry <prefix>/.queue/<session>,
//     acquired with its own session (Consul clears it when the session ends),
//     whose value is the holder value it would write;
//   - it lists the queue (a consistent read) and stands where PlaceInQueue
//     puts it: the first in line runs the race logic on the lock key (it is
//     the only queued waiter that tries); every other waiter blocks on the
//     entry just ahead of it, from the listing's index, and lists again when
//     that entry changes;
//   - the acquisition is the same lock transaction (the same fencing token),
//     with one more op: the delete of the winner's own entry, so the next in
//     line wakes exactly when the lock is taken, and not before;
//   - a waiter that leaves without the lock deletes its entry before its
//     session is destroyed.
//
// Safety never depends on the queue: only the lock transaction decides who
// holds, and waiters that do not queue (`consul lock`, older runners, a
// runner whose token lacks the queue grant) still race for the key.

// acquireQueued is Acquire for a lock whose waiters queue.
func (m *mutex) acquireQueued(ctx context.Context, s *Session, holder func() []byte) (g Grant, err error) {
	kv := m.c.KV()
	entry := lockmodel.WaiterQueueEntryKey(m.lock, s.ID)
	queued, err := m.enqueue(ctx, s, entry, holder)
	if err != nil {
		// Cancelled or failed with the write's answer lost: the entry may
		// be there all the same, and is this waiter's to delete.
		m.leaveQueue(ctx, entry)
		return Grant{}, err
	}
	if !queued {
		return m.race(ctx, s, holder, "")
	}
	defer func() {
		if err != nil {
			m.leaveQueue(ctx, entry)
		}
	}()
	var (
		retry     consul.Follower // the back-off of the queue's reads
		lastAhead = "-"
	)
	for {
		pairs, meta, err := kv.List(lockmodel.WaiterQueuePrefix(m.lock), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			if werr := waitAfterError(ctx, m.log, "list waiter queue "+lockmodel.WaiterQueuePrefix(m.lock), err, &retry); werr != nil {
				return Grant{}, werr
			}
			continue
		}
		retry = consul.Follower{}
		place := lockmodel.PlaceInQueue(QueueEntries(pairs), s.ID, m.holderSeen)
		m.deleteStale(ctx, place.Stale)
		if !place.Listed && m.lock.HandsOff() {
			// With hand-off, an entry gone is most likely a lock handed over.
			pair, _, err := kv.Get(m.lock.Key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			if err == nil && pair != nil && pair.Session == s.ID {
				return m.handedOver(ctx, pair)
			}
		}
		if !place.Listed {
			m.log.Info("the waiter queue lacks this runner's entry; writing it again", "entry", entry)
			if queued, err := m.enqueue(ctx, s, entry, holder); err != nil || !queued {
				if err != nil {
					return Grant{}, err
				}
				return m.race(ctx, s, holder, "")
			}
			continue
		}
		if place.First {
			m.log.Info("first in the waiter queue; trying for the lock when it is free", "queue_position", 0)
			return m.race(ctx, s, holder, entry)
		}
		if place.Ahead.Session != lastAhead {
			lastAhead = place.Ahead.Session
			m.log.Info("waiting in the queue", "queue_position", place.Position, "ahead_session", place.Ahead.Session)
		}
		// From the listing's answer: a change of the entry ahead between
		// the listing and this read answers at once.
		ahead := consul.Follower{Wait: acquireWaitTime}
		ahead.Answered(meta.LastIndex)
		if _, _, err = kv.Get(place.Ahead.Key, ahead.Options(ctx)); err != nil {
			if werr := waitAfterError(ctx, m.log, "wait on queue entry "+place.Ahead.Key, err, &retry); werr != nil {
				return Grant{}, werr
			}
		}
	}
}

// enqueue writes session s's queue entry (acquired with s, its value the
// holder value). queued is false, after one warning, when the token lacks
// the queue grant or Consul refuses the entry: the runner then races.
func (m *mutex) enqueue(ctx context.Context, s *Session, entry string, holder func() []byte) (queued bool, err error) {
	var retry consul.Follower // the back-off of the write
	for {
		pair := &api.KVPair{Key: entry, Value: lockmodel.WithLockDelay(holder(), m.declaredDelay), Session: s.ID}
		ok, _, err := m.c.KV().Acquire(pair, (&api.WriteOptions{}).WithContext(ctx))
		switch {
		case err == nil && ok:
			return true, nil
		case err == nil:
			m.log.Warn("Consul refused this runner's waiter queue entry; racing for the lock instead", "entry", entry)
			return false, nil
		case consul.KindOf(err) == consul.KindSessionInvalid:
			return false, ErrSessionInvalid
		case consul.KindOf(err) == consul.KindPermissionDenied:
			m.log.Warn("cannot queue for the lock: the token lacks the waiter queue grant; racing for the lock instead",
				"missing_grant", queueGrant(m.lock), "error", consul.Classify("write queue entry "+entry, err).Error())
			return false, nil
		}
		if werr := waitAfterError(ctx, m.log, "write queue entry "+entry, err, &retry); werr != nil {
			return false, werr
		}
	}
}

// queueGrant names the ACL grant queued waiters of l need, as a runner's
// warning says it: the rule and the consullock_acl_policy input that
// renders it.
func queueGrant(l lockmodel.Lock) string {
	return `key_prefix "` + lockmodel.WaiterQueuePrefix(l) + `" write (consullock_acl_policy queue_prefixes)`
}

// deleteStale deletes queue entries whose session has ended, each only if
// unchanged since it was listed; best effort (any waiter may, and a
// failure only leaves the entry for the next).
func (m *mutex) deleteStale(ctx context.Context, stale []lockmodel.QueueEntry) {
	for _, e := range stale {
		if _, _, err := m.c.KV().DeleteCAS(&api.KVPair{Key: e.Key, ModifyIndex: e.ModifyIndex}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			m.log.Debug("could not delete a stale queue entry", "entry", e.Key, "error", consul.Classify("delete "+e.Key, err).Error())
		}
	}
}

// leaveQueue deletes the waiter's own entry when it leaves without the
// lock (timeout, signal, error), before its session is destroyed, so the
// waiter behind it moves up at once.
func (m *mutex) leaveQueue(ctx context.Context, entry string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	if _, err := m.c.KV().Delete(entry, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		m.log.Warn("could not delete this runner's queue entry; Consul clears it when the session ends", "entry", entry,
			"error", consul.Classify("delete "+entry, err).Error())
		return
	}
	m.log.Debug("left the waiter queue", "entry", entry)
}

// lockTxn acquires the lock key with pair in one transaction: the lock op
// and, when *entry names the waiter's queue entry, its delete (all or
// nothing, so the entry goes exactly when the lock is taken). A token
// that may no longer delete the entry does not keep the waiter from the
// lock: the delete is dropped (*entry cleared) and the lock tried again.
func (m *mutex) lockTxn(ctx context.Context, pair *api.KVPair, entry *string) (*api.KVPair, bool, error) {
	won, ok, err := runLockTxn(ctx, m.c, append(lockTxnOps(pair, *entry), blockOps(m.blockingKey)...), pair.Key)
	if *entry != "" && consul.KindOf(err) == consul.KindPermissionDenied {
		m.log.Warn("the token may no longer delete this runner's queue entry; acquiring without deleting it",
			"missing_grant", queueGrant(m.lock), "error", err.Error())
		*entry = ""
		return runLockTxn(ctx, m.c, append(lockTxnOps(pair, ""), blockOps(m.blockingKey)...), pair.Key)
	}
	return won, ok, err
}

// lockTxnOps are the ops of a mutex acquisition: the "lock" op of pair
// and, with entry set, the delete of the waiter's queue entry.
func lockTxnOps(pair *api.KVPair, entry string) api.TxnOps {
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVLock, Key: pair.Key, Value: pair.Value, Flags: pair.Flags, Session: pair.Session}}}
	if entry != "" {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: entry}})
	}
	return ops
}

// QueueEntries turns a listing of a waiter queue into PlaceInQueue's
// entries.
func QueueEntries(pairs api.KVPairs) []lockmodel.QueueEntry {
	out := make([]lockmodel.QueueEntry, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, lockmodel.QueueEntry{Key: p.Key, Session: p.Session, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
	}
	return out
}

// handOff gives the lock held by s to the first waiter in the queue
// (waiters = "handoff") in one transaction: unlock with s, check that the
// waiter's entry is still held by its session, lock with that session and
// the value lockmodel.NextHolder made of the entry, delete the entry. The
// waiter, blocked on the lock key, wakes holding the lock: the hand-over
// takes the release's Raft write only. false, when nobody waits or the
// transaction fails (s does not hold, the waiter left or its session
// ended, a refusal), leaves the lock as it was for a plain release.
//
// The queue comes from the listing followQueue kept while the lock was held
// (no request on the hand-over's path), else from a listing now; a
// transaction refused on a kept listing (the waiter left meanwhile) is tried
// once more on a fresh one.
func (m *mutex) handOff(ctx context.Context, s *Session, holder []byte) bool {
	if kept := m.queueSeen.Swap(nil); kept != nil {
		if handed, tried := m.handOffTo(ctx, s, holder, *kept); handed || !tried {
			return handed
		}
	}
	pairs, _, err := m.c.KV().List(lockmodel.WaiterQueuePrefix(m.lock), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		m.log.Debug("could not list the waiter queue; releasing instead of handing the lock over", "error", consul.Classify("list "+lockmodel.WaiterQueuePrefix(m.lock), err).Error())
		return false
	}
	handed, _ := m.handOffTo(ctx, s, holder, pairs)
	return handed
}

// followQueue keeps the waiter queue's latest listing in queueSeen while
// the lock is held (until ctx ends): one blocking query, answered when a
// waiter joins or leaves.
func (m *mutex) followQueue(ctx context.Context, kv *api.KV) {
	f := &consul.Follower{Wait: watchWaitTime}
	_ = consul.Follow(ctx, f, func(o *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error) {
		return kv.List(lockmodel.WaiterQueuePrefix(m.lock), o)
	}, func(pairs api.KVPairs, err error) bool {
		if err != nil {
			m.queueSeen.Store(nil) // the release lists again
		} else {
			m.queueSeen.Store(&pairs)
		}
		return true
	})
}

// handOffTo is handOff on the queue listing pairs; tried is false when
// nobody in it can be handed the lock (no transaction was sent).
func (m *mutex) handOffTo(ctx context.Context, s *Session, holder []byte, pairs api.KVPairs) (handed, tried bool) {
	values := make(map[string][]byte, len(pairs))
	for _, p := range pairs {
		values[p.Key] = p.Value
	}
	next, ok := lockmodel.NextHolder(QueueEntries(pairs), values, s.ID, m.clock.Now())
	if !ok {
		return false, false
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: m.lock.Key, Value: holder, Flags: lockmodel.LockFlagValue, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: next.Entry.Key, Session: next.Session}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.lock.Key, Value: next.Value, Flags: lockmodel.LockFlagValue, Session: next.Session}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: next.Entry.Key}},
	}
	ok, resp, err := m.c.WriteTxn(ctx, ops)
	switch {
	case err != nil:
		m.log.Debug("hand-over transaction failed", "next_session", next.Session, "error", consul.Classify("hand over "+m.lock.Key, err).Error())
		return false, true
	case !ok:
		m.log.Debug("Consul refused the hand-over", "next_session", next.Session, "error", consul.TxnError("hand over "+m.lock.Key, resp.Errors).Error())
		return false, true
	}
	m.log.Info("lock handed to the first waiter in line", "next_session", next.Session)
	return true, true
}

// handedOver is the grant of a lock whose previous holder handed it to
// this waiter (handOff), read consistently at the key's ModifyIndex: the
// hand-off's Raft index, the fencing token. The hand-off was the previous
// holder's transaction, so a blocking key (Settings.BlockingKey) is read here,
// consistently: ErrBlocked, with the grant, when it exists. A read that
// fails keeps the lock (logged): the caller checked the key before it
// waited, and a key the token may not read is not listed by the
// transaction's get-tree either.
func (m *mutex) handedOver(ctx context.Context, pair *api.KVPair) (Grant, error) {
	m.acquired = pair.ModifyIndex
	m.log.Info("the previous holder handed the lock to this runner", "fencing_token", pair.ModifyIndex)
	g := Grant{FencingToken: pair.ModifyIndex, LockIndex: pair.LockIndex, Seen: pair.ModifyIndex, Value: pair.Value}
	if m.blockingKey == "" {
		return g, nil
	}
	block, _, err := m.c.KV().Get(m.blockingKey, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	switch {
	case err != nil:
		if cerr := consul.Classify("read "+m.blockingKey, err); cerr.Kind != consul.KindPermissionDenied {
			m.log.Warn("could not read the blocking key after the hand-off; keeping the lock", "blocking_key", m.blockingKey, "error", cerr.Error())
		}
	case block != nil:
		m.blocked = true
		return g, ErrBlocked
	}
	return g, nil
}
