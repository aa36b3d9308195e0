package lockproto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// semaphore is the api.Semaphore protocol (consul api/semaphore.go) with a
// session the runner owns, so that it shares slots with `consul lock -n N`
// and api.Semaphore clients on the same prefix:
//
//   - each contender acquires its own key <prefix>/<session> (flags
//     SemaphoreFlagValue, value = holder value);
//   - the holder table <prefix>/.lock = {"Limit":N,"Holders":{...}} (flags
//     SemaphoreFlagValue) is changed only with check-and-set;
//   - a holder whose session no longer holds any key under the prefix is
//     dead and pruned by whoever writes the table next.
//
// It differs from api.Semaphore in when a dead holder is pruned: not at
// once, but when the dead holder's own lock-delay has passed since this
// waiter first saw it dead (lockmodel.SlotFreeAt). Consul puts no
// lock-delay on a slot, and a holder cut off from Consul stops its command
// only by then (StopRule). A holder that released cleanly has left the
// table itself and is never seen dead, so a clean hand-over stays
// immediate. So that waiters learn that lock-delay with the key read a
// worker token has, each contender writes its own into its contender
// key's value (lockmodel.WithLockDelay); a waiter that learns it neither
// there nor from the holder's session assumes the maximum
// (lockmodel.DeadHolderLockDelay).
//
// It also differs in the admission: the join re-locks the contender key
// (unlock, then lock, in the admission's transaction), so the key's
// ModifyIndex is the admission's Raft index even when the value is the
// same as before: that is the holder's fencing token.
type semaphore struct {
	c    *consul.Client
	lock lockmodel.Lock
	// declaredDelay is the lock-delay of the profile this holder's session
	// was created with, written into its contender key for waiters. It is
	// never applied to another holder: their profile may differ.
	declaredDelay time.Duration
	prefix        string
	log           *slog.Logger
	// watchC, when set, is the client Watch uses (Settings.WatchClient).
	watchC *consul.Client
	// blockingKey: every admission reads it (Settings.BlockingKey); "" for
	// none.
	blockingKey string
}

func (m *semaphore) Key() string { return m.lock.Key }

func (m *semaphore) contenderKey(s *Session) string { return m.prefix + "/" + s.ID }

func (m *semaphore) ownerKey(s *Session) string { return m.contenderKey(s) }

func (m *semaphore) Acquire(ctx context.Context, s *Session, holder func() []byte) (Grant, error) {
	w := &slotWaiter{m: m, s: s, holder: holder, dead: newDeadHolders(m.prefix), f: consul.Follower{Wait: acquireWaitTime}}
	w.contender = &api.KVPair{Key: m.contenderKey(s), Value: w.value(), Session: s.ID, Flags: lockmodel.SemaphoreFlagValue}
	if err := w.createContender(ctx); err != nil {
		return Grant{}, err
	}
	for {
		pairs, meta, err := m.c.KV().List(m.prefix+"/", w.f.Options(ctx))
		w.f.Wait = acquireWaitTime
		if err != nil {
			if werr := waitAfterError(ctx, m.log, "read semaphore "+m.prefix+"/", err, &w.f); werr != nil {
				return Grant{}, werr
			}
			continue
		}
		w.f.Answered(meta.LastIndex)
		if g, done, err := w.step(ctx, pairs); done || err != nil {
			return g, err
		}
	}
}

// slotWaiter is one contender's wait for a semaphore slot: what it has
// learnt of the holders and the follower of the semaphore's prefix.
type slotWaiter struct {
	m         *semaphore
	s         *Session
	holder    func() []byte
	contender *api.KVPair
	dead      *deadHolders
	lastSeen  []string // the holders last logged
	f         consul.Follower
}

func (w *slotWaiter) value() []byte { return lockmodel.WithLockDelay(w.holder(), w.m.declaredDelay) }

// createContender writes the contender key, acquired with the session.
func (w *slotWaiter) createContender(ctx context.Context) error {
	for {
		_, ok, err := lockKey(ctx, w.m.c, w.contender)
		switch {
		case errors.Is(err, ErrSessionInvalid):
			return err
		case err != nil:
			if werr := waitAfterError(ctx, w.m.log, "create contender key "+w.contender.Key, err, &w.f); werr != nil {
				return werr
			}
		case !ok:
			return fmt.Errorf("create contender key %s: Consul refused the acquisition", w.contender.Key)
		default:
			return nil
		}
	}
}

