package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// TestView_decidesWhatAFullDecideDecides applies random sequences of
// changes (lock keys deleted, re-created and given other flags, sessions
// created, acquiring, releasing and destroyed, declarations and profiles
// added, changed and removed, the clock moving past apply graces and
// max_hold deadlines) to a world, feeds each change to a controller the
// way its watches do (the registry listing when a record moved, every lock
// key watch's answer, the session list), and after every step compares
// the controller's incremental verdicts with compliance.Decide on a fresh
// State built from the whole world, holds included (what the controller
// did before it kept verdicts: look at every lock at every reconcile).
func TestView_decidesWhatAFullDecideDecides(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		mode := []compliance.Mode{compliance.ModeEnforce, compliance.ModeRepair, compliance.ModeObserve}[seed%3]
		t.Run(fmt.Sprintf("seed=%d/%s", seed, mode), func(t *testing.T) {
			w := newWorld(t, seed, mode)
			for step := range 300 {
				op := w.change()
				w.feed()
				if err := w.compare(); err != nil {
					t.Fatalf("step %d (%s): %v\nlog:\n%s", step, op, err, strings.Join(w.log, "\n"))
				}
			}
		})
	}
}

// world is the Consul the test controller watches, and the reference
// bookkeeping of a controller that decides everything again each time.
type world struct {
	t   *testing.T
	rnd *rand.Rand
	c   *Controller
	now time.Time
	log []string

	index    uint64
	locks    map[string]lockmodel.Lock
	profiles map[string]lockmodel.Profile
	versions map[string]uint64 // by compliance.SettlingKey
	keys     map[string]lockmodel.KeyEntry
	sessions map[string]lockmodel.ObservedSession
	declared bool // declarations changed since the last feed

	// The reference's bookkeeping (what setDeclarations and the full
	// snapshot kept).
	synced   bool
	seen     map[string]declVersion
	prev     map[string]lockmodel.Lock
	switched map[string]uint64
	holds    map[compliance.LockSession]compliance.Sighting
	lastLook map[string]time.Time
}

const worldGrace = 5 * time.Second

var worldLocks = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

func newWorld(t *testing.T, seed uint64, mode compliance.Mode) *world {
	c, err := New(nil, Config{Mode: mode, ApplyGrace: worldGrace})
	if err != nil {
		t.Fatal(err)
	}
	// The lock key watches setDeclarations starts end at once: the test
	// answers for them.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.groupCtx, c.groupWG = ctx, &sync.WaitGroup{}
	w := &world{
		t: t, rnd: rand.New(rand.NewPCG(seed, 24)), c: c, now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		index: 100, locks: map[string]lockmodel.Lock{}, profiles: map[string]lockmodel.Profile{},
		versions: map[string]uint64{}, keys: map[string]lockmodel.KeyEntry{}, sessions: map[string]lockmodel.ObservedSession{},
		declared: true, seen: map[string]declVersion{}, switched: map[string]uint64{},
		holds: map[compliance.LockSession]compliance.Sighting{}, lastLook: map[string]time.Time{},
	}
	for range 4 {
		w.declareLock()
	}
	w.declareProfile()
	return w
}

func (w *world) pick(n int) int { return w.rnd.IntN(n) }

func (w *world) write() uint64 { w.index++; return w.index }

// worldLock is the declaration of lock name: a mutex under jobs/, or a
// semaphore under sem/.
func worldLock(name string, semaphore bool) lockmodel.Lock {
	if semaphore {
		return lockmodel.Lock{Name: name, Prefix: "sem/" + name, Limit: 3}
	}
	return lockmodel.Lock{Name: name, Prefix: "jobs/" + name}
}

func (w *world) declareLock() string {
	name := worldLocks[w.pick(len(worldLocks))]
	l := worldLock(name, name >= "f")
	l.SessionDefaults = []string{"", "p1", "p2", "missing"}[w.pick(4)]
	l.MaxHold = []time.Duration{0, 0, 30 * time.Minute, time.Hour}[w.pick(4)]
	if l.Limit > 1 {
		l.Limit = 2 + w.pick(2)
	}
	w.locks[name] = l
	w.versions[compliance.SettlingKey(lockmodel.KindLock, name)] = w.write()
	w.declared = true
	return "declare lock " + name + fmt.Sprintf(" %+v", l)
}

