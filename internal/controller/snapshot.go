package controller

import (
	"maps"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// snapshot copies the watched state into a State for Decide, updates the
// holder bookkeeping and lock metrics, and reports whether every watch has
// answered. It returns the next time an apply grace or a max_hold deadline
// passes (zero when none). Each job is one method, in this order; all run
// with c.mu held.
func (c *Controller) snapshot(now time.Time) (compliance.State, bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteReadiness()
	if !c.registrySync {
		return compliance.State{}, false, time.Time{}
	}
	st := compliance.State{Locks: c.locks, Profiles: c.profiles, Sessions: c.sessions, Now: now}
	var graceEnds, deadline time.Time
	st.Settling, graceEnds = c.settling(now)
	st.Policies, st.LivePolicies = c.policiesToJudge()
	st.Keys, st.UnknownKeys = c.groupedKeys()
	looks := c.lookAtLocks(st, now)
	st.HeldSince, deadline = c.trackHolds(looks, now)
	st.ProfileIndex, st.ProfileSwitched = c.profileLines()
	c.pruneUndeclared()
	return st, true, earliest(graceEnds, deadline)
}

// noteReadiness sets Ready once every watch has answered, and logs it the
// first time.
func (c *Controller) noteReadiness() {
	ready := c.registrySync && c.sessions != nil
	for _, g := range c.groups {
		ready = ready && g.synced
	}
	if ready && !c.ready.Load() {
		c.ready.Store(true)
		c.log.Info("initial sync done", "locks", len(c.locks), "session_defaults", len(c.profiles),
			"acl_policies", len(c.policies), "lock_watches", len(c.groups))
	}
}

// settling returns the declarations within their apply grace
// (compliance.Pending; nil when none) and when the first of those graces
// ends (zero when none).
func (c *Controller) settling(now time.Time) (map[string]bool, time.Time) {
	var settling map[string]bool
	var next time.Time
	for id, v := range c.declSeen {
		if !compliance.Pending(v.index, v.index, v.changed, now, c.cfg.ApplyGrace) {
			continue
		}
		if settling == nil {
			settling = map[string]bool{}
		}
		settling[id] = true
		next = earliest(next, v.changed.Add(c.cfg.ApplyGrace))
	}
	return settling, next
}

// policiesToJudge returns the declared policies to judge and the live
// policies to judge them against (nil when the policy watch has not
// answered).
func (c *Controller) policiesToJudge() (map[string]lockmodel.ACLPolicySpec, map[string]compliance.LivePolicy) {
	if !c.policySync {
		return c.policies, nil
	}
	// A declared policy that is listed but not read yet is unknown, not
	// missing: leave it out of this round.
	policies, copied := c.policies, false
	for name, spec := range c.policies {
		_, listed := c.policyHashes[spec.ID]
		if _, read := c.livePolicies[spec.ID]; listed && !read {
			if !copied {
				policies, copied = maps.Clone(c.policies), true
			}
			delete(policies, name)
		}
	}
	return policies, c.livePolicies
}

// groupedKeys returns what the lock key watches last saw: the declared
// lock keys and the keys right under a semaphore's prefix (its contender
// keys, which tell its holders: lockmodel.Holders), and the keys whose
// watch has not answered yet.
func (c *Controller) groupedKeys() (map[string]compliance.LiveKey, map[string]bool) {
	keys, unknown := map[string]compliance.LiveKey{}, map[string]bool{}
	for key, prefix := range c.keyGroup {
		if g := c.groups[prefix]; g == nil || !g.synced {
			unknown[key] = true
		}
	}
	for _, g := range c.groups {
		if g.synced {
			maps.Copy(keys, g.live)
		}
	}
	return keys, unknown
}

// lookAtLocks updates the lock metrics from st and returns the looks it
// took: by lock name, the sessions holding it with their acquisition mark
// (a mutex key's LockIndex), for the locks whose key state and holders'
// sessions are known.
func (c *Controller) lookAtLocks(st compliance.State, now time.Time) map[string]map[string]uint64 {
	looks := map[string]map[string]uint64{}
	for name, l := range c.locks {
		l, err := l.Normalize()
		if err != nil || st.UnknownKeys[l.Key] {
			continue
		}
		live, exists := st.Keys[l.Key]
		var hs []lockmodel.ObservedSession
		if exists && st.Sessions != nil {
			hs = compliance.HolderSessions(l, st.Keys, st.Sessions)
		}
		if st.Sessions != nil {
			look := make(map[string]uint64, len(hs))
			for _, s := range hs {
				var acq uint64
				if !l.IsSemaphore() {
					acq = live.LockIndex
				}
				look[s.ID] = acq
			}
			looks[name] = look
		}
		c.updateLockStatus(name, l, live, exists, hs, now)
	}
	return looks
}

// trackHolds records the looks (compliance.TrackHolds), forgets the holds
// of undeclared locks, and returns when each hold began
// (lockmodel.HoldStart) and the first max_hold deadline (zero when none).
func (c *Controller) trackHolds(looks map[string]map[string]uint64, now time.Time) (map[compliance.Holder]time.Time, time.Time) {
	c.heldSince = compliance.TrackHolds(c.heldSince, looks, c.lastLook, now)
	for name := range looks {
		c.lastLook[name] = now
	}
	var next time.Time
	c.holdStart = make(map[compliance.Holder]time.Time, len(c.heldSince))
	heldSince := map[compliance.Holder]time.Time{}
	for h, hold := range c.heldSince {
		l, declared := c.locks[h.Lock]
		if !declared {
			delete(c.heldSince, h)
			continue
		}
		var value []byte
		if lk, ok := c.holderKey(l, h.Session); ok {
			value = lk.Value
		}
		start, _ := lockmodel.HoldStart(value, hold.Evidence(), now)
		c.holdStart[h] = start
		heldSince[h] = start
		if l.MaxHold > 0 {
			next = earliest(next, start.Add(l.MaxHold).Add(time.Millisecond))
		}
	}
	return heldSince, next
}

// profileLines returns the Raft indexes that tell a holder created under
// an earlier profile (compliance.State.ProfileIndex, ProfileSwitched).
func (c *Controller) profileLines() (map[string]uint64, map[string]uint64) {
	index := map[string]uint64{}
	for name := range c.profiles {
		index[name] = c.declSeen[compliance.SettlingKey(lockmodel.KindSessionDefaults, name)].index
	}
	return index, c.profileSwitched
}

// pruneUndeclared forgets the lock bookkeeping (last look, metrics) of
// locks no longer declared.
func (c *Controller) pruneUndeclared() {
	for name := range c.lastLook {
		if _, ok := c.locks[name]; !ok {
			delete(c.lastLook, name)
		}
	}
	for name := range c.lockStatus {
		if _, ok := c.locks[name]; !ok {
			delete(c.lockStatus, name)
		}
	}
}

// earliest returns the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (c *Controller) updateLockStatus(name string, l lockmodel.Lock, live compliance.LiveKey, exists bool, hs []lockmodel.ObservedSession, now time.Time) {
	ls := c.lockStatus[name]
	if ls == nil {
		ls = &lockStatus{holders: map[string]bool{}}
		c.lockStatus[name] = ls
	}
	held := exists && (live.Session != "" || len(hs) > 0)
	cur := map[string]bool{}
	if !l.IsSemaphore() {
		if exists && live.Session != "" {
			cur[live.Session] = true
		}
	} else {
		for _, s := range hs {
			cur[s.ID] = true
		}
	}
	if ls.seen {
		handover := false
		if !l.IsSemaphore() {
			handover = exists && live.Session != "" && live.LockIndex > ls.lockIndex
		} else {
			for id := range cur {
				if !ls.holders[id] {
					handover = true
				}
			}
		}
		if handover {
			ls.handovers++
			ls.lastHandover = now
			c.metrics.handovers.WithLabelValues(name).Inc()
		}
	}
	if !held && (ls.held || !ls.seen) {
		ls.unheldSince = now
	}
	ls.seen, ls.held, ls.holders = true, held, cur
	if exists && !l.IsSemaphore() {
		ls.lockIndex = live.LockIndex
	}
}