// step decides on one listing of the semaphore: wait (done false), or
// join when a slot is free; done with the grant, or an error.
func (w *slotWaiter) step(ctx context.Context, pairs api.KVPairs) (g Grant, done bool, err error) {
	m, s := w.m, w.s
	table, tableIndex, err := m.table(pairs)
	if err != nil {
		return Grant{}, true, err
	}
	if !heldBy(pairs, w.contender.Key, s.ID) {
		// Our contender key is gone: the session was invalidated
		// (behavior delete) or someone deleted the key.
		return Grant{}, true, ErrSessionInvalid
	}
	newlyDead, freeIn := w.dead.prune(table, pairs, time.Now())
	for _, h := range newlyDead {
		m.log.Info("a holder's session ended without leaving the semaphore; its slot frees when its lock-delay has passed",
			"holder_session", h, "lock_delay", lockmodel.FormatDuration(w.dead.lockDelay(h)))
	}
	// Listed already: an earlier join succeeded but its answer was lost.
	// Join again to learn the token.
	delete(table.Holders, s.ID)
	if len(table.Holders) >= m.lock.Limit {
		w.waitForSlot(ctx, table, pairs, freeIn)
		return Grant{}, false, nil
	}
	return w.join(ctx, table, tableIndex)
}

// waitForSlot: every slot is taken; the next listing blocks until the
// semaphore changes, or until a dead holder's slot frees.
func (w *slotWaiter) waitForSlot(ctx context.Context, table lockmodel.SemaphoreState, pairs api.KVPairs, freeIn time.Duration) {
	// Learn the lock-delays of the holders while they live (a session that
	// has ended can no longer be read), before saying that we wait: a
	// holder that ends after the log line frees its slot after its own
	// lock-delay, not Consul's maximum.
	w.m.learnLockDelays(ctx, w.s, table, pairs, w.dead)
	if holders := slices.Sorted(maps.Keys(table.Holders)); !slices.Equal(holders, w.lastSeen) {
		w.lastSeen = holders
		w.m.log.Info("waiting for a semaphore slot", "limit", w.m.lock.Limit, "holder_sessions", holders)
	}
	if freeIn > 0 {
		// Wake when a dead holder's slot frees, if nothing changes before.
		w.f.Wait = min(acquireWaitTime, freeIn+lockDelayMargin)
	}
}

// join writes the holder table listing s (m.join); a table changed first
// by another contender has the waiter read it again.
func (w *slotWaiter) join(ctx context.Context, table lockmodel.SemaphoreState, tableIndex uint64) (Grant, bool, error) {
	table.Holders[w.s.ID] = true
	tableValue, err := lockmodel.EncodeSemaphoreState(table)
	if err != nil {
		return Grant{}, true, err
	}
	w.contender.Value = w.value() // written again by the join: "started" is the admission
	g, ok, err := w.m.join(ctx, w.s, w.contender, tableValue, tableIndex)
	switch {
	case errors.Is(err, ErrSessionInvalid), errors.Is(err, ErrBlocked):
		return Grant{}, true, err
	case err != nil:
		if werr := waitAfterError(ctx, w.m.log, "update semaphore holder table "+w.m.lock.Key, err, &w.f); werr != nil {
			return Grant{}, true, werr
		}
		return Grant{}, false, nil
	case ok:
		return g, true, nil
	}
	w.f.Reset() // another contender changed the table first; read it again
	return Grant{}, false, nil
}

// join admits s: in one transaction it checks that s still holds its
// contender key, unlocks and locks that key again, writing the holder
// value, and writes the holder table listing s if the table is still at
// tableIndex (0: absent). The lock op's answer is the contender key's new
// ModifyIndex, the Raft index of this admission: the fencing token, which
// grows with every admission and is what the data source and status
// report for this holder (the key's ModifyIndex). ok is false when the
// table or the contender key changed.
//
// Why unlock first: Consul keeps the ModifyIndex of an entry written
// exactly as it is, and a lock op by the holding session changes nothing
// but the value; with a fixed value (the ephemeral lock's value) the token
// would be the contender key's creation index, and a contender that waited
// longer would get a lower token than one admitted before it. The unlock
// clears the session (a release: no lock-delay) and the lock sets it again
// with LockIndex + 1, so the entry always changes; the transaction is
// atomic, so no reader sees the key unheld.
func (m *semaphore) join(ctx context.Context, s *Session, contender *api.KVPair, table []byte, tableIndex uint64) (Grant, bool, error) {
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: contender.Key, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: contender.Key, Value: contender.Value, Flags: contender.Flags, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: contender.Key, Value: contender.Value, Flags: contender.Flags, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: m.lock.Key, Value: table, Flags: lockmodel.SemaphoreFlagValue, Index: tableIndex}},
	}
	entry, ok, err := runLockTxn(ctx, m.c, append(ops, blockOps(m.blockingKey)...), contender.Key)
	if errors.Is(err, ErrBlocked) { // admitted: the holder gives the slot up
		return Grant{FencingToken: entry.ModifyIndex, LockIndex: entry.LockIndex}, true, err
	}
	if err != nil || !ok {
		return Grant{}, false, err
	}
	return Grant{FencingToken: entry.ModifyIndex, LockIndex: entry.LockIndex}, true, nil
}

