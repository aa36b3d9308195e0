package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Leader election: one replica acts, holding the leader key with a session
// of leaderProfile (the public library concurrency: a Session and a Mutex,
// whose stop rule and loss judge are lockproto's, as `consullock run`'s). Each term has a
// context (term.ctx) that ends before the key is released; every action of
// the term runs under it, each write within LeaderGrace. Lock key writes
// are fenced by the term's hold on the leader key (store.Fence); session
// ends and ACL rule writes are preceded by a consistent read of it
// (confirmLeader). What a stalled agent can still apply late, and the
// take-over times: the package doc (doc.go).
const (
	LeaderSessionTTL = 10 * time.Second
	LeaderLockDelay  = 10 * time.Second
	LeaderRenewEvery = LeaderSessionTTL / 2
	// LeaderGrace is how long a leader that lost its lock may take to
	// stop acting (finish the write in flight), and the deadline of each
	// write the controller sends.
	LeaderGrace = time.Second
)

// term is one leadership term of this replica.
type term struct {
	// ctx ends when the term ends: every action of the term runs under it.
	ctx context.Context
	// fence is the term's hold on the leader key, which lock key writes
	// are committed under; zero without leader election.
	fence store.Fence
}

// errNotLeader: a write was refused, or not sent, because this replica's
// term has ended.
var errNotLeader = errors.New("this replica no longer leads")

// confirmLeader reads the leader key consistently and returns errNotLeader
// unless t's session still holds it.
func (c *Controller) confirmLeader(ctx context.Context, t *term) error {
	if err := t.ctx.Err(); err != nil {
		return errNotLeader
	}
	if t.fence.Session == "" {
		return nil
	}
	pair, _, err := c.client.KV().Get(t.fence.Key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return consul.Classify("read the leader key "+t.fence.Key, err)
	}
	if pair == nil || pair.Session != t.fence.Session {
		return errNotLeader
	}
	return nil
}

// leaderProfile is the leader session's profile.
var leaderProfile = lockmodel.SessionProfile{
	Name: "consullock-controller", TTL: LeaderSessionTTL, LockDelay: LeaderLockDelay,
	Behavior: lockmodel.BehaviorRelease, RenewEvery: LeaderRenewEvery,
}.Resolve()

// elect campaigns for the leader key until ctx ends. While this replica
// holds it, IsLeader is true and reconcile acts. Any outage of the agent,
// however long, ends at most one term: the next campaign starts with a new
// session as soon as Consul answers again.
func (c *Controller) elect(ctx context.Context) {
	// The campaign's pauses are the follower's back-off (consul.Follower):
	// a term led starts the count again.
	var retry consul.Follower
	for ctx.Err() == nil {
		led, err := c.leadOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if led {
			retry = consul.Follower{}
		}
		if err == nil {
			continue
		}
		wait := retry.Failed()
		c.log.Error("leader election failed", "key", c.LeaderKey(), "error", err.Error(), "retry_in", wait.String())
		if consul.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// leadOnce waits for the leader key with a new session, leads until the
// lock is lost or ctx ends, and always cleans up its session. led reports
// whether it became leader.
func (c *Controller) leadOnce(ctx context.Context) (led bool, err error) {
	s, err := concurrency.NewSession(ctx, c.client.Client, c.leaderSessionOptions()...)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("create the session for the leader key %s: %w", c.LeaderKey(), err)
	}
	log := c.log.With("session", s.ID(), "key", c.LeaderKey())
	// giveUp releases the key if the session holds it (a release sets no
	// lock-delay, so the next replica takes over at once), then destroys
	// the session.
	giveUp := func() error { return s.Close(context.WithoutCancel(ctx)) }
	m, err := concurrency.NewMutex(s, c.LeaderKey())
	if err == nil {
		err = m.Lock(ctx)
	}
	if err != nil {
		if cerr := giveUp(); cerr != nil {
			log.Warn("cleaning up after the election failed; the session ends by TTL", "error", cerr.Error())
		}
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("acquire the leader key %s: %w", c.LeaderKey(), err)
	}
	log.Info("became leader", "fencing_token", m.Token())
	termCtx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	// The term's fence is the session's hold on the leader key (the
	// mutex's IsOwner, as store.FencedCAS writes it).
	c.setTerm(&term{ctx: termCtx, fence: store.Fence{Key: m.Key(), Session: s.ID()}})

	select {
	case <-m.Done(): // the key lost, or the session lost (stop rule)
	case <-ctx.Done():
	}
	lost := m.Err()
	// End the term: cancel what it has in flight, wait for the action to
	// return, then release and only then destroy the session: a release
	// sets no lock-delay, so the next replica takes over at once. acting
	// belongs to Run (shutdown); the term alone says whether this replica
	// may act, so that a later term acts again.
	endTerm()
	c.setTerm(nil)
	c.actMu.Lock()
	defer c.actMu.Unlock()
	if err := giveUp(); err != nil {
		log.Warn("giving leadership up failed; the next replica takes over when the session ends", "error", err.Error())
	}
	if ctx.Err() != nil {
		log.Info("released leadership")
		return true, nil
	}
	reason := "the hold ended" // not reached: Done closes without an error only on Unlock
	if lost != nil {
		reason = lost.Error()
	}
	log.Warn("lost leadership", "reason", reason)
	return true, errors.New("leader key lost: " + reason)
}

// leaderSessionOptions create the leader's session as leaderProfile says
// (the library's explicit session: behavior release, the agent's
// serfHealth check) and have it write the leader value, who leads and in
// which mode, into the leader key.
func (c *Controller) leaderSessionOptions() []concurrency.Option {
	value, _ := json.Marshal(map[string]any{"identity": c.identity(), "mode": c.cfg.Mode}) // plain map
	return []concurrency.Option{
		concurrency.WithTTL(leaderProfile.TTL),
		concurrency.WithLockDelay(leaderProfile.LockDelay),
		concurrency.WithRenewEvery(leaderProfile.RenewEvery),
		concurrency.WithSessionName("consullock-controller"),
		concurrency.WithGrace(LeaderGrace),
		concurrency.WithHolderValue(func() []byte { return value }),
		concurrency.WithLogger(c.log),
	}
}

func (c *Controller) identity() string {
	if c.cfg.Identity != "" {
		return c.cfg.Identity
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
