package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

const (
	mutexKey = "jobs/report/.lock"
	sessA    = "aaaaaaaa-0000-0000-0000-000000000001"
)

// compliant is a session with no profile to break.
func compliant(id string) lockmodel.ObservedSession {
	return lockmodel.ObservedSession{ID: id, Node: "n1", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
		Behavior: lockmodel.BehaviorRelease, NodeChecks: []string{"serfHealth"}}
}

// snapshotController is a controller that never runs, with one declared
// mutex (max_hold 1h) whose key's watch has answered with value.
func snapshotController(t *testing.T, value []byte) *Controller {
	t.Helper()
	c, err := New(nil, Config{Mode: compliance.ModeEnforce, ApplyGrace: compliance.DefaultApplyGrace})
	if err != nil {
		t.Fatal(err)
	}
	c.cache.registrySync = true
	c.cache.locks = map[string]lockmodel.Lock{"report": {Name: "report", Prefix: "jobs/report", Key: mutexKey, Limit: 1, MaxHold: time.Hour}}
	c.cache.sessions = map[string]lockmodel.ObservedSession{sessA: compliant(sessA)}
	c.cache.groups[mutexKey] = &group{prefix: mutexKey, synced: true, live: map[string]lockmodel.KeyEntry{
		mutexKey: {Flags: lockmodel.LockFlagValue, Session: sessA, LockIndex: 1, ModifyIndex: 10, Value: value}}}
	c.cache.keyGroup[mutexKey] = mutexKey
	return c
}

// TestSnapshot_maxHoldIsTimedByHoldStart: max_hold is judged from
// lockmodel.HoldStart. A controller whose first look at the lock already
// shows the hold (it has just started, or took over) believes the start
// the holder wrote, bounded by now: a holder that says it started 2h ago is
// past a 1h max_hold at once, whatever controller restarts came between.
// A start in the future, none, or the zero time is timed from first sight.
func TestSnapshot_maxHoldIsTimedByHoldStart(t *testing.T) {
	now := time.Now() // with a monotonic reading, as the controller's
	holder := compliance.LockSession{Lock: "report", Session: sessA}
	started := func(at time.Time) []byte {
		return []byte(`{"node":"n1","pid":1,"started":"` + at.UTC().Format(time.RFC3339Nano) + `"}`)
	}
	for _, tc := range []struct {
		name  string
		value []byte
		since time.Time // want
	}{
		{"no holder value", nil, now},
		{"started 2h in the future", started(now.Add(2 * time.Hour)), now},
		{"started at the zero time", []byte(`{"node":"n1","pid":1,"started":"0001-01-01T00:00:00Z"}`), now},
		{"started 10m ago", started(now.Add(-10 * time.Minute)), now.Add(-10 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := snapshotController(t, tc.value)
			st, ready, next := c.snapshot(now)
			if !ready {
				t.Fatal("snapshot not ready")
			}
			if since := st.HeldSince[holder]; !since.Equal(tc.since) {
				t.Errorf("held since %s; want %s", since, tc.since)
			}
			if want := tc.since.Add(time.Hour + time.Millisecond); !next.Equal(want) {
				t.Errorf("next max_hold deadline %s, want %s", next, want)
			}
			if ds := compliance.Decide(st, compliance.ModeEnforce); len(ds) != 0 {
				t.Errorf("decisions on first sight: %+v", ds)
			}
			st, _, _ = c.snapshot(tc.since.Add(59 * time.Minute))
			if ds := compliance.Decide(st, compliance.ModeEnforce); len(ds) != 0 {
				t.Errorf("decisions after 59m of a 1h max_hold: %+v", ds)
			}
			st, _, _ = c.snapshot(tc.since.Add(61 * time.Minute))
			if ds := compliance.Decide(st, compliance.ModeEnforce); len(ds) != 1 || ds[0].Kind != compliance.KindEndSession || !slices.Equal(ds[0].Reasons, []string{compliance.ReasonMaxHoldExceeded}) {
				t.Errorf("decisions after 61m of a 1h max_hold: %+v; want one end_session for max_hold_exceeded", ds)
			}
		})
	}

	t.Run("started 2h ago, first seen by a controller that just started", func(t *testing.T) {
		c := snapshotController(t, started(now.Add(-2*time.Hour)))
		st, _, _ := c.snapshot(now)
		if since := st.HeldSince[holder]; !since.Equal(now.Add(-2 * time.Hour)) {
			t.Errorf("held since %s; want the holder's start %s", since, now.Add(-2*time.Hour))
		}
		if ds := compliance.Decide(st, compliance.ModeEnforce); len(ds) != 1 || ds[0].Kind != compliance.KindEndSession || !slices.Equal(ds[0].Reasons, []string{compliance.ReasonMaxHoldExceeded}) {
			t.Errorf("decisions on first sight of a hold 2h old: %+v; want one end_session for max_hold_exceeded", ds)
		}
	})

	t.Run("started 2h ago by its clock, but acquired after this controller saw the lock unheld", func(t *testing.T) {
		c := snapshotController(t, started(now.Add(-2*time.Hour)))
		g := c.cache.groups[mutexKey]
		held := g.live[mutexKey]
		c.markGroup(g, map[string]lockmodel.KeyEntry{mutexKey: {Flags: lockmodel.LockFlagValue, ModifyIndex: 9}}, true)
		unheldAt := now.Add(-time.Minute)
		c.snapshot(unheldAt)
		c.markGroup(g, map[string]lockmodel.KeyEntry{mutexKey: held}, true)
		st, _, _ := c.snapshot(now)
		if since := st.HeldSince[holder]; !since.Equal(unheldAt) {
			t.Errorf("held since %s; want %s, when this controller last saw the lock unheld", since, unheldAt)
		}
		if ds := compliance.Decide(st, compliance.ModeEnforce); len(ds) != 0 {
			t.Errorf("decisions on a hold at most 1m old: %+v", ds)
		}
	})
}
