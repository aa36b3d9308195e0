package lockproto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	// watchC, when set, is the client Watch uses (Settings.WatchClient).
	watchC *consul.Client
	// holderSeen is the last session seen holding the key (race), for
	// PlaceInQueue, which leaves the holder's own entry out of the queue.
	holderSeen string
	// queueSeen is the waiter queue as last listed while the lock is held
	// (followQueue, waiters = "handoff"), so that the release does not
	// wait for a listing.
	queueSeen atomic.Pointer[api.KVPairs]
	// clock dates the hand-off (Settings.Clock).
	clock lockmodel.Clock
	// try: a race returns ErrLocked when it sees the key held by another
	// session (Settings.Try).
	try bool
	// blockingKey: every acquisition reads it (Settings.BlockingKey); "" for
	// none.
	blockingKey string
	// blocked: the acquisition found blockingKey; the release then hands
	// nothing over (the next in line would find it too).
	blocked bool
}

func (m *mutex) Key() string { return m.lock.Key }

func (m *mutex) ownerKey(*Session) string { return m.lock.Key }

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
	// A lock handed to this waiter is taken from this read (handedOver), so
	// with waiters = "handoff" it must be the leader's confirmed view.
	r := &racer{m: m, s: s, delays: map[string]time.Duration{}, consistent: m.lock.HandsOff() && entry != ""}
	r.f = consul.Follower{Wait: acquireWaitTime, Consistent: r.consistent}
	for {
		pair, meta, err := m.c.KV().Get(m.lock.Key, r.f.Options(ctx))
		if err != nil {
			if werr := r.fail(ctx, "read lock key", err); werr != nil {
				return Grant{}, werr
			}
			continue
		}
		r.f.Answered(meta.LastIndex)
		if pair != nil {
			if err := lockmodel.CheckCompatible(m.lock, pair.Flags, pair.Value); err != nil {
				return Grant{}, err
			}
		}
		switch {
		case pair != nil && pair.Session == s.ID && r.consistent:
			return m.handedOver(ctx, pair)
		case pair != nil && pair.Session == s.ID:
			// An earlier lock op succeeded but its answer was lost: lock
			// again below (the holder may) to learn the token.
		case pair != nil && pair.Session != "" && m.try && entry == "":
			return Grant{}, lockedBy(pair)
		case pair != nil && pair.Session != "":
			r.heldByOther(ctx, pair)
			continue
		}
		if r.freedAt.IsZero() && r.holderSeen != "" {
			r.freedAt = time.Now()
		}
		if g, won, err := r.attempt(ctx, holder, &entry, meta.LastIndex); won || err != nil {
			return g, err
		}
	}
}

// lockedBy is ErrLocked naming the session that holds pair.
func lockedBy(pair *api.KVPair) error {
	return fmt.Errorf("%w (session %s)", ErrLocked, pair.Session)
}

// racer is one race for the mutex key: what the waiting has learnt.
type racer struct {
	m          *mutex
	s          *Session
	consistent bool // read the key consistently (a hand-over is taken from the read)
	f          consul.Follower
	holderSeen string                   // the last session seen holding the key
	delays     map[string]time.Duration // the lock-delays of the holders seen
	freedAt    time.Time                // when the key was seen to go free
	retries    int                      // lock-delay retries since then
}

// fail waits out a transient error (nil: read again from index 0) or
// returns the error that ends the race.
func (r *racer) fail(ctx context.Context, op string, err error) error {
	return waitAfterError(ctx, r.m.log, op+" "+r.m.lock.Key, err, &r.f)
}

// heldByOther: pair, the follower's last answer, is held by another
// session; the next read blocks until it changes.
func (r *racer) heldByOther(ctx context.Context, pair *api.KVPair) {
	if pair.Session != r.holderSeen {
		r.holderSeen = pair.Session
		r.m.holderSeen = pair.Session
		if _, ok := r.delays[pair.Session]; !ok {
			// A runner's value carries its lock-delay; another holder's
			// (consul lock) is read from its session.
			if d, ok := lockmodel.HolderLockDelay(pair.Value); ok {
				r.delays[pair.Session] = d
			} else if d, ok := sessionLockDelay(ctx, r.m.c, pair.Session); ok {
				r.delays[pair.Session] = d
			}
		}
		r.m.log.Info("waiting for the lock", "holder_session", pair.Session, "holder", string(pair.Value))
	}
	r.freedAt, r.retries = time.Time{}, 0
}