func (w *world) declareProfile() string {
	name := []string{"p1", "p2"}[w.pick(2)]
	p := lockmodel.SessionProfile{Name: name, TTL: []time.Duration{15 * time.Second, time.Minute}[w.pick(2)],
		LockDelay: 15 * time.Second, NodeChecks: []string{"serfHealth"}}
	w.profiles[name] = p.Resolve()
	w.versions[compliance.SettlingKey(lockmodel.KindSessionDefaults, name)] = w.write()
	w.declared = true
	return "declare profile " + name
}

func (w *world) someLock() (lockmodel.Lock, bool) {
	if len(w.locks) == 0 {
		return lockmodel.Lock{}, false
	}
	names := sortedNames(w.locks)
	l, err := w.locks[names[w.pick(len(names))]].Normalize()
	if err != nil {
		w.t.Fatal(err)
	}
	return l, true
}

func (w *world) someSession() (string, bool) {
	if len(w.sessions) == 0 {
		return "", false
	}
	ids := sortedNames(w.sessions)
	return ids[w.pick(len(ids))], true
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (w *world) setKey(key string, e lockmodel.KeyEntry) {
	e.ModifyIndex = w.write()
	w.keys[key] = e
}

// change applies one random change and says what it was.
func (w *world) change() string {
	op := w.changeOnce()
	w.log = append(w.log, op)
	return op
}

func (w *world) changeOnce() string {
	switch w.pick(14) {
	case 0:
		return w.declareLock()
	case 1:
		if l, ok := w.someLock(); ok {
			delete(w.locks, l.Name)
			delete(w.versions, compliance.SettlingKey(lockmodel.KindLock, l.Name))
			w.declared = true
			return "undeclare lock " + l.Name
		}
	case 2:
		if w.pick(3) == 0 && len(w.profiles) > 0 {
			name := sortedNames(w.profiles)[w.pick(len(w.profiles))]
			delete(w.profiles, name)
			delete(w.versions, compliance.SettlingKey(lockmodel.KindSessionDefaults, name))
			w.declared = true
			return "undeclare profile " + name
		}
		return w.declareProfile()
	case 3, 4:
		if l, ok := w.someLock(); ok {
			e := lockmodel.KeyEntry{Flags: l.Flags()}
			if w.pick(4) == 0 {
				e.Flags = 7
			}
			if l.IsSemaphore() {
				e.Value = lockmodel.NewSemaphoreValue(2 + w.pick(2))
				if w.pick(6) == 0 {
					e.Value = []byte("not a table")
				}
			}
			w.setKey(l.Key, e)
			return fmt.Sprintf("create key %s flags %#x value %q", l.Key, e.Flags, e.Value)
		}
	case 5:
		if l, ok := w.someLock(); ok {
			delete(w.keys, l.Key)
			w.write()
			return "delete key " + l.Key
		}
	case 6:
		if l, ok := w.someLock(); ok {
			if e, exists := w.keys[l.Key]; exists {
				e.Flags = []uint64{l.Flags(), 9}[w.pick(2)]
				w.setKey(l.Key, e)
				return fmt.Sprintf("flags of %s to %#x", l.Key, e.Flags)
			}
		}
	case 7:
		id := fmt.Sprintf("s%03d", w.pick(1000))
		w.sessions[id] = lockmodel.ObservedSession{ID: id, Node: "n1", TTL: []time.Duration{15 * time.Second, time.Minute}[w.pick(2)],
			LockDelay: 15 * time.Second, NodeChecks: []string{"serfHealth"}, CreateIndex: w.write()}
		return "create session " + id
	case 8:
		if id, ok := w.someSession(); ok {
			delete(w.sessions, id)
			w.write()
			if w.pick(4) != 0 { // else the key watch has not seen the release yet
				for key, e := range w.keys {
					if e.Session == id {
						e.Session = ""
						w.setKey(key, e)
					}
				}
			}
			return "destroy session " + id
		}
	case 9, 10:
		return w.acquire()
	case 11:
		return w.release()
	case 12, 13:
		d := []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, 20 * time.Minute, 45 * time.Minute}[w.pick(5)]
		w.now = w.now.Add(d)
		return "clock +" + d.String()
	}
	return "nothing"
}

