package lockproto

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// HoldOptions describe a hold: which lock, with which session, and how
// long the holder needs to stop once the lock is lost.
type HoldOptions struct {
	Lock        lockmodel.Lock           // normalised
	Profile     lockmodel.SessionProfile // defaults applied
	SessionName string
	// Grace is how long the holder needs, after Lost, to stop what it
	// does under the lock; the stop rule decides loss that much earlier.
	Grace time.Duration
	// Value gives the value to write at acquisition.
	Value func() []byte
	Log   *slog.Logger
}

// Hold is a lock held by a session of its own, for a holder that has no
// command to run (the controller's leader election): the session is
// renewed, the key watched, and the loss judge (the runner's, with the same
// stop rule) closes Lost when the holder must stop.
type Hold struct {
	Session *Session
	Grant   Grant

	c      *consul.Client
	opts   HoldOptions
	proto  Protocol
	cancel context.CancelFunc
	wg     sync.WaitGroup

	lost   chan struct{}
	reason string // set before lost is closed
}

// AcquireHold creates a session and waits until it holds the lock. It
// returns ctx's error when ctx ends first, and ErrSessionInvalid when the
// session ends while waiting; either way the session is destroyed, and
// the caller may start over.
func AcquireHold(ctx context.Context, c *consul.Client, o HoldOptions) (*Hold, error) {
	rule := lockmodel.NewStopRule(o.Profile, o.Grace)
	if problem := rule.Problem("its grace"); problem != "" {
		o.Log.Warn("this holder cannot be sure to stop before another takes over", "key", o.Lock.Key, "detail", problem)
	}
	s, err := CreateSession(ctx, c, o.SessionName, "", o.Profile)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &Hold{Session: s, c: c, opts: o, proto: New(c, o.Lock, o.Profile.LockDelay, o.Log), cancel: cancel, lost: make(chan struct{})}
	obs := make(chan Observation, 16)
	h.goFn(wctx, func(ctx context.Context) { RenewLoop(ctx, c, s.ID, rule.RenewEvery, rule.RenewTimeout, obs) })

	type result struct {
		g   Grant
		err error
	}
	acqCtx, acqCancel := context.WithCancel(ctx)
	defer acqCancel()
	done := make(chan result, 1)
	go func() {
		g, err := h.proto.Acquire(acqCtx, s, o.Value)
		done <- result{g, err}
	}()
	judge := NewLossJudge(rule, s.Created)
	for {
		select {
		case r := <-done:
			if r.err == nil {
				if v := judge.Check(time.Now()); v.Lost {
					r.err = errors.New(v.Reason)
				}
			}
			if r.err != nil {
				h.end(context.WithoutCancel(ctx), false)
				return nil, r.err
			}
			h.Grant = r.g
			h.goFn(wctx, func(ctx context.Context) { h.proto.Watch(ctx, s, obs) })
			h.goFn(wctx, func(ctx context.Context) { h.judge(ctx, judge, obs) })
			return h, nil
		case ob := <-obs:
			judge.Observe(ob)
			if ob.Kind == ObsSessionGone {
				acqCancel()
				<-done
				h.end(context.WithoutCancel(ctx), false)
				return nil, ErrSessionInvalid
			}
		}
	}
}

func (h *Hold) goFn(ctx context.Context, f func(ctx context.Context)) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f(ctx)
	}()
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
			if o.Kind == ObsRenewFailed || o.Kind == ObsReadFailed {
				h.opts.Log.Warn("request to the cluster failed", "key", h.opts.Lock.Key, "observed", o.Kind.String(), "error", o.Detail,
					"lost_if_no_renewal_by", j.Deadline().Format(time.RFC3339Nano))
			}
			v = j.Observe(o)
		case <-deadline.C:
			v = j.Check(time.Now())
		}
		if v.Lost {
			h.reason = v.Reason
			close(h.lost)
			return
		}
		deadline.Reset(max(time.Until(j.Deadline()), 0) + time.Millisecond)
	}
}

// Lost is closed when the lock is lost; Reason says why.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

// Reason says why the lock was lost ("" before Lost is closed).
func (h *Hold) Reason() string {
	select {
	case <-h.lost:
		return h.reason
	default:
		return ""
	}
}

// Release stops renewing and watching, releases the lock if the session
// still holds it (a release sets no lock-delay, so the next holder starts
// at once), then destroys the session. Each step is bounded by
// CleanupTimeout; failures are logged, and the session then ends by TTL.
func (h *Hold) Release(ctx context.Context) {
	h.end(ctx, true)
}

func (h *Hold) end(ctx context.Context, release bool) {
	h.cancel()
	h.wg.Wait()
	log := h.opts.Log.With("key", h.opts.Lock.Key, "session", h.Session.ID)
	if release {
		if _, err := h.proto.Release(ctx, h.Session, h.opts.Value()); err != nil {
			log.Warn("release failed; the lock frees when the session ends", "error", err.Error())
		}
	}
	if err := DestroySession(ctx, h.c, h.Session.ID); err != nil {
		log.Warn("session destroy failed; Consul invalidates it after about 2 x TTL", "error", err.Error())
	}
}
