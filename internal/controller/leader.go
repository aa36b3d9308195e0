package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// The leader election holds a Consul lock of the controller's own, with
// the protocol, session and loss model of `consullock run` (package
// lockproto), and a built-in session profile chosen for quick, safe
// take-over:
//
//   - TTL 10s (Consul's minimum), renewed every 5s: a replica that dies
//     without a word (SIGKILL) is invalidated by Consul after about
//     2 x TTL = 20s.
//   - LockDelay 10s and the serfHealth node check (Consul's default): a
//     leader whose node fails, or that is cut off from its agent, may be
//     replaced lock_delay after its last renewal; the loss model stops it
//     acting before then (after 10s - 1s margin - LeaderGrace = 8s
//     without a renewal), so two replicas never act at once.
//   - Behavior release. A clean shutdown releases before destroying, so
//     no delay applies then.
//
// Worst case take-over after SIGKILL: 20s + 10s + one blocking-query
// round.
const (
	LeaderSessionTTL = 10 * time.Second
	LeaderLockDelay  = 10 * time.Second
	LeaderRenewEvery = LeaderSessionTTL / 2
	// LeaderGrace is how long a leader that lost its lock may take to
	// stop acting (finish the write in flight).
	LeaderGrace = time.Second
)

// leaderProfile is the leader session's profile.
var leaderProfile = lockmodel.SessionProfile{
	Name: "consullock-controller", TTL: LeaderSessionTTL, LockDelay: LeaderLockDelay,
	Behavior: lockmodel.BehaviorRelease, RenewEvery: LeaderRenewEvery,
}.WithDefaults()

// elect campaigns for the leader key until ctx ends. While this replica
// holds it, IsLeader is true and reconcile acts. Any outage of the agent,
// however long, ends at most one term: the next campaign starts with a new
// session as soon as Consul answers again.
func (c *Controller) elect(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		led, err := c.leadOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if led {
			failures = 0
		}
		if err == nil {
			continue
		}
		failures++
		wait := backoff(failures)
		c.log.Error("leader election failed", "key", c.LeaderKey(), "error", err.Error(), "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// leadOnce waits for the leader key with a new session, leads until the
// lock is lost or ctx ends, and always cleans up its session. led reports
// whether it became leader.
func (c *Controller) leadOnce(ctx context.Context) (led bool, err error) {
	value, _ := json.Marshal(map[string]any{"identity": c.identity(), "mode": c.cfg.Mode})
	h, err := lockproto.AcquireHold(ctx, c.client, lockproto.HoldOptions{
		Lock:        lockmodel.Lock{Name: "controller", Prefix: c.cfg.RegistryPrefix + "/controller", Key: c.LeaderKey(), Limit: 1},
		Profile:     leaderProfile,
		SessionName: "consullock-controller",
		Grace:       LeaderGrace,
		Value:       func() []byte { return value },
		Log:         c.log,
	})
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("acquire the leader key %s: %w", c.LeaderKey(), err)
	}
	log := c.log.With("session", h.Session.ID, "key", c.LeaderKey())
	log.Info("became leader", "fencing_token", h.Grant.FencingToken)
	c.setLeader(true)

	select {
	case <-h.Lost():
	case <-ctx.Done():
	}
	// Stop acting, wait for an action in flight, then release and only
	// then destroy the session: a release sets no lock-delay, so the next
	// replica takes over at once. acting belongs to Run (shutdown); the
	// leader flag alone says whether this replica may act, so that a later
	// term acts again.
	c.setLeader(false)
	c.actMu.Lock()
	defer c.actMu.Unlock()
	h.Release(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		log.Info("released leadership")
		return true, nil
	}
	log.Warn("lost leadership", "reason", h.Reason())
	return true, errors.New("leader key lost: " + h.Reason())
}

func (c *Controller) identity() string {
	if c.cfg.Identity != "" {
		return c.cfg.Identity
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
