package lockproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
type semaphore struct {
	c      *consul.Client
	lock   lockmodel.Lock
	prefix string
	log    *slog.Logger
}

func (m *semaphore) Key() string { return m.lock.Key }

func (m *semaphore) contenderKey(s *Session) string { return m.prefix + "/" + s.ID }

func (m *semaphore) Acquire(ctx context.Context, s *Session, holder func() []byte) (Grant, error) {
	kv := m.c.KV()
	var failures int
	fail := func(op string, err error) error {
		return waitAfterError(ctx, m.log, op, err, &failures)
	}
	contender := &api.KVPair{Key: m.contenderKey(s), Value: holder(), Session: s.ID, Flags: lockmodel.SemaphoreFlagValue}
	for {
		_, ok, err := lockKey(ctx, m.c, contender)
		if errors.Is(err, ErrSessionInvalid) {
			return Grant{}, err
		}
		if err != nil {
			if werr := fail("create contender key "+contender.Key, err); werr != nil {
				return Grant{}, werr
			}
			continue
		}
		if !ok {
			return Grant{}, fmt.Errorf("create contender key %s: Consul refused the acquisition", contender.Key)
		}
		break
	}

	var (
		waitIndex uint64
		lastSeen  []string
	)
	for {
		pairs, meta, err := kv.List(m.prefix+"/", (&api.QueryOptions{WaitIndex: waitIndex, WaitTime: acquireWaitTime}).WithContext(ctx))
		if err != nil {
			if werr := fail("read semaphore "+m.prefix+"/", err); werr != nil {
				return Grant{}, werr
			}
			waitIndex = 0
			continue
		}
		failures = 0
		table, tableIndex, err := m.table(pairs)
		if err != nil {
			return Grant{}, err
		}
		if !heldBy(pairs, contender.Key, s.ID) {
			// Our contender key is gone: the session was invalidated
			// (behavior delete) or someone deleted the key.
			return Grant{}, ErrSessionInvalid
		}
		PruneDeadHolders(table, pairs)
		if table.Holders[s.ID] {
			// Listed already: an earlier join succeeded but its answer
			// was lost. Join again to learn the token.
			delete(table.Holders, s.ID)
		}
		if len(table.Holders) >= m.lock.Limit {
			if holders := slices.Sorted(maps.Keys(table.Holders)); !slices.Equal(holders, lastSeen) {
				lastSeen = holders
				m.log.Info("waiting for a semaphore slot", "limit", m.lock.Limit, "holder_sessions", holders)
			}
			waitIndex = NextIndex(waitIndex, meta.LastIndex)
			continue
		}
		table.Holders[s.ID] = true
		value, err := lockmodel.EncodeSemaphoreState(table)
		if err != nil {
			return Grant{}, err
		}
		contender.Value = holder() // written again by the join: "started" is the admission
		g, ok, err := m.join(ctx, s, contender, value, tableIndex)
		if errors.Is(err, ErrSessionInvalid) {
			return Grant{}, err
		}
		if err != nil {
			if werr := fail("update semaphore holder table "+m.lock.Key, err); werr != nil {
				return Grant{}, werr
			}
			waitIndex = 0
			continue
		}
		if ok {
			return g, nil
		}
		waitIndex = 0 // another contender changed the table first; read it again
	}
}

// join admits s: in one transaction it checks that s still holds its
// contender key, locks that key again (the holder may), writing the holder
// value, and writes the holder table listing s if the table is still at
// tableIndex (0: absent). The lock op's answer is the contender key's new
// ModifyIndex, the Raft index of this admission: the fencing token, which
// grows with every admission and is what the data source reports for this
// holder. ok is false when the table or the contender key changed.
func (m *semaphore) join(ctx context.Context, s *Session, contender *api.KVPair, table []byte, tableIndex uint64) (Grant, bool, error) {
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: contender.Key, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: contender.Key, Value: contender.Value, Flags: contender.Flags, Session: s.ID}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: m.lock.Key, Value: table, Flags: lockmodel.SemaphoreFlagValue, Index: tableIndex}},
	}
	entry, ok, err := runLockTxn(ctx, m.c, ops, contender.Key)
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
// api.Semaphore does.
func PruneDeadHolders(table lockmodel.SemaphoreState, pairs api.KVPairs) {
	alive := map[string]bool{}
	for _, p := range pairs {
		if p.Session != "" {
			alive[p.Session] = true
		}
	}
	for h := range table.Holders {
		if !alive[h] {
			delete(table.Holders, h)
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
	kv := m.c.KV()
	var (
		index    uint64
		failures int
	)
	for {
		sent := time.Now()
		pairs, meta, err := kv.List(m.prefix+"/", (&api.QueryOptions{RequireConsistent: true, WaitIndex: index, WaitTime: watchWaitTime}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if !send(ctx, out, Observation{Session: s.ID, Kind: ObsReadFailed, At: sent, Detail: consul.Classify("watch semaphore "+m.prefix+"/", err).Error()}) {
				return
			}
			if sleepCtx(ctx, backoff(failures)) != nil {
				return
			}
			index = 0
			continue
		}
		failures = 0
		if lost := m.lostBecause(pairs, s); lost != "" {
			send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyLost, At: sent, Detail: lost})
			return
		}
		if !send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyHeld, At: sent}) {
			return
		}
		index = NextIndex(index, meta.LastIndex)
	}
}

// lostBecause says why pairs show that s no longer holds a slot, or "".
// Only the slot counts, as in api.Semaphore's monitor: the contender key
// held by s and s listed in the holder table. The table's Limit does not:
// a resize (the provider rewrites Limit by check-and-set and keeps
// Holders) leaves every holder its slot.
func (m *semaphore) lostBecause(pairs api.KVPairs, s *Session) string {
	if !heldBy(pairs, m.contenderKey(s), s.ID) {
		return "contender key " + m.contenderKey(s) + " is no longer held by this session"
	}
	var table *api.KVPair
	for _, p := range pairs {
		if p.Key == m.lock.Key {
			table = p
		}
	}
	if table == nil {
		return "holder table " + m.lock.Key + " was deleted"
	}
	state, err := lockmodel.DecodeSemaphoreState(table.Value)
	if err != nil {
		return "holder table " + m.lock.Key + " is unusable: " + err.Error()
	}
	if !state.Holders[s.ID] {
		return "holder table " + m.lock.Key + " no longer lists this session"
	}
	return ""
}

func (m *semaphore) Release(ctx context.Context, s *Session, _ []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	kv := m.c.KV()
	released := false
	for attempt := 0; ; attempt++ {
		pair, err := m.c.ReadKeyConsistent(ctx, m.lock.Key)
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