// attempt runs one lock op on the key seen free at index seen. won is true
// with the grant when the session holds the lock; an error ends the race;
// otherwise the race reads again.
func (r *racer) attempt(ctx context.Context, holder func() []byte, entry *string, seen uint64) (g Grant, won bool, err error) {
	m := r.m
	acquired, ok, err := m.lockTxn(ctx, m.pair(r.s, lockmodel.WithLockDelay(holder(), m.declaredDelay)), entry)
	switch {
	case errors.Is(err, ErrBlocked): // taken: the holder gives it up
		m.acquired, m.blocked = acquired.ModifyIndex, true
		return Grant{FencingToken: acquired.ModifyIndex, LockIndex: acquired.LockIndex, Seen: seen}, false, err
	case errors.Is(err, ErrSessionInvalid):
		return Grant{}, false, err
	case err != nil:
		return Grant{}, false, r.fail(ctx, "acquire lock key", err)
	case ok:
		m.acquired = acquired.ModifyIndex
		return Grant{FencingToken: acquired.ModifyIndex, LockIndex: acquired.LockIndex, Seen: seen}, true, nil
	}
	// Refused: another contender was first, or the key is in the
	// lock-delay of its previous holder's session.
	pair, meta, err := m.c.KV().Get(m.lock.Key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	switch {
	case err != nil:
		return Grant{}, false, r.fail(ctx, "read lock key", err)
	case pair != nil && pair.Session == r.s.ID && r.consistent:
		g, err := m.handedOver(ctx, pair)
		return g, err == nil, err
	case pair != nil && pair.Session == r.s.ID:
		r.f.Reset() // ours after all (an answer lost): lock again for the token
	case pair != nil && pair.Session != "" && m.try && *entry == "":
		return Grant{}, false, lockedBy(pair)
	case pair != nil && pair.Session != "":
		// Another contender was first: wait on it from this read, not
		// from a second read of the same state.
		r.f.Answered(meta.LastIndex)
		r.heldByOther(ctx, pair)
	default:
		return Grant{}, false, r.waitLockDelay(ctx)
	}
	return Grant{}, false, nil
}

// waitLockDelay waits until the lock-delay of the previous holder can have
// passed (lockDelayWait), then has the race read again.
func (r *racer) waitLockDelay(ctx context.Context) error {
	delay, known := r.delays[r.holderSeen]
	if !known {
		delay = r.m.declaredDelay
	}
	wait := lockDelayWait(r.freedAt, delay, r.retries, time.Now())
	r.retries++
	r.m.log.Info("lock key is in its lock-delay; acquiring again when it can have passed",
		"previous_session", r.holderSeen, "lock_delay", lockmodel.FormatDuration(delay), "retry_in", wait.Round(time.Millisecond))
	r.f.Reset()
	return consul.Sleep(ctx, wait)
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
	f := &consul.Follower{Wait: watchWaitTime, Consistent: true}
	f.From(m.acquired)
	var sent time.Time
	_ = consul.Follow(ctx, f, func(o *api.QueryOptions) (*api.KVPair, *api.QueryMeta, error) {
		sent = time.Now()
		return kv.Get(m.lock.Key, o)
	}, func(pair *api.KVPair, err error) bool {
		switch {
		case err != nil:
			return reportReadFailure(ctx, out, s, sent, err, "watch lock key "+m.lock.Key)
		case pair == nil || pair.Session != s.ID:
			send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyLost, At: sent, Detail: "key " + m.lock.Key + " is " + describeHolder(pair)})
			return false
		}
		return send(ctx, out, Observation{Session: s.ID, Kind: ObsKeyHeld, At: sent})
	})
}

func (m *mutex) Release(ctx context.Context, s *Session, holder []byte) (bool, error) {
	// Flags must be sent again: a release without them would set the key's
	// flags to 0, and api.Lock refuses a key with other flags.
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	if m.lock.HandsOff() && !m.blocked && m.handOff(ctx, s, holder) {
		return true, nil
	}
	released, _, err := m.c.KV().Release(m.pair(s, holder), (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, consul.Classify("release lock key "+m.lock.Key, err)
	}
	return released, nil
}