// table finds and decodes the holder table among pairs. An absent table is
// a fresh one with this lock's limit (tableIndex 0: create only).
func (m *semaphore) table(pairs api.KVPairs) (lockmodel.SemaphoreState, uint64, error) {
	for _, p := range pairs {
		if p.Key != m.lock.Key {
			continue
		}
		if err := lockmodel.CheckCompatible(m.lock, p.Flags, p.Value); err != nil {
			return lockmodel.SemaphoreState{}, 0, err
		}
		state, err := lockmodel.DecodeSemaphoreState(p.Value)
		if err != nil {
			return lockmodel.SemaphoreState{}, 0, err
		}
		if state.Limit == 0 {
			state.Limit = m.lock.Limit
		}
		return state, p.ModifyIndex, nil
	}
	return lockmodel.SemaphoreState{Limit: m.lock.Limit, Holders: map[string]bool{}}, 0, nil
}

// PruneDeadHolders drops holders whose session holds no key among pairs, as
// api.Semaphore does: it counts the live holders. A waiter must not take a
// slot by it (see deadHolders).
func PruneDeadHolders(table lockmodel.SemaphoreState, pairs api.KVPairs) {
	alive := liveSessions(pairs)
	for h := range table.Holders {
		if !alive[h] {
			delete(table.Holders, h)
		}
	}
}

// liveSessions are the sessions that hold a key among pairs.
func liveSessions(pairs api.KVPairs) map[string]bool {
	alive := map[string]bool{}
	for _, p := range pairs {
		if p.Session != "" {
			alive[p.Session] = true
		}
	}
	return alive
}

// deadHolders is a waiter's record of the holders it has seen dead: listed
// in the holder table while their session holds no key under the prefix;
// and of what it learnt of each holder's lock-delay.
type deadHolders struct {
	prefix  string
	seen    map[string]time.Time     // when this waiter first saw each dead
	delays  map[string]time.Duration // session lock-delays, read while alive
	written map[string]time.Duration // lock-delays holders wrote into their contender key
	asked   map[string]bool          // sessions whose lock-delay was asked for
}

func newDeadHolders(prefix string) *deadHolders {
	return &deadHolders{prefix: prefix, seen: map[string]time.Time{}, delays: map[string]time.Duration{},
		written: map[string]time.Duration{}, asked: map[string]bool{}}
}

// lockDelay is the lock-delay counted for dead holder h: its own, as far
// as this waiter learnt it, else the maximum (lockmodel.DeadHolderLockDelay).
func (d *deadHolders) lockDelay(h string) time.Duration {
	var known []time.Duration
	if delay, ok := d.written[h]; ok {
		known = append(known, delay)
	}
	if delay, ok := d.delays[h]; ok {
		known = append(known, delay)
	}
	return lockmodel.DeadHolderLockDelay(known...)
}

// learnWritten records the lock-delay each listed holder wrote into its
// contender key <prefix>/<session>. It is read at every sight, because a
// holder's key goes with its session when that has behavior delete: what
// was read while it lived is what the waiter has once it is dead.
func (d *deadHolders) learnWritten(table lockmodel.SemaphoreState, pairs api.KVPairs) {
	for _, p := range pairs {
		h := strings.TrimPrefix(p.Key, d.prefix+"/")
		if h == p.Key || !table.Holders[h] || (p.Session != "" && p.Session != h) {
			continue
		}
		if delay, ok := lockmodel.HolderLockDelay(p.Value); ok {
			d.written[h] = delay
		}
	}
}

