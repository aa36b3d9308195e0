package lockproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// holdConfig is what a hold's options set (HoldOption).
type holdConfig struct {
	sessionName string
	session     *Session
	grace       time.Duration
	value       func() []byte
	clock       lockmodel.Clock
	log         *slog.Logger
	ruleWarned  bool
	try         bool
	blockingKey string
	watchClient *consul.Client
	observed    func(o Observation, held bool, lostIfNoRenewalBy time.Time)
}

// HoldOption is one setting of a hold (etcd concurrency's options): the
// lock and its profile are AcquireHold's arguments, everything else an
// option.
type HoldOption func(*holdConfig)

// WithSessionName names the session AcquireHold creates (not one given
// WithSession).
func WithSessionName(name string) HoldOption { return func(o *holdConfig) { o.sessionName = name } }

// WithSession has the hold use s, a session the caller created from the
// hold's profile (so that its errors came with the caller's other setup
// errors), instead of creating one; the hold owns it from then on.
func WithSession(s *Session) HoldOption { return func(o *holdConfig) { o.session = s } }

// WithGrace is how long the holder needs, after Lost, to stop what it
// does under the lock; the stop rule decides loss that much earlier.
func WithGrace(d time.Duration) HoldOption { return func(o *holdConfig) { o.grace = d } }

// WithValue gives the value to write at acquisition. It is called for
// every attempt; the winning attempt's value is written again at release.
// Without it the key's value is empty.
func WithValue(f func() []byte) HoldOption { return func(o *holdConfig) { o.value = f } }

// WithClock is the wall clock of what the hold writes for other processes
// to compare with their own clocks: the hand-off's started (waiters =
// "handoff"). Without it, the system's.
func WithClock(c lockmodel.Clock) HoldOption { return func(o *holdConfig) { o.clock = c } }

// WithLogger gets the hold's events; the hold adds the key to each line.
// Without it they are discarded.
func WithLogger(l *slog.Logger) HoldOption { return func(o *holdConfig) { o.log = l } }

// WithRuleWarned: the caller has already warned that the stop rule is not
// feasible (the runner, with its own numbers); the hold does not again.
func WithRuleWarned() HoldOption { return func(o *holdConfig) { o.ruleWarned = true } }

// WithTry has the acquisition of a mutex whose waiters race return
// ErrLocked as soon as it sees the key held by another session, on the
// first read or after a lock op that lost, instead of waiting with its
// session (etcd concurrency's TryLock). A key free but in its lock-delay
// is still waited out. Queued mutexes and semaphores wait as without it.
func WithTry() HoldOption { return func(o *holdConfig) { o.try = true } }

// WithBlockingKey has every acquisition read key at the acquisition's own
// Raft index: the lock op's (or semaphore admission's) transaction also
// reads it (a get-tree op, which key read allows; a check-not-exists op
// would need key write), so no read follows the acquisition. When key
// exists, AcquireHold gives the lock up and returns ErrBlocked. A lock
// handed over (waiters = "handoff") is taken in the previous holder's
// transaction: its new holder reads key consistently once. The token
// needs read on key.
func WithBlockingKey(key string) HoldOption { return func(o *holdConfig) { o.blockingKey = key } }

// WithWatchClient has the hold's watch use c, a client with connections of
// its own (the same settings as the hold's): the watch's blocking query
// keeps a connection busy while the lock is held, and the release then
// goes over the connection the acquisition left idle instead of dialling
// one (a TCP, and with TLS a TLS, handshake on the hand-over's path).
func WithWatchClient(c *consul.Client) HoldOption { return func(o *holdConfig) { o.watchClient = c } }

// WithObserver has f called with every observation of the renewer and the
// watcher, whether the lock was held then, and the time the lock counts as
// lost if no renewal succeeds before. It replaces the hold's own logging
// of failed requests (for a caller that logs them its own way) and must
// not block.
func WithObserver(f func(o Observation, held bool, lostIfNoRenewalBy time.Time)) HoldOption {
	return func(o *holdConfig) { o.observed = f }
}

// Hold is a lock held by a session of its own: the session is renewed,
// the key watched, and the loss judge (with the stop rule for the holder's
// grace) closes Lost when the holder must stop. `consullock run` holds its
// lock with it; the public library (package concurrency), which the
// controller's leader election and the ephemeral lock use, holds through
// its own Session with the same stop rule, loss judge and protocol.
type Hold struct {
	Session *Session
	Grant   Grant
	// Value is what the winning acquisition attempt wrote; Release writes
	// it again.
	Value []byte

	c      *consul.Client
	opts   holdConfig
	log    *slog.Logger
	proto  Protocol
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// contact is the judge's last confirmed contact, kept for LastContact
	// while the judge runs in its goroutine: a time.Time with its
	// monotonic reading, so that deadlines counted from it (the guard's
	// kill-by, the outcome's) do not move when the wall clock is stepped.
	contact atomic.Pointer[time.Time]

	lost   chan struct{}
	reason string // set before lost is closed
	// ending is set when the holder gives the lock up (end): what the
	// judge sees from then on is not a loss.
	ending atomic.Bool
}

