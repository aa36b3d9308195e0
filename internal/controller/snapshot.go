package controller

import (
	"maps"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// snapshot brings the view up to date for a reconcile at now and returns
// the State DecideLock reads (its maps are the controller's own: use it
// with c.mu held), whether every watch has answered, and the next time an
// apply grace or a max_hold deadline passes (zero when none). Only the
// dirty locks are looked at again (see view). Each job is one method, in
// this order; all run with c.mu held.
func (c *Controller) snapshotLocked(now time.Time) (compliance.State, bool, time.Time) {
	c.noteReadiness()
	if !c.cache.registrySync {
		return compliance.State{}, false, time.Time{}
	}
	if c.recon.view.all {
		c.rebuildView()
	}
	st := compliance.State{Locks: c.cache.locks, Profiles: c.cache.profiles, Sessions: c.cache.sessions, Now: now,
		Keys: c.recon.view.keys, UnknownKeys: c.recon.view.unknown}
	var graceEnds, deadline time.Time
	st.Settling, graceEnds = c.settling(now)
	st.Policies, st.LivePolicies = c.policiesToJudge()
	c.dueLocks(now)
	looks := c.lookAtLocks(st, now)
	deadline = c.trackHolds(looks, now)
	st.HeldSince = c.recon.holdStart
	st.ProfileIndex, st.ProfileSwitched = c.profileLines()
	c.recon.view.lastSnapshot = now
	return st, true, earliest(graceEnds, deadline)
}

// snapshot is snapshotLocked taking c.mu.
func (c *Controller) snapshot(now time.Time) (compliance.State, bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked(now)
}

// noteReadiness sets Ready once every watch has answered, and logs it the
// first time.
func (c *Controller) noteReadiness() {
	if c.ready.Load() {
		return
	}
	ready := c.cache.registrySync && c.cache.sessions != nil
	for _, g := range c.cache.groups {
		ready = ready && g.synced
	}
	if ready {
		c.ready.Store(true)
		c.log.Info("initial sync done", "locks", len(c.cache.locks), "session_defaults", len(c.cache.profiles),
			"acl_policies", len(c.cache.policies), "lock_watches", len(c.cache.groups))
	}
}

// settling returns the declarations within their apply grace
// (compliance.Pending; nil when none) and when the first of those graces
// ends (zero when none). A grace that has ended makes what it declared
// dirty.
func (c *Controller) settling(now time.Time) (map[string]bool, time.Time) {
	var settling map[string]bool
	var next time.Time
	for id, end := range c.recon.view.graceEnds {
		if !now.Before(end) {
			delete(c.recon.view.graceEnds, id)
			c.touchDeclaration(id)
			continue
		}
		if settling == nil {
			settling = map[string]bool{}
		}
		settling[id] = true
		next = earliest(next, end)
	}
	return settling, next
}

// policiesToJudge returns the declared policies to judge and the live
// policies to judge them against (nil when the policy watch has not
// answered).
func (c *Controller) policiesToJudge() (map[string]record.ACLPolicySpec, map[string]compliance.LivePolicy) {
	if !c.cache.policySync {
		return c.cache.policies, nil
	}
	// A declared policy that is listed but not read yet is unknown, not
	// missing: leave it out of this round.
	policies, copied := c.cache.policies, false
	for name, spec := range c.cache.policies {
		_, listed := c.cache.policyHashes[spec.ID]
		if _, read := c.cache.livePolicies[spec.ID]; listed && !read {
			if !copied {
				policies, copied = maps.Clone(c.cache.policies), true
			}
			delete(policies, name)
		}
	}
	return policies, c.cache.livePolicies
}

// dueLocks marks dirty the locks a max_hold deadline of which has passed.
func (c *Controller) dueLocks(now time.Time) {
	for name, at := range c.recon.view.due {
		if !now.Before(at) {
			c.recon.view.dirty[name] = true
		}
	}
}

// lookAtLocks updates the lock metrics of the dirty locks from st and
// returns the looks it took: by lock name, the sessions holding it with
// their acquisition mark (a mutex key's LockIndex), for the dirty locks
// whose key state and holders' sessions are known.
func (c *Controller) lookAtLocks(st compliance.State, now time.Time) map[string]map[string]uint64 {
	looks := map[string]map[string]uint64{}
	for name := range c.recon.view.dirty {
		l, ok := c.recon.view.norm[name]
		if !ok {
			continue
		}
		if st.UnknownKeys[l.Key] {
			c.recon.view.unlooked[name] = true
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
		} else {
			c.recon.view.unlooked[name] = true
		}
		c.updateLockStatus(name, l, live, exists, hs, now)
	}
	return looks
}

// trackHolds records the looks (compliance.TrackHolds on the holds of the
// locks looked at; the others' are kept), sets when each of their holds
// began (lockmodel.HoldStart) and their first max_hold deadline, and
// returns the first deadline of all (zero when none).
func (c *Controller) trackHolds(looks map[string]map[string]uint64, now time.Time) time.Time {
	v := &c.recon.view
	if len(looks) > 0 {
		prev := map[compliance.LockSession]compliance.Sighting{}
		lastLook := make(map[string]time.Time, len(looks))
		for name := range looks {
			for s := range v.looked[name] {
				h := compliance.LockSession{Lock: name, Session: s}
				if hold, ok := c.recon.heldSince[h]; ok {
					prev[h] = hold
				}
				delete(c.recon.heldSince, h)
				delete(c.recon.holdStart, h)
			}
			if at, ok := c.lastLookAt(name); ok {
				lastLook[name] = at
			}
		}
		maps.Copy(c.recon.heldSince, compliance.TrackHolds(prev, looks, lastLook, now))
		for name, look := range looks {
			v.looked[name] = look
			c.recon.lastLook[name] = now
			delete(v.unlooked, name)
			delete(v.due, name)
			l := c.cache.locks[name]
			for s := range look {
				h := compliance.LockSession{Lock: name, Session: s}
				var value []byte
				if lk, ok := c.holderKey(l, s); ok {
					value = lk.Value
				}
				start, _ := lockmodel.HoldStart(value, c.recon.heldSince[h].Evidence(), now)
				c.recon.holdStart[h] = start
				if l.MaxHold > 0 {
					v.due[name] = earliest(v.due[name], start.Add(l.MaxHold).Add(time.Millisecond))
				}
			}
		}
	}
	var next time.Time
	for _, at := range v.due {
		next = earliest(next, at)
	}
	return next
}

// lastLookAt is when the lock's state was last known: its last look, or,
// for a lock that nothing touched since, the last snapshot (which would
// have seen the same). false when it was never looked at.
func (c *Controller) lastLookAt(name string) (time.Time, bool) {
	at, ever := c.recon.lastLook[name]
	if !ever || c.recon.view.unlooked[name] {
		return at, ever
	}
	return c.recon.view.lastSnapshot, true
}

// profileLines returns the Raft indexes that tell a holder created under
// an earlier profile (compliance.State.ProfileIndex, ProfileSwitched).
func (c *Controller) profileLines() (map[string]uint64, map[string]uint64) {
	index := map[string]uint64{}
	for name := range c.cache.profiles {
		index[name] = c.cache.declSeen[compliance.SettlingKey(lockmodel.KindSessionDefaults, name)].index
	}
	return index, c.cache.profileSwitched
}

// earliest returns the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (c *Controller) updateLockStatus(name string, l lockmodel.Lock, live lockmodel.KeyEntry, exists bool, hs []lockmodel.ObservedSession, now time.Time) {
	ls := c.recon.lockStatus[name]
	if ls == nil {
		ls = &lockStatus{holders: map[string]bool{}}
		c.recon.lockStatus[name] = ls
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
	c.reaper.note(l, !ls.seen, ls.holders, cur)
	ls.seen, ls.held, ls.holders = true, held, cur
	if exists && !l.IsSemaphore() {
		ls.lockIndex = live.LockIndex
	}
}
