package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// hold is what a Mutex and a Semaphore share: a lock acquired through a
// session with lockproto's protocol, watched until it is unlocked or lost.
// One goroutine locks and unlocks; Done, Token and Err may be called from
// any.
type hold struct {
	s     *Session
	lock  lockmodel.Lock // normalised
	proto lockproto.Protocol

	mu    sync.Mutex
	held  bool
	grant lockproto.Grant
	value []byte
	done  chan struct{} // closed when the current hold ends
	lost  error         // why it ended, when it was lost
	// lostC is closed when the current hold ends lost (and only then),
	// reason is the judge's reason (per hold).
	lostC  chan struct{}
	reason string
	// ending is set by unlock (or RunOnce's release transaction): what
	// the watch sees from then on is not a loss.
	ending    bool
	stopWatch context.CancelFunc
	watching  sync.WaitGroup
}

func newHold(s *Session, l lockmodel.Lock, set lockproto.Settings) (*hold, error) {
	n, err := l.Normalize()
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	close(done) // not held
	return &hold{s: s, lock: n, proto: lockproto.New(s.c, n, s.profile.LockDelay, s.cfg.log, set), done: done}, nil
}

// acquire waits until the session holds the lock (try: a mutex held by
// another session is ErrLocked at once).
func (h *hold) acquire(ctx context.Context, try bool) error {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held {
		return fmt.Errorf("concurrency: %s is already held by this session", h.lock.Key)
	}
	if err := h.s.Err(); err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.s.ctx, cancel)()
	var value []byte
	holder := func() []byte {
		value = h.s.holderValue(h.lock.Name)
		return value
	}
	var g lockproto.Grant
	var err error
	if try {
		g, err = h.tryOnce(actx, holder)
	} else {
		g, err = h.proto.Acquire(actx, h.s.s, holder)
	}
	if g.Value != nil {
		value = g.Value // handed over (waiters = "handoff"): the previous holder wrote it
	}
	if err == nil && h.s.Err() != nil {
		err = h.s.Err()
	}
	if err == nil && h.s.cfg.perHold {
		if v := h.s.verdictNow(); v.Lost {
			err = &lockproto.LostError{Reason: v.Reason}
		}
	}
	if err != nil {
		return h.failed(ctx, err, value)
	}
	h.start(g, value)
	return nil
}

// failed cleans up after an acquisition that did not end holding: the
// lock op may have committed while its answer was lost, and a semaphore
// contender key exists. It returns err as the caller sees it.
func (h *hold) failed(ctx context.Context, err error, value []byte) error {
	gone := errors.Is(err, lockproto.ErrSessionInvalid) || errors.Is(h.s.Err(), lockproto.ErrSessionInvalid)
	if !gone && !errors.Is(err, ErrLocked) {
		if value == nil {
			value = h.s.holderValue(h.lock.Name)
		}
		if _, rerr := h.proto.Release(context.WithoutCancel(ctx), h.s.s, value); rerr != nil {
			h.s.cfg.log.Warn("cleaning up after the acquisition failed", "key", h.lock.Key, "error", rerr.Error())
		}
	}
	switch {
	case h.s.Err() != nil:
		return h.s.Err()
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, lockproto.ErrSessionInvalid):
		return fmt.Errorf("%w: %w", ErrSessionLost, err)
	}
	return err
}

// tryOnce is TryLock's acquisition of a mutex: one consistent read and,
// when the key is free, one lock op. A key held by another session, or in
// its lock-delay, is ErrLocked.
func (h *hold) tryOnce(ctx context.Context, holder func() []byte) (lockproto.Grant, error) {
	if h.lock.IsSemaphore() || h.lock.Queued() {
		return lockproto.Grant{}, errors.New("concurrency: TryLock needs a mutex whose waiters race (waiters = \"race\")")
	}
	pair, err := store.New(h.s.c).ReadKeyConsistent(ctx, h.lock.Key)
	if err != nil {
		return lockproto.Grant{}, err
	}
	if pair != nil {
		if err := lockmodel.CheckCompatible(h.lock, pair.Flags, pair.Value); err != nil {
			return lockproto.Grant{}, err
		}
		if pair.Session != "" && pair.Session != h.s.s.ID {
			return lockproto.Grant{}, fmt.Errorf("%w: %s is held by session %s", ErrLocked, h.lock.Key, pair.Session)
		}
	}
	// The value tells waiters the holder's lock-delay, as lockproto's
	// acquisition writes it.
	value := lockmodel.WithLockDelay(holder(), h.s.profile.LockDelay)
	op := &api.KVTxnOp{Verb: api.KVLock, Key: h.lock.Key, Value: value, Flags: lockmodel.LockFlagValue, Session: h.s.s.ID}
	ok, resp, err := h.s.c.WriteTxn(ctx, api.TxnOps{{KV: op}})
	if err != nil {
		return lockproto.Grant{}, err
	}
	if !ok {
		switch e := consul.TxnError("lock "+h.lock.Key, resp.Errors); e.Kind {
		case consul.KindHeld, consul.KindLockDelay, consul.KindStaleIndex:
			return lockproto.Grant{}, fmt.Errorf("%w: %v", ErrLocked, e)
		case consul.KindSessionInvalid:
			return lockproto.Grant{}, lockproto.ErrSessionInvalid
		default:
			return lockproto.Grant{}, e
		}
	}
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == h.lock.Key {
			return lockproto.Grant{FencingToken: r.KV.ModifyIndex, LockIndex: r.KV.LockIndex}, nil
		}
	}
	return lockproto.Grant{}, fmt.Errorf("lock %s: the transaction succeeded but did not report the key", h.lock.Key)
}