// LostError is AcquireHold's error when the loss judge finds the lock lost
// the moment it was acquired (no renewal for too long while waiting). Its
// text is the judge's reason.
type LostError struct{ Reason string }

func (e *LostError) Error() string { return e.Reason }

// AcquireHold creates a session from profile (or takes WithSession's) and waits until it holds lock (normalised). It returns ctx's error when ctx ends first, an error
// wrapping ErrSessionInvalid when the session ends while waiting, and a
// *LostError when the lock was lost by the time it was acquired. On every
// error the lock is released if the session got it (unless the session is
// gone) and the session destroyed, and the caller may start over.
func AcquireHold(ctx context.Context, c *consul.Client, lock lockmodel.Lock, profile lockmodel.Profile, opts ...HoldOption) (*Hold, error) {
	o := holdConfig{value: func() []byte { return nil }, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	log := o.log.With("key", lock.Key)
	rule := lockmodel.NewStopRule(profile, o.grace)
	if verdict := rule.Verdict(); verdict != "" && !o.ruleWarned {
		log.Warn("holders cut off from Consul cannot stop in time", "verdict", verdict, "fix", rule.Fix())
	}
	s := o.session
	if s == nil {
		var err error
		if s, err = CreateSession(ctx, c, o.sessionName, "", profile); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &Hold{Session: s, c: c, opts: o, log: log, proto: New(c, lock, profile.LockDelay, log), cancel: cancel, lost: make(chan struct{})}
	if m, ok := h.proto.(*mutex); ok {
		m.clock, m.try, m.blockingKey = o.clock, o.try && !lock.Queued(), o.blockingKey
	}
	if m, ok := h.proto.(*semaphore); ok {
		m.blockingKey = o.blockingKey
	}
	if w, ok := h.proto.(watchVia); ok && o.watchClient != nil {
		w.watchVia(o.watchClient)
	}
	obs := make(chan Observation, 16)
	h.goFn(wctx, func(ctx context.Context) { RenewLoop(ctx, c, s.ID, rule.RenewEvery, rule.RenewTimeout, obs) })

	acqCtx, acqCancel := context.WithCancel(ctx)
	defer acqCancel()
	done := make(chan error, 1)
	go func() {
		var err error
		h.Grant, err = h.proto.Acquire(acqCtx, s, func() []byte {
			h.Value = o.value()
			return h.Value
		})
		done <- err
	}()
	judge := NewLossJudge(rule, s.Created)
	for {
		select {
		case err := <-done:
			if err == nil {
				if v := judge.Check(time.Now()); v.Lost {
					err = &LostError{Reason: v.Reason}
				}
			}
			h.storeContact(judge.LastContact())
			if h.Grant.Value != nil {
				h.Value = h.Grant.Value // written by the holder that handed the lock over
			}
			if err != nil {
				// Released unless the session cannot hold the key: gone,
				// or seen not holding it (ErrLocked) after its last lock op.
				release := !errors.Is(err, ErrSessionInvalid) && !errors.Is(err, ErrLocked)
				if cerr := h.end(context.WithoutCancel(ctx), release); cerr != nil {
					log.Warn("cleaning up after the acquisition failed", "error", cerr.Error())
				}
				return nil, err
			}
			h.goFn(wctx, func(ctx context.Context) { h.proto.Watch(ctx, s, obs) })
			h.goFn(wctx, func(ctx context.Context) { h.judge(ctx, judge, obs) })
			return h, nil
		case ob := <-obs:
			judge.Observe(ob)
			h.observed(ob, false, judge.Deadline())
			if ob.Kind == ObsSessionGone {
				acqCancel()
				if err := <-done; err != nil { // the session is gone: its error is only detail
					log.Debug("acquisition stopped", "error", err.Error())
				}
				if cerr := h.end(context.WithoutCancel(ctx), false); cerr != nil {
					log.Warn("cleaning up after the session ended", "error", cerr.Error())
				}
				return nil, fmtSessionGone(ob.Detail)
			}
		}
	}
}

func fmtSessionGone(detail string) error {
	if detail == "" {
		return ErrSessionInvalid
	}
	return &sessionGoneError{detail: detail}
}

// sessionGoneError is ErrSessionInvalid with what the renewer saw.
type sessionGoneError struct{ detail string }

func (e *sessionGoneError) Error() string { return ErrSessionInvalid.Error() + " (" + e.detail + ")" }
func (e *sessionGoneError) Unwrap() error { return ErrSessionInvalid }

func (h *Hold) goFn(ctx context.Context, f func(ctx context.Context)) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f(ctx)
	}()
}

