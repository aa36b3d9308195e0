package concurrency

import (
	"context"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// The module's own holders (the ephemeral lock) hold a declaration they
// have read through this package's Session and hold (internal/libhold).
func init() { libhold.Acquire = acquireHeld }

// held is a libhold.Held: a hold through a session of its own. Its grant
// and value are kept at the acquisition, as an orphaned hold reads as not
// held.
type held struct {
	s     *Session
	grant lockproto.Grant
	value []byte
}

var _ libhold.Held = (*held)(nil)

// acquireHeld creates the session from profile with the stop rule of a
// holder that stops at once (no grace: the ephemeral lock has no command
// to wait for) and waits for lock; on an error the session is closed.
func acquireHeld(ctx context.Context, c *consul.Client, lock lockmodel.Lock, profile lockmodel.Profile, o libhold.Options) (libhold.Held, error) {
	cfg := newConfig([]Option{WithGrace(0), WithHolderValue(o.Value), WithSessionName(o.SessionName)})
	if o.Log != nil {
		cfg.log = o.Log
	}
	s, err := createSession(ctx, c, profile, cfg, "consullock concurrency")
	if err != nil {
		return nil, err
	}
	h, err := newHold(s, lock)
	if err == nil {
		err = h.acquire(ctx, false)
	}
	if err != nil {
		if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
			cfg.log.Warn("ending the session failed; it ends by TTL", "session", s.ID(), "error", cerr.Error())
		}
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return &held{s: s, grant: h.grant, value: h.value}, nil
}

func (x *held) SessionID() string               { return x.s.ID() }
func (x *held) FencingToken() uint64            { return x.grant.FencingToken }
func (x *held) LockIndex() uint64               { return x.grant.LockIndex }
func (x *held) Value() []byte                   { return x.value }
func (x *held) LastRenewal() time.Time          { return x.s.lastContact() }
func (x *held) Orphan()                         { x.s.Orphan() }
func (x *held) Close(ctx context.Context) error { return x.s.Close(ctx) }
