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
	// The declarations, by name, and each profile record's ModifyIndex
	// (State.ProfileIndex).
	Locks        map[string]lockmodel.Lock
	Profiles     map[string]lockmodel.SessionProfile
	ProfileIndex map[string]uint64
	Policies     map[string]lockmodel.ACLPolicySpec

	// Keys are the keys listed under the lock prefixes, by key; the lock
	// keys and the semaphores' contender keys are judged, other keys are
	// ignored. UnknownKeys, Sessions and LivePolicies: as in State.
	Keys         map[string]lockmodel.KeyEntry
	UnknownKeys  map[string]bool
	Sessions     map[string]lockmodel.ObservedSession
	LivePolicies map[string]LivePolicy

	// Holds is what the observer saw itself of each hold (TrackHolds);
	// nil for one that keeps no history (a single read).
	Holds map[HoldID]Hold
	// ProfileSwitched and Settling: as in State.
	ProfileSwitched map[string]uint64
	Settling        map[string]bool

	Now time.Time
}

// State is the State of o: its declarations, keys and sessions, and when
// each hold of a declared lock began (HoldStarts).
func (o Observation) State() State {
	st := State{
		Locks: o.Locks, Profiles: o.Profiles, Policies: o.Policies, ProfileIndex: o.ProfileIndex,
		Keys: o.Keys, UnknownKeys: o.UnknownKeys, Sessions: o.Sessions, LivePolicies: o.LivePolicies,
		HeldSince: map[HoldID]time.Time{}, ProfileSwitched: o.ProfileSwitched, Settling: o.Settling, Now: o.Now,
	}
	for _, l := range o.Locks {
		maps.Copy(st.HeldSince, HoldStarts(l, o.Keys, o.Sessions, o.Holds, o.Now))
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
func HoldStarts(l lockmodel.Lock, keys map[string]lockmodel.KeyEntry, sessions map[string]lockmodel.ObservedSession, holds map[HoldID]Hold, now time.Time) map[HoldID]time.Time {
	if sessions == nil {
		return nil
	}
	out := map[HoldID]time.Time{}
	for _, h := range lockmodel.Holders(lockStateOf(l, keys, sessions)) {
		id := HoldID{Lock: l.Name, Session: h.Session}
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
