package controller

import (
	"slices"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// view is what the controller keeps between reconciles so that a change
// costs work in proportion to what changed, not to the locks watched. The
// watches diff each answer against the last one (lock keys and
// declaration records by ModifyIndex, walking the listing beside the
// previous one: listing.go; sessions by ID and CreateIndex) and mark the
// locks the changed objects belong to dirty; a reconcile looks again
// at the dirty locks only (holds, lock metrics) and decides them again
// with compliance.DecideLock, keeping every other lock's verdict. The
// verdicts joined in compliance.Decide's order are what Decide says on the
// whole state (TestView_decidesWhatAFullDecideDecides).
//
// A lock is dirty when its declaration changed, the profile it names
// changed, one of its keys (the mutex key, a semaphore's holder table or
// contender keys) changed, appeared, disappeared or became unknown or
// known, a session one of its keys names came or went, its apply grace
// ended, or a max_hold deadline of one of its holders passed. All of it is
// guarded by Controller.mu.
type view struct {
	// all asks the next snapshot to derive everything again and decide
	// every lock (at start; when the session watch first answers).
	all bool

	// From the declarations (indexDeclarations).
	norm         map[string]lockmodel.Lock // valid declared locks, normalised, by name
	owner        map[string]string         // lock key, or a semaphore's directory <prefix>/, -> lock name
	profileLocks map[string][]string       // profile name -> locks naming it

	// From the lock key watches: the keys of the answered watches, the
	// declared keys whose watch has not answered, and by session the
	// keys whose Session it is.
	keys        map[string]lockmodel.KeyEntry
	unknown     map[string]bool
	keySessions map[string]map[string]bool

	// The verdicts: by lock (locks with findings only), and the ACL
	// policies' (decided again as a whole when policiesDirty).
	byLock        map[string][]compliance.Decision
	policies      []compliance.Decision
	dirty         map[string]bool
	policiesDirty bool

	// due is, by lock, the first max_hold deadline of its holders: the
	// lock is decided again once it has passed (and at every reconcile
	// after, while the holder stays: its finding carries the time held).
	due map[string]time.Time
	// graceEnds is, by compliance.SettlingKey, when an apply grace ends.
	graceEnds map[string]time.Time
	// looked is, by lock, the sessions its last look saw holding it (the
	// holds in Controller.heldSince); unlooked are the locks that were
	// dirty at a snapshot that could not look at them (keys unknown, no
	// session answer yet). Any other lock was, in effect, looked at by the
	// last snapshot: nothing it rests on changed since its last look.
	looked       map[string]map[string]uint64
	unlooked     map[string]bool
	lastSnapshot time.Time
}

func newView() view {
	return view{
		all: true, norm: map[string]lockmodel.Lock{}, owner: map[string]string{}, profileLocks: map[string][]string{},
		keys: map[string]lockmodel.KeyEntry{}, unknown: map[string]bool{}, keySessions: map[string]map[string]bool{},
		byLock: map[string][]compliance.Decision{}, dirty: map[string]bool{}, due: map[string]time.Time{},
		graceEnds: map[string]time.Time{}, looked: map[string]map[string]uint64{}, unlooked: map[string]bool{},
	}
}

// indexDeclarations derives the lock indexes from c.cache.locks.
func (c *Controller) indexDeclarations() {
	v := &c.recon.view
	v.norm = make(map[string]lockmodel.Lock, len(c.cache.locks))
	v.owner = make(map[string]string, len(c.cache.locks))
	v.profileLocks = map[string][]string{}
	for name, l := range c.cache.locks {
		n, err := l.Normalize()
		if err != nil {
			continue
		}
		v.norm[name] = n
		v.owner[n.Key] = name
		if n.IsSemaphore() {
			v.owner[semaphoreDir(n)] = name
		}
		if n.SessionDefaults != "" {
			v.profileLocks[n.SessionDefaults] = append(v.profileLocks[n.SessionDefaults], name)
		}
	}
}

// touchKey marks dirty the lock key belongs to: the lock whose key it is,
// or the semaphore whose directory holds it.
func (c *Controller) touchKey(key string) {
	v := &c.recon.view
	if name, ok := v.owner[key]; ok {
		v.dirty[name] = true
		return
	}
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		if name, ok := v.owner[key[:i+1]]; ok {
			v.dirty[name] = true
		}
	}
}

// touchSession marks dirty the locks whose keys name session.
func (c *Controller) touchSession(session string) {
	for key := range c.recon.view.keySessions[session] {
		c.touchKey(key)
	}
}

// setKey records key as the watches now see it (absent: gone or unknown)
// and marks its lock dirty.
func (c *Controller) setKey(key string, e lockmodel.KeyEntry, present bool) {
	v := &c.recon.view
	if old, ok := v.keys[key]; ok && old.Session != "" {
		if ks := v.keySessions[old.Session]; ks != nil {
			delete(ks, key)
			if len(ks) == 0 {
				delete(v.keySessions, old.Session)
			}
		}
	}
	if present {
		v.keys[key] = e
		if e.Session != "" {
			if v.keySessions[e.Session] == nil {
				v.keySessions[e.Session] = map[string]bool{}
			}
			v.keySessions[e.Session][key] = true
		}
	} else {
		delete(v.keys, key)
	}
	c.touchKey(key)
}

