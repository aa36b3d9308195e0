package compliance

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// value is a holder value that says the hold started at started (zero:
// it says nothing).
func value(started time.Time) []byte {
	b, _ := json.Marshal(lockmodel.HolderValue{Node: "n1", PID: 1, Started: started})
	return b
}

// TestHoldStarts: a hold begins when its holder says (not after now, not
// after the observer first saw it, not before it last saw the lock
// without it); with neither a start nor evidence it is unknown; only
// holders by lockmodel.Holders count.
func TestHoldStarts(t *testing.T) {
	mutex := lockmodel.Lock{Name: "report", Prefix: "jobs/report", Key: mutexKey, Limit: 1}
	sem := lockmodel.Lock{Name: "thumbs", Prefix: "jobs/thumbs", Key: semKey, Limit: 3}
	sessions := map[string]lockmodel.ObservedSession{sessA: compliant(sessA), sessB: compliant(sessB)}
	held := func(v []byte) map[string]lockmodel.KeyEntry {
		return map[string]lockmodel.KeyEntry{mutexKey: {Flags: lockmodel.LockFlagValue, Session: sessA, LockIndex: 1, ModifyIndex: 20, Value: v}}
	}
	idA, idB := LockSession{Lock: "report", Session: sessA}, LockSession{Lock: "thumbs", Session: sessB}
	tests := []struct {
		name     string
		l        lockmodel.Lock
		keys     map[string]lockmodel.KeyEntry
		sessions map[string]lockmodel.ObservedSession
		holds    map[LockSession]Sighting
		want     map[LockSession]time.Time
	}{
		{name: "the holder's start", l: mutex, keys: held(value(t0.Add(-time.Hour))), sessions: sessions,
			want: map[LockSession]time.Time{idA: t0.Add(-time.Hour)}},
		{name: "a start after now is now", l: mutex, keys: held(value(t0.Add(time.Hour))), sessions: sessions,
			want: map[LockSession]time.Time{idA: t0}},
		{name: "no start, no evidence: unknown", l: mutex, keys: held([]byte("x")), sessions: sessions,
			want: map[LockSession]time.Time{}},
		{name: "no start: first seen", l: mutex, keys: held(nil), sessions: sessions,
			holds: map[LockSession]Sighting{idA: {FirstSeen: t0.Add(-time.Minute)}},
			want:  map[LockSession]time.Time{idA: t0.Add(-time.Minute)}},
		{name: "a start before the last look without the hold is that look", l: mutex, keys: held(value(t0.Add(-time.Hour))), sessions: sessions,
			holds: map[LockSession]Sighting{idA: {FirstSeen: t0.Add(-time.Minute), NotBefore: t0.Add(-2 * time.Minute)}},
			want:  map[LockSession]time.Time{idA: t0.Add(-2 * time.Minute)}},
		{name: "a session the read does not list holds nothing", l: mutex, keys: held(value(t0)), sessions: map[string]lockmodel.ObservedSession{},
			want: map[LockSession]time.Time{}},
		{name: "no session read: none", l: mutex, keys: held(value(t0)), want: nil},
		{name: "a semaphore holder's start is in its contender key", l: sem, sessions: sessions, keys: map[string]lockmodel.KeyEntry{
			semKey:                 {Flags: lockmodel.SemaphoreFlagValue, Value: []byte(`{"Limit":3,"Holders":{"` + sessB + `":true}}`)},
			"jobs/thumbs/" + sessB: {Session: sessB, Value: value(t0.Add(-time.Hour))},
			"jobs/thumbs/" + sessA: {Session: sessA, Value: value(t0.Add(-2 * time.Hour))}, // waiting: not listed
		}, want: map[LockSession]time.Time{idB: t0.Add(-time.Hour)}},
		{name: "a listed semaphore session without its contender key holds nothing", l: sem, sessions: sessions, keys: map[string]lockmodel.KeyEntry{
			semKey: {Flags: lockmodel.SemaphoreFlagValue, Value: []byte(`{"Limit":3,"Holders":{"` + sessB + `":true}}`)},
		}, want: map[LockSession]time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HoldStarts(tt.l, tt.keys, tt.sessions, tt.holds, t0)
			if (got == nil) != (tt.want == nil) || !maps.EqualFunc(got, tt.want, time.Time.Equal) {
				t.Errorf("HoldStarts = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestObservationState: State keeps what was read (keys that are no lock's
// included) and adds when each hold began, on which Decide judges max_hold.
func TestObservationState(t *testing.T) {
	base := baseState()
	keys := maps.Clone(base.Keys)
	keys[mutexKey] = lockmodel.KeyEntry{Flags: lockmodel.LockFlagValue, Session: sessA, LockIndex: 1, ModifyIndex: 20, Value: value(t0.Add(-2 * time.Hour))}
	keys["jobs/report/.queue/x"] = lockmodel.KeyEntry{Session: sessA} // not a lock's key: ignored
	o := Observation{Read: State{
		Locks: base.Locks, Profiles: base.Profiles, ProfileIndex: map[string]uint64{"strict": 5},
		Keys: keys, Sessions: map[string]lockmodel.ObservedSession{sessA: compliant(sessA)},
		Settling: map[string]bool{SettlingKey(lockmodel.KindLock, "thumbs"): true}, Now: t0,
	}}
	st := o.State()
	if len(st.Locks) != 2 || st.ProfileIndex["strict"] != 5 || !st.Settling["locks/thumbs"] || !st.Now.Equal(t0) || len(st.Keys) != 3 {
		t.Errorf("State did not keep what was read: %+v", st)
	}
	if got := st.HeldSince[LockSession{Lock: "report", Session: sessA}]; !got.Equal(t0.Add(-2*time.Hour)) || len(st.HeldSince) != 1 {
		t.Errorf("HeldSince = %v, want report's holder since 2h ago", st.HeldSince)
	}
	ds := Decide(st, ModeEnforce)
	if len(ds) != 1 || ds[0].Kind != KindEndSession || ds[0].Lock != "report" || ds[0].Session != sessA {
		t.Errorf("Decide = %+v, want one end_session of report's holder (held 2h, max_hold 1h)", ds)
	}
}