// start records the acquisition and watches the lock until it is
// unlocked, seen lost, or the session ends. Per hold, the watch reports
// to the session's judge, which decides the loss.
func (h *hold) start(g lockproto.Grant, value []byte) {
	wctx, stop := context.WithCancel(context.Background())
	h.mu.Lock()
	h.held, h.grant, h.value, h.lost, h.ending, h.reason = true, g, value, nil, false, ""
	h.done, h.lostC, h.stopWatch = make(chan struct{}), make(chan struct{}), stop
	h.mu.Unlock()
	h.s.track(h, true)
	obs := h.s.obs
	if !h.s.cfg.perHold {
		obs = make(chan lockproto.Observation, 4)
	}
	h.watching.Add(2)
	go func() {
		defer h.watching.Done()
		h.proto.Watch(wctx, h.s.s, obs)
	}()
	go func() {
		defer h.watching.Done()
		h.follow(wctx, obs)
	}()
	if h.s.cfg.perHold {
		select {
		case h.s.poke <- struct{}{}: // the contact deadline applies from now
		default:
		}
	}
}

// follow ends the hold when the session ends or, unless the session's
// judge decides per hold, when the watch sees the lock lost.
func (h *hold) follow(ctx context.Context, obs <-chan lockproto.Observation) {
	if h.s.cfg.perHold {
		obs = nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.s.ctx.Done():
			h.end(h.s.Err())
			return
		case o := <-obs:
			if o.Kind == lockproto.ObsKeyLost {
				h.s.cfg.log.Warn("lock lost", "key", h.lock.Key, "detail", o.Detail)
				h.end(fmt.Errorf("%w: %s", ErrLockLost, o.Detail))
				return
			}
		}
	}
}

// endLost ends the hold as lost for the judge's reason (per hold).
func (h *hold) endLost(reason string) {
	h.mu.Lock()
	if h.held && !h.ending {
		h.reason = reason
	}
	h.mu.Unlock()
	h.end(fmt.Errorf("%w: %s", ErrLockLost, reason))
}

// end closes Done once the lock is lost (lost non-nil) or given up.
func (h *hold) end(lost error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return
	}
	if !h.ending {
		h.lost = lost
		if lost != nil {
			close(h.lostC)
		}
	}
	h.held = false
	close(h.done)
}

func (h *hold) isHeld() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// stop ends the watch (ending: the caller gives the lock up) and reports
// whether there was a hold to give up: held, or lost since the last
// acquisition (a release is then harmless, and frees a lock that the
// stop rule counted lost while the session may still hold it).
func (h *hold) stop() bool {
	wait, ok := h.stopping()
	if ok {
		wait()
	}
	return ok
}

// stopping is stop without waiting for the watch: wait does.
func (h *hold) stopping() (wait func(), ok bool) {
	h.mu.Lock()
	stopWatch := h.stopWatch
	h.stopWatch, h.ending = nil, true
	h.mu.Unlock()
	if stopWatch == nil {
		return nil, false
	}
	h.end(nil)
	stopWatch()
	return func() {
		h.watching.Wait()
		h.s.track(h, false)
	}, true
}

// orphan ends the watch (Session.Orphan) and keeps the hold's record, so
// that unlock still releases the key.
func (h *hold) orphan() {
	h.mu.Lock()
	stopWatch := h.stopWatch
	h.mu.Unlock()
	if stopWatch != nil {
		stopWatch()
		h.watching.Wait()
	}
}

// unlock releases the lock if the session still holds it (and, for a
// semaphore, deletes its contender key); the session lives on. The
// release goes before the watch is waited for: it is on the hand-over's
// path.
func (h *hold) unlock(ctx context.Context) error {
	h.mu.Lock()
	value := h.value
	h.mu.Unlock()
	wait, ok := h.stopping()
	if !ok {
		return nil
	}
	released, err := h.proto.Release(ctx, h.s.s, value)
	wait()
	switch {
	case err != nil:
		return fmt.Errorf("release %s (it frees when the session ends): %w", h.lock.Key, err)
	case released:
		h.s.cfg.log.Info("lock released", "key", h.lock.Key, "session", h.s.s.ID)
	}
	return nil
}

func (h *hold) doneC() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

func (h *hold) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

func (h *hold) token() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return 0
	}
	return h.grant.FencingToken
}

// fence is the key the session holds while it holds the lock: the lock
// key for a mutex, its contender key for a semaphore.
func (h *hold) fence() store.Fence {
	key := h.lock.Key
	if h.lock.IsSemaphore() {
		key = h.lock.Prefix + "/" + h.s.s.ID
	}
	return store.Fence{Key: key, Session: h.s.s.ID}
}

func (h *hold) isOwner() *api.TxnOp { return &api.TxnOp{KV: h.fence().Op()} }