// diffKeys applies one lock key watch answer: old and live are the
// group's previous and new answers (each counting only when synced).
func (c *Controller) diffKeys(g *group, old map[string]lockmodel.KeyEntry, wasSynced bool, live map[string]lockmodel.KeyEntry, synced bool) {
	if !wasSynced {
		old = nil
	}
	if !synced {
		live = nil
	}
	for key, e := range live {
		if o, ok := old[key]; !ok || !sameEntry(o, e) {
			c.setKey(key, e, true)
		}
	}
	for key := range old {
		if _, ok := live[key]; !ok {
			c.setKey(key, lockmodel.KeyEntry{}, false)
		}
	}
	if wasSynced != synced {
		for key := range g.keys {
			if synced {
				delete(c.recon.view.unknown, key)
			} else {
				c.recon.view.unknown[key] = true
			}
			c.touchKey(key)
		}
	}
}

// sameEntry reports whether two answers show the same version of a key:
// Consul raises ModifyIndex on every write; the rest guards hand-made
// answers.
func sameEntry(a, b lockmodel.KeyEntry) bool {
	return a.ModifyIndex == b.ModifyIndex && a.Session == b.Session && a.Flags == b.Flags && a.LockIndex == b.LockIndex
}

// setSessions applies one session watch answer: the locks whose keys name
// a session that came, went or changed are dirty. The first answer makes
// every lock dirty (holders are judged only once sessions are known).
func (c *Controller) setSessions(sessions map[string]lockmodel.ObservedSession) {
	old := c.cache.sessions
	c.cache.sessions = sessions
	if old == nil {
		c.recon.view.all = true
		return
	}
	for id, s := range sessions {
		if o, ok := old[id]; !ok || o.CreateIndex != s.CreateIndex {
			c.touchSession(id)
		}
	}
	for id := range old {
		if _, ok := sessions[id]; !ok {
			c.touchSession(id)
		}
	}
}

// refreshUnknown derives the unknown keys again from the groups (after a
// regrouping) and marks dirty the locks whose keys changed state.
func (c *Controller) refreshUnknown() {
	unknown := map[string]bool{}
	for key, prefix := range c.cache.keyGroup {
		if g := c.cache.groups[prefix]; g == nil || !g.synced {
			unknown[key] = true
		}
	}
	for key := range unknown {
		if !c.recon.view.unknown[key] {
			c.touchKey(key)
		}
	}
	for key := range c.recon.view.unknown {
		if !unknown[key] {
			c.touchKey(key)
		}
	}
	c.recon.view.unknown = unknown
}

// rebuildView derives the view from the watches' last answers again and
// marks every lock dirty.
func (c *Controller) rebuildView() {
	v := &c.recon.view
	c.indexDeclarations()
	v.keys, v.keySessions = map[string]lockmodel.KeyEntry{}, map[string]map[string]bool{}
	for _, g := range c.cache.groups {
		if g.synced {
			for key, e := range g.live {
				c.setKey(key, e, true)
			}
		}
	}
	c.refreshUnknown()
	for name := range c.cache.locks {
		v.dirty[name] = true
	}
	v.policiesDirty = true
	v.all = false
}

// forgetLock drops the bookkeeping of a lock no longer declared.
func (c *Controller) forgetLock(name string) {
	v := &c.recon.view
	for s := range v.looked[name] {
		h := compliance.LockSession{Lock: name, Session: s}
		delete(c.recon.heldSince, h)
		delete(c.recon.holdStart, h)
	}
	delete(v.looked, name)
	delete(v.unlooked, name)
	delete(v.due, name)
	delete(v.byLock, name)
	delete(c.recon.lastLook, name)
	delete(c.recon.lockStatus, name)
}

// startGrace notes that the declaration id (a compliance.SettlingKey) is
// pending until end, and marks what it declares dirty.
func (c *Controller) startGrace(id string, end time.Time) {
	c.recon.view.graceEnds[id] = end
	c.touchDeclaration(id)
}

// touchDeclaration marks dirty what the declaration id declares.
func (c *Controller) touchDeclaration(id string) {
	kind, name, _ := strings.Cut(id, "/")
	switch kind {
	case lockmodel.KindLock:
		c.recon.view.dirty[name] = true
	case lockmodel.KindACLPolicy:
		c.recon.view.policiesDirty = true
	}
}

// decideDirty decides again the dirty locks (and the policies, when
// dirty) on st and returns every verdict in compliance.Decide's order.
func (c *Controller) decideDirty(st compliance.State) []compliance.Decision {
	v := &c.recon.view
	for name := range v.dirty {
		if _, declared := st.Locks[name]; !declared {
			delete(v.byLock, name)
		} else if ds := compliance.DecideLock(st, name, c.cfg.Mode); len(ds) > 0 {
			v.byLock[name] = ds
		} else {
			delete(v.byLock, name)
		}
	}
	clear(v.dirty)
	if v.policiesDirty {
		v.policies = compliance.DecidePolicies(st, c.cfg.Mode)
		v.policiesDirty = false
	}
	names := make([]string, 0, len(v.byLock))
	n := len(v.policies)
	for name, ds := range v.byLock {
		names = append(names, name)
		n += len(ds)
	}
	slices.Sort(names)
	out := make([]compliance.Decision, 0, n)
	for _, name := range names {
		out = append(out, v.byLock[name]...)
	}
	return compliance.FirstEnds(append(out, v.policies...))
}
