package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
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
//     replaced lock_delay after its last renewal; the loss model ends its
//     term before then (after 10s - 1s margin - LeaderGrace = 8s without
//     a renewal).
//   - Behavior release. A clean shutdown releases before destroying, so
//     no delay applies then.
//
// Worst case take-over after SIGKILL: 20s + 10s + one blocking-query
// round.
//
// What a term fences. Each leadership term has a context (term.ctx) that
// is cancelled the moment the term ends, before the leader key is
// released; every action of the term runs under it, and each write under
// a deadline of LeaderGrace on top (retries of transient errors included):
// no request of a term is still being sent or retried once the term has
// ended, and no write for longer than LeaderGrace. A request already
// handed to an agent that then stalls (a frozen agent) may still reach
// the servers later; so:
//
//   - Lock key writes (re-create, restore flags or limit) are one Consul
//     transaction with a check that the term's session holds the leader
//     key: Consul commits them only while this replica leads, however
//     late they arrive.
//   - Ending a session and restoring ACL rules have no such check in
//     Consul (the HTTP transaction API takes no session or ACL ops, and
//     policy updates have no check-and-set). Right before each, a
//     consistent read confirms the term's session still holds the leader
//     key (and, for a policy, that its ModifyIndex is the one decided
//     on), and the write must be sent within the same LeaderGrace
//     deadline. What remains: a request an agent accepted and then held
//     (frozen) is applied when it resumes, possibly after another replica
//     took over. A late policy write is seen by the new leader as drift
//     and put back to the declaration (an update of a deleted policy
//     fails); a late session end ends a session the decision found
//     violating when it was sent.
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
	fence consul.Fence
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
	termCtx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	c.setTerm(&term{ctx: termCtx, fence: consul.Fence{Key: c.LeaderKey(), Session: h.Session.ID}})

	select {
	case <-h.Lost():
	case <-ctx.Done():
	}
	// End the term: cancel what it has in flight, wait for the action to
	// return, then release and only then destroy the session: a release
	// sets no lock-delay, so the next replica takes over at once. acting
	// belongs to Run (shutdown); the term alone says whether this replica
	// may act, so that a later term acts again.
	endTerm()
	c.setTerm(nil)
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
