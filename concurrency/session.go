package concurrency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Session is a Consul session that holds locks (etcd's concurrency.Session):
// created as a profile declares or with an explicit TTL and lock-delay, and
// renewed until Close. Done is closed when the session is lost (Consul
// ended it, or renewals failed for longer than the stop rule allows),
// closed or orphaned; every hold through it ends then too.
type Session struct {
	c       *consul.Client
	s       *lockproto.Session
	profile lockmodel.Profile
	cfg     config
	rule    lockmodel.StopRule

	// ctx ends, with ErrSessionLost, ErrSessionClosed or
	// ErrSessionOrphaned as its cause, when the session is lost, closed or
	// orphaned.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// stopRenew ends the renewer and the judge (Close, or the judge
	// itself once the session counts as lost).
	stopRenew context.CancelFunc
	wg        sync.WaitGroup
	contact   atomic.Pointer[time.Time]
	// obs carries the renewer's observations (and, per hold, the watch's)
	// to the judge; jmu guards the judge j, which the acquisition also
	// asks; poke wakes the judge when a hold starts.
	obs  chan lockproto.Observation
	jmu  sync.Mutex
	j    *lockproto.LossJudge
	poke chan struct{}

	mu    sync.Mutex
	holds map[*hold]struct{}
}

// NewSession creates a session on the agent client talks to: from the
// declared profile (WithProfile), or with WithTTL, WithLockDelay and
// WithRenewEvery (defaults 15s, 15s and a third of the TTL). The session
// is read back and checked against what was asked (a session Consul
// changed is destroyed and reported). The token needs session write on the agent's node, and key
// read on the profile's record with WithProfile.
func NewSession(ctx context.Context, client *api.Client, opts ...Option) (*Session, error) {
	cfg := newConfig(opts)
	c := consul.FromAPI(client)
	p, err := cfg.sessionProfile(ctx, c)
	if err != nil {
		return nil, err
	}
	return createSession(ctx, c, p, cfg, "consullock concurrency")
}

// sessionProfile is the declared profile (WithProfile), resolved by its
// decoder, or the explicit settings, resolved and validated.
func (cfg config) sessionProfile(ctx context.Context, c *consul.Client) (lockmodel.Profile, error) {
	if cfg.profile != "" {
		if cfg.ttl != 0 || cfg.lockDelay != nil || cfg.renewEvery != 0 {
			return lockmodel.Profile{}, errors.New("concurrency: WithProfile takes the TTL, lock-delay and renewal interval from the profile; drop WithTTL, WithLockDelay and WithRenewEvery")
		}
		rec, found, err := store.New(c).Registry(cfg.registry).Get(ctx, lockmodel.KindSessionDefaults, cfg.profile)
		if err != nil {
			return lockmodel.Profile{}, fmt.Errorf("read session profile %q: %w", cfg.profile, err)
		}
		if !found {
			return lockmodel.Profile{}, fmt.Errorf("session profile %q is %w: there is no record at %s", cfg.profile, lockproto.ErrNotDeclared, rec.Key)
		}
		p, err := record.DecodeSessionProfileRecord(rec.Value)
		if err != nil {
			return p, fmt.Errorf("the session profile at %s cannot be used: %w", rec.Key, err)
		}
		return p, nil
	}
	p := lockmodel.SessionProfile{Name: "explicit", TTL: cfg.ttl, LockDelay: lockmodel.DefaultLockDelay}
	if p.TTL == 0 {
		p.TTL = lockmodel.DefaultSessionTTL
	}
	if cfg.lockDelay != nil {
		p.LockDelay = *cfg.lockDelay
	}
	r := p.Resolve()
	if err := r.Validate(); err != nil {
		return r, err
	}
	// A declared profile's renew_every is below ttl/2; WithRenewEvery
	// also allows ttl/2, the interval of Consul's api.Lock (the stop rule
	// still judges whether a holder can stop in time).
	if d := cfg.renewEvery; d != 0 {
		if d < 0 || d > r.TTL/2 {
			return r, fmt.Errorf("concurrency: WithRenewEvery(%s): want more than 0s and at most half the TTL (%s)",
				lockmodel.FormatDuration(d), lockmodel.FormatDuration(r.TTL/2))
		}
		r.RenewEvery = d
	}
	return r, nil
}

// createSession creates a session from the resolved profile p on the
// agent's node, named by WithSessionName or else byDefault, and starts
// renewing and judging it.
func createSession(ctx context.Context, c *consul.Client, p lockmodel.Profile, cfg config, byDefault string) (*Session, error) {
	name := cfg.sessionName
	if name == "" {
		name = byDefault
	}
	s, err := lockproto.CreateSession(ctx, c, name, "", p)
	if err != nil {
		return nil, err
	}
	return startSession(c, s, p, cfg), nil
}

func startSession(c *consul.Client, s *lockproto.Session, p lockmodel.Profile, cfg config) *Session {
	ctx, cancel := context.WithCancelCause(context.Background())
	rctx, stop := context.WithCancel(ctx)
	rule := lockmodel.NewStopRule(p, cfg.grace)
	ss := &Session{c: c, s: s, profile: p, cfg: cfg, rule: rule,
		ctx: ctx, cancel: cancel, stopRenew: stop, holds: map[*hold]struct{}{},
		obs: make(chan lockproto.Observation, 16), j: lockproto.NewLossJudge(rule, s.Created), poke: make(chan struct{}, 1)}
	if v := rule.Verdict(); v != "" && !cfg.ruleWarned {
		cfg.log.Warn("holders cut off from Consul cannot stop in time", "verdict", v, "fix", rule.Fix())
	}
	ss.storeContact(s.Created)
	ss.wg.Add(2)
	go func() {
		defer ss.wg.Done()
		lockproto.RenewLoop(rctx, c, s.ID, rule.RenewEvery, rule.RenewTimeout, ss.obs)
	}()
	go func() {
		defer ss.wg.Done()
		ss.judge(rctx)
	}()
	return ss
}

// judge applies the loss judge (the stop rule) to the renewals (and, per
// hold, the watch) and to the clock. The session counts as lost once the
// judge says so: its context ends. Per hold (the door's), the hold is
// lost instead, and only while held: a session without contact for too
// long while waiting is judged when the lock is acquired (LostError), and
// one Consul ended while waiting ends the session's context with an
// error wrapping lockproto.ErrSessionInvalid.
func (s *Session) judge(ctx context.Context) {
	deadline := time.NewTimer(s.untilCheck())
	defer deadline.Stop()
	for {
		var v lockproto.Verdict
		select {
		case <-ctx.Done():
			return
		case o := <-s.obs:
			held := s.holding()
			v = s.observe(o, held)
			if s.cfg.perHold && !held && o.Kind == lockproto.ObsSessionGone {
				s.cancel(fmt.Errorf("%w: %w", ErrSessionLost, lockproto.SessionGone(o.Detail)))
				s.stopRenew()
				return
			}
		case <-deadline.C:
			v = s.check()
		case <-s.poke:
			v = s.check()
		}
		if v.Lost {
			s.lose(v)
			return
		}
		deadline.Reset(s.untilCheck())
	}
}

// observe hands o to the judge and reports it: to the door's observer, or
// else a failed renewal to the log.
func (s *Session) observe(o lockproto.Observation, held bool) lockproto.Verdict {
	s.jmu.Lock()
	v := s.j.Observe(o)
	contact, deadline := s.j.LastContact(), s.j.Deadline()
	s.jmu.Unlock()
	s.storeContact(contact)
	switch {
	case s.cfg.observed != nil:
		s.cfg.observed(o, held, deadline)
	case o.Kind == lockproto.ObsRenewFailed:
		s.cfg.log.Warn("session renewal failed", "session", s.s.ID, "error", o.Detail,
			"lost_if_no_renewal_by", deadline.Format(time.RFC3339Nano))
	}
	if s.cfg.perHold && !held && v.Lost && o.Kind != lockproto.ObsSessionGone {
		return lockproto.Verdict{} // nothing held to lose
	}
	return v
}

// check is the judge's verdict at the contact deadline (per hold, only
// while the hold is held).
func (s *Session) check() lockproto.Verdict {
	if s.cfg.perHold && !s.holding() {
		return lockproto.Verdict{}
	}
	return s.verdictNow()
}

// verdictNow is the judge's verdict now.
func (s *Session) verdictNow() lockproto.Verdict {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	return s.j.Check(time.Now())
}

// untilCheck is how long until the contact deadline. Per hold, while
// nothing is held, the judge waits for a hold's start (poke) instead.
func (s *Session) untilCheck() time.Duration {
	if s.cfg.perHold && !s.holding() {
		return time.Hour
	}
	s.jmu.Lock()
	defer s.jmu.Unlock()
	return max(time.Until(s.j.Deadline()), 0) + time.Millisecond
}

// lose acts on the judge's loss verdict: per hold, the hold is lost (its
// holder ends the session); otherwise the session is, and renewing a
// session counted lost would keep its locks from everyone else until
// Close: it is left to end by TTL.
func (s *Session) lose(v lockproto.Verdict) {
	if s.cfg.perHold {
		for _, h := range s.tracked() {
			h.endLost(v.Reason)
		}
		return
	}
	s.cfg.log.Warn("session lost", "session", s.s.ID, "reason", v.Reason)
	s.cancel(fmt.Errorf("%w: %s", ErrSessionLost, v.Reason))
	s.stopRenew()
}

// holding says whether a hold through the session holds its lock now.
func (s *Session) holding() bool {
	for _, h := range s.tracked() {
		if h.isHeld() {
			return true
		}
	}
	return false
}

func (s *Session) storeContact(t time.Time) { s.contact.Store(&t) }

// lastContact is the send time of the latest renewal Consul answered.
func (s *Session) lastContact() time.Time { return *s.contact.Load() }

// ID is the Consul session ID.
func (s *Session) ID() string { return s.s.ID }

// Done is closed when the session is lost, closed or orphaned (etcd's
// Session.Done); Err says which.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err is nil while the session lives, then an error wrapping
// ErrSessionLost (with the reason), ErrSessionClosed or
// ErrSessionOrphaned.
func (s *Session) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Close releases every lock still held through the session (a release
// sets no lock-delay, so the next holder starts at once), stops renewing
// and destroys the session. A session already gone is not an error.
func (s *Session) Close(ctx context.Context) error { return s.end(ctx, true) }

// end stops the holds through the session, releasing their locks with
// release (before it waits for anything: the release is on the
// hand-over's path), stops renewing and destroys the session.
func (s *Session) end(ctx context.Context, release bool) error {
	var errs []error
	for _, h := range s.tracked() {
		if release {
			errs = append(errs, h.unlock(ctx))
		} else {
			h.stop()
		}
	}
	s.cancel(ErrSessionClosed)
	s.stopRenew()
	s.wg.Wait()
	if err := lockproto.DestroySession(ctx, s.c, s.s.ID); err != nil {
		errs = append(errs, fmt.Errorf("destroy the session (Consul invalidates it after about 2 x TTL): %w", err))
	} else {
		s.cfg.log.Info("session destroyed", "session", s.s.ID)
	}
	return errors.Join(errs...)
}

// Orphan stops renewing the session and watching its locks, and neither
// releases the locks nor destroys the session (etcd's Session.Orphan): they
// live on until the session's TTL runs out, or until another process that
// renews the session (Consul's /v1/session/renew) ends it, when handing a
// held lock over to that process. Done is closed and Err wraps
// ErrSessionOrphaned, and so is every hold's Done; Close still releases the
// locks and destroys the session.
func (s *Session) Orphan() {
	s.cancel(ErrSessionOrphaned)
	s.stopRenew()
	s.wg.Wait()
	for _, h := range s.tracked() {
		h.orphan()
	}
}

// tracked are the holds through the session that are held, or were lost
// and not yet unlocked.
func (s *Session) tracked() []*hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	holds := make([]*hold, 0, len(s.holds))
	for h := range s.holds {
		holds = append(holds, h)
	}
	return holds
}

func (s *Session) track(h *hold, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.holds[h] = struct{}{}
	} else {
		delete(s.holds, h)
	}
}

// holderValue is what a hold writes into its key: WithHolderValue's, or
// who holds it and since when, as `consullock run` writes it (the
// controller measures max_hold from Started).
func (s *Session) holderValue(lock string) []byte {
	if s.cfg.holderValue != nil {
		return s.cfg.holderValue()
	}
	b, _ := json.Marshal(lockmodel.HolderValue{Lock: lock, Node: s.s.Node, PID: os.Getpid(), Started: time.Now().UTC()}) // plain struct
	return b
}
