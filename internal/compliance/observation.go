package compliance

import (
	"maps"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Observation is what one observer read of Consul, and what it saw itself
// over time: `consullock status`'s read, the controller's watches' last
// answers. State turns it into what Decide judges, the same way for both.
type Observation struct {
	// Read is what was read; its HeldSince is ignored: State derives it
	// from the keys, the sessions and Holds.
	Read State
	// Holds is what the observer saw itself of each hold (TrackHolds);
	// nil for one that keeps no history (a single read).
	Holds map[LockSession]Sighting
}

// State is the State of o, with when each hold of a declared lock began
// (HoldStarts).
func (o Observation) State() State {
	st := o.Read
	st.HeldSince = map[LockSession]time.Time{}
	for _, l := range st.Locks {
		maps.Copy(st.HeldSince, HoldStarts(l, st.Keys, st.Sessions, o.Holds, st.Now))
	}
	return st
}

// HoldStarts returns when each hold of lock l (normalized, as decoded)
// began, by lockmodel.HoldStart: the start its holder wrote into the key
// it holds (the mutex key; its contender key for a semaphore), bounded by
// what the observer saw itself of the hold (holds; nil: nothing). A hold
// with neither a start nor evidence is left out (unknown). The holds are
// HolderSessions': none without a session read (sessions nil).
// Observation.State applies it to every lock; an observer that keeps its
// State up to date lock by lock applies it to the locks it looks at again.
func HoldStarts(l lockmodel.Lock, keys map[string]lockmodel.KeyEntry, sessions map[string]lockmodel.ObservedSession, holds map[LockSession]Sighting, now time.Time) map[LockSession]time.Time {
	if sessions == nil {
		return nil
	}
	out := map[LockSession]time.Time{}
	for _, h := range lockmodel.Holders(lockStateOf(l, keys, sessions)) {
		id := LockSession{Lock: l.Name, Session: h.Session}
		if start, ok := lockmodel.HoldStart(h.Entry.Value, holds[id].Evidence(), now); ok {
			out[id] = start
		}
	}
	return out
}

// lockStateOf is l as lockmodel.Holders reads it from keys and sessions.
func lockStateOf(l lockmodel.Lock, keys map[string]lockmodel.KeyEntry, sessions map[string]lockmodel.ObservedSession) lockmodel.LockState {
	st := lockmodel.LockState{Key: l.Key, Semaphore: l.IsSemaphore(), Keys: keys, Sessions: sessions}
	if e, ok := keys[l.Key]; ok {
		st.Entry = &e
	}
	return st
}
