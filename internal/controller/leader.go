package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// The leader election uses a Consul lock of the controller's own, with a
// built-in session profile chosen for quick, safe take-over:
//
//   - TTL 10s (Consul's minimum), renewed every 5s: a replica that dies
//     without a word (SIGKILL, network cut) is invalidated by Consul after
//     about 2 x TTL = 20s.
//   - LockDelay 5s: after such a death the key stays unacquirable for 5s
//     more, which covers an old leader still finishing one write. A clean
//     shutdown releases before destroying, so no delay applies then.
//   - Behavior release and the serfHealth node check (Consul's defaults):
//     a leader whose node fails loses the lock at once.
//
// Worst case take-over after SIGKILL: 20s + 5s + one LeaderLockWait.
const (
	LeaderSessionTTL = 10 * time.Second
	LeaderLockDelay  = 5 * time.Second
	// LeaderLockWait is how long a follower's blocking query on the leader
	// key waits before trying again (it also wakes on any change).
	LeaderLockWait = 3 * time.Second
)

// elect campaigns for the leader key until ctx ends. While this replica
// holds it, IsLeader is true and reconcile acts.
func (c *Controller) elect(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := c.leadOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			wait := backoff(failures)
			c.log.Error("leader election failed", "key", c.LeaderKey(), "error", err.Error(), "retry_in", wait.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		failures = 0
	}
}

// leadOnce creates a session, waits for the leader key, leads until the
// lock is lost or ctx ends, and always cleans up its session.
func (c *Controller) leadOnce(ctx context.Context) error {
	w := (&api.WriteOptions{}).WithContext(ctx)
	id, _, err := c.client.Session().Create(&api.SessionEntry{
		Name: "consullock-controller", TTL: LeaderSessionTTL.String(), LockDelay: LeaderLockDelay,
		Behavior: api.SessionBehaviorRelease,
	}, w)
	if err != nil {
		return consul.Classify("create the controller's leader session", err)
	}
	log := c.log.With("session", id, "key", c.LeaderKey())

	renewDone := make(chan struct{})
	renewErr := make(chan error, 1)
	go func() {
		// RenewPeriodic destroys the session when renewDone closes.
		renewErr <- c.client.Session().RenewPeriodic(LeaderSessionTTL.String(), id, nil, renewDone)
	}()
	stopRenew := func() {
		select {
		case <-renewDone:
		default:
			close(renewDone)
		}
		select {
		case <-renewErr: //nolint:errcheck // renewal ends because we stopped it; its error adds nothing
		case <-time.After(3 * time.Second):
		}
	}

	value, _ := json.Marshal(map[string]any{"identity": c.identity(), "mode": c.cfg.Mode})
	lock, err := c.client.LockOpts(&api.LockOptions{
		Key: c.LeaderKey(), Session: id, Value: value,
		LockWaitTime: LeaderLockWait, MonitorRetries: 5, MonitorRetryTime: time.Second,
	})
	if err != nil {
		stopRenew()
		return err
	}

	// stop ends the campaign (and the leadership) when ctx ends or the
	// session can no longer be renewed.
	stop := make(chan struct{})
	var stopOnce sync.Once
	closeStop := func() { stopOnce.Do(func() { close(stop) }) }
	watchDone := make(chan struct{})
	var renewFailed error
	go func() {
		defer close(watchDone)
		select {
		case <-ctx.Done():
		case renewFailed = <-renewErr:
			renewErr <- renewFailed // for stopRenew
		case <-stop:
		}
		closeStop()
	}()
	lost, err := lock.Lock(stop)
	if err != nil || lost == nil {
		closeStop()
		<-watchDone
		stopRenew()
		if err != nil {
			return consul.Classify("acquire the leader key "+c.LeaderKey(), err)
		}
		if renewFailed != nil {
			return fmt.Errorf("leader session %s: %w", id, renewFailed)
		}
		return nil
	}
	log.Info("became leader")
	c.setLeader(true)

	select {
	case <-lost:
		c.setLeader(false)
		log.Warn("lost leadership")
		closeStop()
		<-watchDone
		stopRenew()
		return errors.New("leader key lost")
	case <-stop:
	}
	<-watchDone
	// Stop acting, wait for an action in flight, then release and only
	// then destroy the session: a release sets no lock-delay, so the next
	// replica takes over at once.
	c.acting.Store(false)
	c.setLeader(false)
	c.actMu.Lock()
	defer c.actMu.Unlock()
	if err := lock.Unlock(); err != nil && !errors.Is(err, api.ErrLockNotHeld) {
		log.Error("releasing the leader key failed", "error", err.Error())
	}
	stopRenew()
	if ctx.Err() != nil {
		log.Info("released leadership")
		return nil
	}
	return fmt.Errorf("leader session %s: %w", id, renewFailed)
}

func (c *Controller) identity() string {
	if c.cfg.Identity != "" {
		return c.cfg.Identity
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
