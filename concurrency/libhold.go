package concurrency

import (
	"context"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// The module's own holders (`consullock run`, the ephemeral lock) hold a
// declaration they have read through this package's Session and hold
// (internal/libhold).
func init() { libhold.Acquire = acquireHeld }

// held is a libhold.Held: a hold through a session of its own, whose judge
// decides per hold. Its grant, value and loss channel are kept at the
// acquisition, as an orphaned hold reads as not held.
type held struct {
	s     *Session
	h     *hold
	grant lockproto.Grant
	value []byte
	lostC chan struct{}
}

var _ libhold.Held = (*held)(nil)

// acquireHeld starts the session (o.Session, or one created from profile)
// with the caller's grace, observer and logger, and waits for lock; on an
// error the session is closed.
func acquireHeld(ctx context.Context, c *consul.Client, lock lockmodel.Lock, profile lockmodel.Profile, o libhold.Options) (libhold.Held, error) {
	cfg := newConfig([]Option{WithGrace(o.Grace), WithHolderValue(o.Value), WithSessionName(o.SessionName)})
	if o.Log != nil {
		cfg.log = o.Log
	}
	cfg.perHold, cfg.observed, cfg.ruleWarned = true, o.Observer, o.RuleWarned
	var s *Session
	if o.Session != nil {
		s = startSession(c, o.Session, profile, cfg)
	} else {
		var err error
		if s, err = createSession(ctx, c, profile, cfg, "consullock concurrency"); err != nil {
			return nil, err
		}
	}
	h, err := newHold(s, lock, o.Protocol)
	if err == nil {
		err = h.acquire(ctx, false)
	}
	if err != nil {
		// The acquisition released what it had to; the session goes.
		if cerr := s.end(context.WithoutCancel(ctx), false); cerr != nil {
			cfg.log.Warn("ending the session failed; it ends by TTL", "session", s.ID(), "error", cerr.Error())
		}
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return &held{s: s, h: h, grant: h.grant, value: h.value, lostC: h.lostC}, nil
}

func (x *held) Session() *lockproto.Session      { return x.s.s }
func (x *held) Grant() lockproto.Grant           { return x.grant }
func (x *held) Value() []byte                    { return x.value }
func (x *held) LastContact() time.Time           { return x.s.lastContact() }
func (x *held) Done() <-chan struct{}            { return x.lostC }
func (x *held) IsOwner() store.Fence             { return x.h.fence() }
func (x *held) Orphan()                          { x.s.Orphan() }
func (x *held) Unlock(ctx context.Context) error { return x.s.end(ctx, true) }
func (x *held) Close(ctx context.Context) error  { return x.s.end(ctx, false) }

func (x *held) Reason() string {
	select {
	case <-x.lostC:
		x.h.mu.Lock()
		defer x.h.mu.Unlock()
		if x.h.reason == "" && x.h.lost != nil {
			return x.h.lost.Error() // the session ended (Orphan)
		}
		return x.h.reason
	default:
		return ""
	}
}
