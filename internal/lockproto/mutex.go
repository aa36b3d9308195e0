package lockproto

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// mutex is the api.Lock protocol (consul api/lock.go) with a session the
// runner owns: one key, acquired with ?acquire=<session> and flags
// LockFlagValue, so `consul lock <prefix>` (key <prefix>/.lock) and api.Lock
// clients exclude and are excluded by it.
//
// It differs from api.Lock where the issue asks for more: every request
// takes a context; a lock-delay is waited out until it can have passed
// rather than in fixed 5s steps; the acquisition is a txn "lock" op whose
// answer carries the fencing token (the key's ModifyIndex); loss is decided by the runner's judge, not by
// the first failed read; and with waiters = "queue" (lockmodel.WaitersQueue)
// a waiter first takes its place in the lock's waiter queue and only the
// first in line tries for the key (queue.go).
type mutex struct {
	c    *consul.Client
	lock lockmodel.Lock
	// declaredDelay is the lock-delay of the declared profile, used when
	// the previous holder's own lock-delay cannot be read.
	declaredDelay time.Duration
	log           *slog.Logger
	// acquired is the key's ModifyIndex at the acquisition (the fencing
	// token): Watch blocks on it from its first read, since the
	// acquisition's own answer showed the key held at that index.
	acquired uint64
	// watchC, when set, is the client Watch uses (HoldOptions.WatchClient).
	watchC *consul.Client
	// holderSeen is the last session seen holding the key (race), for
	// PlaceInQueue, which leaves the holder's own entry out of the queue.
	holderSeen string
	// queueSeen is the waiter queue as last listed while the lock is held
	// (followQueue, waiters = "handoff"), so that the release does not
	// wait for a listing.
	queueSeen atomic.Pointer[api.KVPairs]
	// clock dates the hand-off (HoldOptions.Clock).
	clock lockmodel.Clock
}

func (m *mutex) watchVia(c *consul.Client) { m.watchC = c }

func (m *mutex) Key() string { return m.lock.Key }

func (m *mutex) pair(s *Session, holder []byte) *api.KVPair {
	return &api.KVPair{Key: m.lock.Key, Value: holder, Session: s.ID, Flags: lockmodel.LockFlagValue}
}

func (m *mutex) Acquire(ctx context.Context, s *Session, holder func() []byte) (Grant, error) {
	if m.lock.Queued() {
		return m.acquireQueued(ctx, s, holder)
	}
	return m.race(ctx, s, holder, "")
}