// observed hands o to the observer (WithObserver), or else logs a failed request
// while the lock is held.
func (h *Hold) observed(o Observation, held bool, deadline time.Time) {
	if h.opts.observed != nil {
		h.opts.observed(o, held, deadline)
		return
	}
	if held && (o.Kind == ObsRenewFailed || o.Kind == ObsReadFailed) {
		h.log.Warn("request to the cluster failed", "observed", o.Kind.String(), "error", o.Detail,
			"lost_if_no_renewal_by", deadline.Format(time.RFC3339Nano))
	}
}

// judge applies the loss judge to the renewer's and watcher's observations
// and to the clock, and closes lost once the lock is lost. The deadline is
// a timer: a hung agent that never answers is noticed as surely as one
// that refuses.
func (h *Hold) judge(ctx context.Context, j *LossJudge, obs <-chan Observation) {
	deadline := time.NewTimer(time.Until(j.Deadline()) + time.Millisecond)
	defer deadline.Stop()
	for {
		var v Verdict
		select {
		case <-ctx.Done():
			return
		case o := <-obs:
			v = j.Observe(o)
			h.storeContact(j.LastContact())
			h.observed(o, true, j.Deadline())
		case <-deadline.C:
			v = j.Check(time.Now())
		}
		if v.Lost && !h.ending.Load() {
			h.reason = v.Reason
			close(h.lost)
			return
		}
		deadline.Reset(max(time.Until(j.Deadline()), 0) + time.Millisecond)
	}
}

// Done is closed when the lock is lost (etcd's Session.Done); Reason says
// why. The holder must stop what it does under the lock.
func (h *Hold) Done() <-chan struct{} { return h.lost }

// IsOwner is the condition of a write fenced by this hold (etcd's
// Mutex.IsOwner): the session still holds the lock key, or for a
// semaphore its contender key. consul.FencedCAS and the run ledger's
// writes put it in their transactions.
func (h *Hold) IsOwner() store.Fence {
	return store.Fence{Key: h.proto.ownerKey(h.Session), Session: h.Session.ID}
}

// Reason says why the lock was lost ("" before Done is closed).
func (h *Hold) Reason() string {
	select {
	case <-h.lost:
		return h.reason
	default:
		return ""
	}
}

// LastContact is the hold's last confirmed contact with the cluster: the
// send time of the latest renewal Consul answered, while waiting or since
// (the session's creation when none has been answered yet). A holder that
// takes the session over (Orphan) counts its contact deadline from here.
// An acquisition is not contact: it does not restart the session's TTL.
func (h *Hold) LastContact() time.Time {
	if t := h.contact.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

func (h *Hold) storeContact(t time.Time) { h.contact.Store(&t) }

// Unlock stops renewing and watching, releases the lock if the session
// still holds it (a release sets no lock-delay, so the next holder starts
// at once), then destroys the session. Each step is bounded by
// CleanupTimeout; the error joins the steps' failures (the session then
// ends by TTL, and a lock still held frees after its lock-delay).
func (h *Hold) Unlock(ctx context.Context) error {
	return h.end(ctx, true)
}

// Close stops renewing and watching and destroys the session without a
// release of its own (etcd's Session.Close): for a holder whose
// transaction already released the lock (the runner's
// FinishRunAndRelease), so that nothing is sent twice. A lock the session
// still holds frees after its lock-delay.
func (h *Hold) Close(ctx context.Context) error {
	return h.end(ctx, false)
}

func (h *Hold) end(ctx context.Context, release bool) error {
	// The release is on the hand-over's path and goes before the renewer
	// and the watcher are waited for (they only stop); ending keeps the
	// judge from calling the release a loss.
	h.ending.Store(true)
	h.cancel()
	log := h.log.With("session", h.Session.ID)
	var errs []error
	if release {
		value := h.Value
		if value == nil {
			value = h.opts.value()
		}
		switch released, err := h.proto.Release(ctx, h.Session, value); {
		case err != nil:
			errs = append(errs, fmt.Errorf("release the lock (it frees when the session ends): %w", err))
		case released:
			log.Info("lock released")
		default:
			log.Debug("nothing to release: the session did not hold the lock")
		}
	}
	h.wg.Wait()
	if err := DestroySession(ctx, h.c, h.Session.ID); err != nil {
		errs = append(errs, fmt.Errorf("destroy the session (Consul invalidates it after about 2 x TTL): %w", err))
	} else {
		log.Info("session destroyed")
	}
	return errors.Join(errs...)
}