// acquire has a session take a lock (a slot of a semaphore), with a holder
// value that may carry a start.
func (w *world) acquire() string {
	l, ok := w.someLock()
	id, ok2 := w.someSession()
	if !ok || !ok2 {
		return "nothing to acquire"
	}
	var value []byte
	if w.pick(2) == 0 {
		value = fmt.Appendf(nil, `{"node":"n1","pid":1,"started":%q}`, w.now.Add(-time.Duration(w.pick(120))*time.Minute).Format(time.RFC3339Nano))
	}
	if !l.IsSemaphore() {
		e, exists := w.keys[l.Key]
		if exists && e.Session != "" {
			return "acquire refused: " + l.Key + " is held"
		}
		if !exists {
			e.Flags = l.Flags()
		}
		e.Session, e.Value = id, value
		e.LockIndex++
		w.setKey(l.Key, e)
		return fmt.Sprintf("%s acquires %s", id, l.Key)
	}
	table, exists := w.keys[l.Key]
	if !exists {
		return "acquire refused: no holder table " + l.Key
	}
	st, err := lockmodel.DecodeSemaphoreState(table.Value)
	if err != nil {
		return "acquire refused: unusable table"
	}
	w.setKey(semaphoreDir(l)+id, lockmodel.KeyEntry{Session: id, Value: value, Flags: lockmodel.SemaphoreFlagValue})
	if w.pick(5) != 0 { // else it waits
		if st.Holders == nil {
			st.Holders = map[string]bool{}
		}
		st.Holders[id] = true
		table.Value, _ = lockmodel.EncodeSemaphoreState(st)
		w.setKey(l.Key, table)
	}
	return fmt.Sprintf("%s contends for %s", id, l.Key)
}

func (w *world) release() string {
	l, ok := w.someLock()
	if !ok {
		return "nothing to release"
	}
	if !l.IsSemaphore() {
		if e, exists := w.keys[l.Key]; exists && e.Session != "" {
			e.Session = ""
			w.setKey(l.Key, e)
			return "release " + l.Key
		}
		return "nothing to release"
	}
	for _, key := range sortedNames(w.keys) {
		if strings.HasPrefix(key, semaphoreDir(l)) && key != l.Key {
			delete(w.keys, key)
			w.write()
			return "delete contender key " + key
		}
	}
	return "nothing to release"
}