// race waits on the lock key and tries to acquire it whenever it is free:
// what every waiter does with waiters = "race" (as api.Lock), and what the
// first in a waiter queue does. entry, when set, is the waiter's queue
// entry, deleted by the acquisition's own transaction.
func (m *mutex) race(ctx context.Context, s *Session, holder func() []byte, entry string) (Grant, error) {
	kv := m.c.KV()
	var (
		waitIndex    uint64
		failures     int
		holderSeen   string // the last session seen holding the key
		delays       = map[string]time.Duration{}
		freedAt      time.Time // when the key was seen to go free
		delayRetries int       // lock-delay retries since then
	)
	fail := func(op string, err error) error {
		return waitAfterError(ctx, m.log, op+" "+m.lock.Key, err, &failures)
	}
	// heldByOther: pair (read at index last) is held by another session;
	// the next read blocks until it changes.
	heldByOther := func(pair *api.KVPair, last uint64) {
		if pair.Session != holderSeen {
			holderSeen = pair.Session
			m.holderSeen = holderSeen
			if _, ok := delays[holderSeen]; !ok {
				// A runner's value carries its lock-delay; another
				// holder's (consul lock) is read from its session.
				if d, ok := lockmodel.HolderLockDelay(pair.Value); ok {
					delays[holderSeen] = d
				} else if d, ok := sessionLockDelay(ctx, m.c, holderSeen); ok {
					delays[holderSeen] = d
				}
			}
			m.log.Info("waiting for the lock", "holder_session", holderSeen, "holder", string(pair.Value))
		}
		freedAt, delayRetries = time.Time{}, 0
		waitIndex = NextIndex(waitIndex, last)
	}
	// A lock handed to this waiter is taken from this read (handedOver), so
	// with waiters = "handoff" it must be the leader's confirmed view.
	consistent := m.lock.HandsOff() && entry != ""
	for {
		pair, meta, err := kv.Get(m.lock.Key, (&api.QueryOptions{WaitIndex: waitIndex, WaitTime: acquireWaitTime, RequireConsistent: consistent}).WithContext(ctx))
		if err != nil {
			if werr := fail("read lock key", err); werr != nil {
				return Grant{}, werr
			}
			waitIndex = 0
			continue
		}
		failures = 0
		seen := meta.LastIndex
		if pair != nil {
			if err := lockmodel.CheckCompatible(m.lock, pair.Flags, pair.Value); err != nil {
				return Grant{}, err
			}
		}
		switch {
		case pair != nil && pair.Session == s.ID && consistent:
			return m.handedOver(pair), nil
		case pair != nil && pair.Session == s.ID:
			// An earlier lock op succeeded but its answer was lost: lock
			// again below (the holder may) to learn the token.
		case pair != nil && pair.Session != "":
			heldByOther(pair, meta.LastIndex)
			continue
		}
		if freedAt.IsZero() && holderSeen != "" {
			freedAt = time.Now()
		}

		won, ok, err := m.lockTxn(ctx, m.pair(s, lockmodel.WithLockDelay(holder(), m.declaredDelay)), &entry)
		if err != nil {
			if errors.Is(err, ErrSessionInvalid) {
				return Grant{}, err
			}
			if werr := fail("acquire lock key", err); werr != nil {
				return Grant{}, werr
			}
			waitIndex = 0
			continue
		}
		if ok {
			m.acquired = won.ModifyIndex
			return Grant{FencingToken: won.ModifyIndex, LockIndex: won.LockIndex, Seen: seen}, nil
		}

		// false: another contender was first, or the key is in the
		// lock-delay of its previous holder's session.
		pair, meta, err = kv.Get(m.lock.Key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			if werr := fail("read lock key", err); werr != nil {
				return Grant{}, werr
			}
			waitIndex = 0
			continue
		}
		if pair != nil && pair.Session == s.ID && consistent {
			return m.handedOver(pair), nil
		}
		if pair != nil && pair.Session == s.ID {
			waitIndex = 0 // ours after all (an answer lost): lock again for the token
			continue
		}
		if pair != nil && pair.Session != "" {
			// Another contender was first: wait on it from this read,
			// not from a second read of the same state.
			heldByOther(pair, meta.LastIndex)
			continue
		}
		delay, known := delays[holderSeen]
		if !known {
			delay = m.declaredDelay
		}
		wait := lockDelayWait(freedAt, delay, delayRetries, time.Now())
		delayRetries++
		m.log.Info("lock key is in its lock-delay; acquiring again when it can have passed",
			"previous_session", holderSeen, "lock_delay", lockmodel.FormatDuration(delay), "retry_in", wait.Round(time.Millisecond))
		if err := sleepCtx(ctx, wait); err != nil {
			return Grant{}, err
		}
		waitIndex = 0
	}
}

func describeHolder(pair *api.KVPair) string {
	switch {
	case pair == nil:
		return "deleted"
	case pair.Session == "":
		return "released"
	default:
		return "held by session " + pair.Session
	}
}

func (m *mutex) Watch(ctx context.Context, s *Session, out chan<- Observation) {
	kv := cmp.Or(m.watchC, m.c).KV()
	if m.lock.HandsOff() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.followQueue(ctx, kv)
		}()
		defer func() { <-done }()
	}
	var (
		index    = m.acquired
		failures int
	)
	for {
		sent := time.Now()
		pair, meta, err := kv.Get(m.lock.Key, (&api.QueryOptions{RequireConsistent: true, WaitIndex: index, WaitTime: watchWaitTime}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if !reportReadFailure(ctx, out, s, sent, err, "watch lock key "+m.lock.Key, failures) {
				return
			}
			index = 0
			continue
		}
		failures = 0
		if pair == nil || pair.Session != s.ID {
			send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyLost, At: sent, Detail: "key " + m.lock.Key + " is " + describeHolder(pair)})
			return
		}
		if !send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyHeld, At: sent}) {
			return
		}
		index = NextIndex(index, meta.LastIndex)
	}
}

func (m *mutex) Release(ctx context.Context, s *Session, holder []byte) (bool, error) {
	// Flags must be sent again: a release without them would set the key's
	// flags to 0, and api.Lock refuses a key with other flags.
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	if m.lock.HandsOff() && m.handOff(ctx, s, holder) {
		return true, nil
	}
	released, _, err := m.c.KV().Release(m.pair(s, holder), (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, consul.Classify("release lock key "+m.lock.Key, err)
	}
	return released, nil
}