// prune drops from table the dead holders whose slot is free at now
// (lockmodel.SlotFreeAt from when this waiter first saw each dead, with
// the holder's own lock-delay) and keeps the others. It returns the
// holders seen dead for the first time, and how long until the next kept
// one's slot frees (0: none kept).
func (d *deadHolders) prune(table lockmodel.SemaphoreState, pairs api.KVPairs, now time.Time) (newlyDead []string, freeIn time.Duration) {
	d.learnWritten(table, pairs)
	alive := liveSessions(pairs)
	for h := range d.seen {
		if !table.Holders[h] || alive[h] {
			delete(d.seen, h) // gone from the table: nothing to prune
		}
	}
	for _, h := range slices.Sorted(maps.Keys(table.Holders)) {
		if alive[h] {
			continue
		}
		seen, ok := d.seen[h]
		if !ok {
			seen = now
			d.seen[h] = now
			newlyDead = append(newlyDead, h)
		}
		freeAt := lockmodel.SlotFreeAt(seen, d.lockDelay(h))
		if !now.Before(freeAt) {
			delete(table.Holders, h)
			continue
		}
		if wait := freeAt.Sub(now); freeIn == 0 || wait < freeIn {
			freeIn = wait
		}
	}
	return newlyDead, freeIn
}

// learnLockDelays reads, once per session, the lock-delay of each live
// holder other than s.
func (m *semaphore) learnLockDelays(ctx context.Context, s *Session, table lockmodel.SemaphoreState, pairs api.KVPairs, d *deadHolders) {
	alive := liveSessions(pairs)
	for h := range table.Holders {
		if h == s.ID || !alive[h] || d.asked[h] {
			continue
		}
		d.asked[h] = true
		if delay, ok := sessionLockDelay(ctx, m.c, h); ok {
			d.delays[h] = delay
		}
	}
}

func heldBy(pairs api.KVPairs, key, session string) bool {
	for _, p := range pairs {
		if p.Key == key {
			return p.Session == session
		}
	}
	return false
}

func (m *semaphore) Watch(ctx context.Context, s *Session, out chan<- Observation) {
	kv := cmp.Or(m.watchC, m.c).KV()
	f := &consul.Follower{Wait: watchWaitTime, Consistent: true}
	var sent time.Time
	_ = consul.Follow(ctx, f, func(o *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error) {
		sent = time.Now()
		return kv.List(m.prefix+"/", o)
	}, func(pairs api.KVPairs, err error) bool {
		if err != nil {
			return reportReadFailure(ctx, out, s, sent, err, "watch semaphore "+m.prefix+"/")
		}
		if lost := m.lostBecause(pairs, s); lost != "" {
			send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyLost, At: sent, Detail: lost})
			return false
		}
		return send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyHeld, At: sent})
	})
}

// lostBecause says why pairs show that s no longer holds a slot, or "",
// by lockmodel.Holders, the rule status, the controller and the data source
// apply too: as in api.Semaphore's monitor, s holds a slot while it holds
// its contender key and the holder table lists it. The table's Limit does
// not count: a resize (the provider rewrites Limit by check-and-set and
// keeps Holders) leaves every holder its slot. No session read: this
// holder's own session lives while it renews.
func (m *semaphore) lostBecause(pairs api.KVPairs, s *Session) string {
	st := lockmodel.LockState{Key: m.lock.Key, Semaphore: true, Keys: make(map[string]lockmodel.KeyEntry, len(pairs))}
	for _, p := range pairs {
		if p.Key == m.lock.Key {
			table := store.KeyEntry(p)
			st.Entry = &table
			continue
		}
		st.Keys[p.Key] = store.KeyEntry(p)
	}
	return lockmodel.NotHolding(st, s.ID)
}

func (m *semaphore) Release(ctx context.Context, s *Session, _ []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	kv := m.c.KV()
	released := false
	for attempt := 0; ; attempt++ {
		pair, err := store.New(m.c).ReadKeyConsistent(ctx, m.lock.Key)
		if err != nil {
			return false, err
		}
		if pair == nil {
			break
		}
		state, err := lockmodel.DecodeSemaphoreState(pair.Value)
		if err != nil || !state.Holders[s.ID] {
			break
		}
		delete(state.Holders, s.ID)
		value, err := lockmodel.EncodeSemaphoreState(state)
		if err != nil {
			return false, err
		}
		ok, _, err := kv.CAS(&api.KVPair{Key: m.lock.Key, Value: value, Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: pair.ModifyIndex},
			(&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return false, consul.Classify("update semaphore holder table "+m.lock.Key, err)
		}
		if ok {
			released = true
			break
		}
		if attempt >= 20 {
			return false, fmt.Errorf("update semaphore holder table %s: check-and-set kept failing; the session's end will free the slot", m.lock.Key)
		}
	}
	if _, err := kv.Delete(m.contenderKey(s), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return released, consul.Classify("delete contender key "+m.contenderKey(s), err)
	}
	return released, nil
}
