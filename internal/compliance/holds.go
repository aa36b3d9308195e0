package compliance

import (
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// LockSession identifies one hold: one session holding one lock.
type LockSession struct {
	Lock, Session string
}

// HolderSessions returns the sessions holding l by lockmodel.Holders (the rule
// status, the data source and the protocol apply too), as the session
// watch last saw them: the key's session for a mutex; for a semaphore a
// session the holder table lists that also holds its contender key in
// keys. Sessions the session watch has not seen are left out: nothing is
// judged on a guess; without a session watch answer (nil) there are none.
func HolderSessions(l lockmodel.Lock, keys map[string]lockmodel.KeyEntry, sessions map[string]lockmodel.ObservedSession) []lockmodel.ObservedSession {
	if sessions == nil {
		return nil
	}
	var out []lockmodel.ObservedSession
	for _, h := range lockmodel.Holders(lockStateOf(l, keys, sessions)) {
		out = append(out, sessions[h.Session])
	}
	return out
}

// Sighting is what this controller has itself seen of one holder's hold, on
// its own clock; lockmodel.HoldStart turns it and the holder's value into
// the time the hold began.
type Sighting struct {
	// FirstSeen is when this controller first saw the hold.
	FirstSeen time.Time
	// NotBefore is when this controller last saw the lock without this
	// hold; zero when the hold already existed at its first look at the
	// lock (it has just started, or just got the lock's state back).
	NotBefore time.Time
	// Acquisition tells acquisitions by the same session apart: a mutex
	// key's LockIndex (Consul raises it when a session acquires the
	// unheld key, the same session again included); 0 when unknown.
	Acquisition uint64
}

// Evidence is h as lockmodel.HoldStart takes it.
func (h Sighting) Evidence() lockmodel.HoldEvidence {
	return lockmodel.HoldEvidence{FirstSeen: h.FirstSeen, NotBefore: h.NotBefore}
}

// TrackHolds returns what this controller has seen of each hold after a
// look at the locks in looks (lock name -> the sessions holding it, each
// with its acquisition mark), taken at now on the controller's own clock.
// lastLook is, by lock name, when it last looked before (absent: never).
//
//   - A hold already in prev, with the same acquisition mark, keeps its
//     evidence.
//   - A new hold (a new holder, or the same session with another mark) is
//     first seen now, and began after the last look at its lock, which
//     did not show it (NotBefore; zero on the first look).
//   - A hold of a looked-at lock that is no longer current is forgotten;
//     the holds of locks not looked at this time (their state is unknown)
//     are kept as they are.
func TrackHolds(prev map[LockSession]Sighting, looks map[string]map[string]uint64, lastLook map[string]time.Time, now time.Time) map[LockSession]Sighting {
	out := make(map[LockSession]Sighting, len(prev))
	for h, p := range prev {
		if _, looked := looks[h.Lock]; !looked {
			out[h] = p
		}
	}
	for lock, sessions := range looks {
		for session, acq := range sessions {
			h := LockSession{Lock: lock, Session: session}
			p, ok := prev[h]
			if !ok || p.Acquisition != acq {
				p = Sighting{FirstSeen: now, NotBefore: lastLook[lock], Acquisition: acq}
			}
			out[h] = p
		}
	}
	return out
}