// feed answers the controller's watches as Consul would after the change,
// and keeps the reference's bookkeeping of the declarations.
func (w *world) feed() {
	c := w.c
	if w.declared {
		locks, profiles, versions := cloneMap(w.locks), cloneMap(w.profiles), cloneMap(w.versions)
		c.setDeclarations(locks, profiles, map[string]record.ACLPolicySpec{}, versions, w.now)
		w.referenceDeclarations()
		w.declared = false
	}
	c.mu.Lock()
	groups := make([]*group, 0, len(c.cache.groups))
	for _, g := range c.cache.groups {
		groups = append(groups, g)
	}
	c.mu.Unlock()
	for _, g := range groups {
		live := map[string]lockmodel.KeyEntry{}
		for key, e := range w.keys {
			if strings.HasPrefix(key, g.prefix) && g.covers(key) {
				live[key] = e
			}
		}
		c.markGroup(g, live, true)
	}
	c.mu.Lock()
	c.setSessions(cloneMap(w.sessions))
	c.mu.Unlock()
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// referenceDeclarations is what setDeclarations keeps for the decision:
// the versions seen and when they changed, and the profile switches.
func (w *world) referenceDeclarations() {
	switched := map[string]uint64{}
	for name, l := range w.locks {
		switch old, ok := w.prev[name]; {
		case ok && old.SessionDefaults != l.SessionDefaults && w.synced:
			switched[name] = w.versions[compliance.SettlingKey(lockmodel.KindLock, name)]
		case ok && w.switched[name] != 0:
			switched[name] = w.switched[name]
		}
	}
	w.switched, w.prev = switched, cloneMap(w.locks)
	seen := map[string]declVersion{}
	for id, index := range w.versions {
		v, ok := w.seen[id]
		if !ok || v.index != index {
			v = declVersion{index: index}
			if w.synced {
				v.changed = w.now
			}
		}
		seen[id] = v
	}
	w.seen, w.synced = seen, true
}

// reference is the State a controller that looks at every lock at every
// reconcile would decide on now.
func (w *world) reference() compliance.State {
	st := compliance.State{
		Locks: w.locks, Profiles: w.profiles, Policies: map[string]record.ACLPolicySpec{},
		Keys: map[string]lockmodel.KeyEntry{}, Sessions: w.sessions, Now: w.now,
		HeldSince: map[compliance.LockSession]time.Time{}, ProfileIndex: map[string]uint64{}, ProfileSwitched: w.switched,
	}
	for id, v := range w.seen {
		if compliance.Pending(v.index, v.index, v.changed, w.now, worldGrace) {
			if st.Settling == nil {
				st.Settling = map[string]bool{}
			}
			st.Settling[id] = true
		}
	}
	norm := map[string]lockmodel.Lock{}
	for name, l := range w.locks {
		norm[name], _ = l.Normalize()
	}
	for key, e := range w.keys {
		for _, l := range norm {
			if key == l.Key || (l.IsSemaphore() && strings.HasPrefix(key, semaphoreDir(l)) && !strings.Contains(key[len(semaphoreDir(l)):], "/")) {
				st.Keys[key] = e
			}
		}
	}
	for name := range w.profiles {
		st.ProfileIndex[name] = w.seen[compliance.SettlingKey(lockmodel.KindSessionDefaults, name)].index
	}
	looks := map[string]map[string]uint64{}
	for name, l := range norm {
		look := map[string]uint64{}
		for _, s := range compliance.HolderSessions(l, st.Keys, st.Sessions) {
			var acq uint64
			if !l.IsSemaphore() {
				acq = st.Keys[l.Key].LockIndex
			}
			look[s.ID] = acq
		}
		looks[name] = look
	}
	w.holds = compliance.TrackHolds(w.holds, looks, w.lastLook, w.now)
	for name := range looks {
		w.lastLook[name] = w.now
	}
	for name := range w.lastLook {
		if _, declared := norm[name]; !declared {
			delete(w.lastLook, name)
		}
	}
	for h, hold := range w.holds {
		l, declared := norm[h.Lock]
		if !declared {
			delete(w.holds, h)
			continue
		}
		key := l.Key
		if l.IsSemaphore() {
			key = semaphoreDir(l) + h.Session
		}
		var value []byte
		if e, ok := st.Keys[key]; ok && e.Session == h.Session {
			value = e.Value
		}
		st.HeldSince[h], _ = lockmodel.HoldStart(value, hold.Evidence(), w.now)
	}
	return st
}

// compare reconciles the controller once (its snapshot and verdicts) and
// compares with Decide on the reference state.
func (w *world) compare() error {
	c := w.c
	c.mu.Lock()
	st, ready, _ := c.snapshotLocked(w.now)
	if !ready {
		c.mu.Unlock()
		return fmt.Errorf("not ready")
	}
	got := c.decideDirty(st)
	heldSince := cloneHolds(c.recon.holdStart)
	c.mu.Unlock()
	ref := w.reference()
	want := compliance.Decide(ref, w.c.cfg.Mode)
	if len(got) != 0 || len(want) != 0 {
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("incremental verdicts differ from a full Decide:\n got %s\nwant %s", describe(got), describe(want))
		}
	}
	if len(heldSince) != len(ref.HeldSince) {
		return fmt.Errorf("holds: got %v, want %v", heldSince, ref.HeldSince)
	}
	for h, at := range ref.HeldSince {
		if !heldSince[h].Equal(at) {
			return fmt.Errorf("hold %+v began %s, want %s", h, heldSince[h], at)
		}
	}
	return nil
}

func cloneHolds(m map[compliance.LockSession]time.Time) map[compliance.LockSession]time.Time {
	out := make(map[compliance.LockSession]time.Time, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func describe(ds []compliance.Decision) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "\n  %s act=%v lock=%s session=%s reasons=%v detail=%q", d.Kind, d.Act, d.Lock, d.Session, d.Reasons, d.Detail)
	}
	return b.String()
}
