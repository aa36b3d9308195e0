package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// holding reports whether the controller has seen lock name held.
func (c *Controller) holding(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := c.lockStatus[name]
	return ls != nil && ls.held
}

// acquireWith acquires key for session with value as the holder value.
func (h *harness) acquireWith(key, session string, value []byte) {
	h.t.Helper()
	ok, _, err := h.api.KV().Acquire(&api.KVPair{Key: key, Session: session, Flags: lockmodel.LockFlagValue, Value: value}, nil)
	if err != nil || !ok {
		h.t.Fatalf("acquire %s with %s: ok=%v err=%v", key, session, ok, err)
	}
}

// TestEnforce_holdersThatPredateAProfileChangeAreLeftToFinish: tightening a
// profile does not end the holders whose sessions were created before the
// change (by Raft index); a session created after it is ended.
func TestEnforce_holdersThatPredateAProfileChangeAreLeftToFinish(t *testing.T) {
	h := newHarness(t, agent)
	profile := lockmodel.SessionProfile{Name: h.name("p"), TTL: 60 * time.Second, LockDelay: 15 * time.Second}
	h.declareProfile(profile)
	before := h.declareLock(lockmodel.Lock{Name: h.name("1before"), Prefix: h.prefix + "/before", SessionDefaults: profile.Name})
	after := h.declareLock(lockmodel.Lock{Name: h.name("2after"), Prefix: h.prefix + "/after", SessionDefaults: profile.Name})
	c := h.start(ModeEnforce)
	h.waitKey(before.Key)
	h.waitKey(after.Key)

	old := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(before.Key, old)
	eventually(t, 10*time.Second, func() error {
		if !c.holding(before.Name) {
			return fmt.Errorf("the controller has not seen the holder yet")
		}
		return nil
	})
	if n := len(c.logs.lines(`"msg":"drift detected"`, old)); n != 0 {
		t.Fatalf("a compliant holder was reported %d times", n)
	}

	// Tighten: ttl 60s -> 15s. The old session now breaks the profile.
	profile.TTL = 15 * time.Second
	h.declareProfile(profile)
	young := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(after.Key, young)

	eventually(t, 15*time.Second, func() error {
		if h.sessionAlive(young) {
			return fmt.Errorf("the session created after the change (%s) is still alive", young)
		}
		if len(c.logs.lines(`"msg":"drift detected"`, old)) == 0 {
			return fmt.Errorf("the session created before the change (%s) is not reported", old)
		}
		return nil
	})
	reports := c.logs.lines(`"msg":"drift detected"`, old)
	if len(reports) != 1 || !strings.Contains(reports[0], `"kind":"holder_predates_profile"`) ||
		!strings.Contains(reports[0], ReasonPredatesProfile) || !strings.Contains(reports[0], `"act":false`) {
		t.Errorf("reports of the older holder:\n%s\nwant one holder_predates_profile, act false, reason %s", strings.Join(reports, "\n"), ReasonPredatesProfile)
	}
	if !h.sessionAlive(old) {
		t.Fatal("the holder whose session predates the profile change was ended")
	}
	if p := h.get(before.Key); p == nil || p.Session != old {
		t.Errorf("the older holder lost its lock: %+v", p)
	}
	if got := c.Metrics().ViolationsTotal(ReasonPredatesProfile); got != 1 {
		t.Errorf("violations_total{reason=%q} = %v, want 1", ReasonPredatesProfile, got)
	}
	if got := c.Metrics().RepairsTotal(KindEndSession); got != 1 {
		t.Errorf("repairs_total{kind=end_session} = %v, want 1 (the younger session only)", got)
	}
}

// TestEnforce_maxHoldIgnoresTheHolderClock: the "started" in a holder value
// is the holder node's clock. A holder that claims to have started 2h ago
// is not ended by a 1h max_hold on first sight, and one that claims to
// start in an hour is ended 2s after the controller saw it.
func TestEnforce_maxHoldIgnoresTheHolderClock(t *testing.T) {
	h := newHarness(t, agent)
	// Named so that the skewed-past lock is decided first in a round.
	past := h.declareLock(lockmodel.Lock{Name: h.name("1past"), Prefix: h.prefix + "/past", MaxHold: time.Hour})
	future := h.declareLock(lockmodel.Lock{Name: h.name("2future"), Prefix: h.prefix + "/future", MaxHold: 2 * time.Second})
	c := h.start(ModeEnforce)
	h.waitKey(past.Key)
	h.waitKey(future.Key)

	value := func(started time.Time) []byte {
		v, err := json.Marshal(lockmodel.HolderValue{Node: "skewed", PID: 1, Started: started.UTC()})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	early := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	h.acquireWith(past.Key, early, value(time.Now().Add(-2*time.Hour)))
	late := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	seen := time.Now()
	h.acquireWith(future.Key, late, value(time.Now().Add(time.Hour)))

	// Both keys are in one watch: the round that ends the second holder
	// has seen the first one too.
	eventually(t, 20*time.Second, func() error {
		if h.sessionAlive(late) {
			return fmt.Errorf("the holder past its 2s max_hold (claiming a future start) is still alive")
		}
		return nil
	})
	if took := time.Since(seen); took < 2*time.Second {
		t.Errorf("ended %s after it acquired, before its 2s max_hold", took.Round(time.Millisecond))
	}
	if !h.sessionAlive(early) {
		t.Fatal("a holder within max_hold was ended because its value claims an earlier start")
	}
	if n := len(c.logs.lines(`"msg":"drift detected"`, early)); n != 0 {
		t.Errorf("the holder within max_hold was reported: %s", strings.Join(c.logs.lines(early), "\n"))
	}
	if got := c.Metrics().ViolationsTotal(ReasonMaxHoldExceeded); got != 1 {
		t.Errorf("violations_total{reason=max_hold_exceeded} = %v, want 1", got)
	}
}

// TestEnforce_switchingALockToAStricterProfileLeavesItsHolder: a lock
// whose declaration starts naming a stricter profile (an apply changing
// session_defaults) keeps its current holder; a holder whose session was
// created after the switch is held to the new profile.
func TestEnforce_switchingALockToAStricterProfileLeavesItsHolder(t *testing.T) {
	const grace = 500 * time.Millisecond
	h := newHarness(t, agent)
	loose := lockmodel.SessionProfile{Name: h.name("loose"), TTL: 60 * time.Second, LockDelay: 15 * time.Second}
	strict := lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second}
	h.declareProfile(loose)
	h.declareProfile(strict)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l", SessionDefaults: loose.Name})
	c := h.startWith(startOpts{mode: ModeEnforce, configure: func(cfg *Config) { cfg.ApplyGrace = grace }})
	h.waitKey(l.Key)
	old := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(l.Key, old)
	eventually(t, 10*time.Second, func() error {
		if !c.holding(l.Name) {
			return fmt.Errorf("the controller has not seen the holder yet")
		}
		return nil
	})

	l.SessionDefaults = strict.Name
	h.declareLock(l)
	eventually(t, 10*time.Second, func() error {
		if len(c.logs.lines(`"msg":"drift detected"`, `"kind":"holder_predates_profile"`, old)) == 0 {
			return fmt.Errorf("the holder created before the switch is not reported as predating it")
		}
		return nil
	})
	if !h.sessionAlive(old) {
		t.Fatal("the holder created before the switch was ended")
	}

	// The old holder finishes; the next one is created after the switch.
	if _, _, err := h.api.KV().Release(&api.KVPair{Key: l.Key, Session: old, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	young := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(l.Key, young)
	eventually(t, 10*time.Second, func() error {
		if h.sessionAlive(young) {
			return fmt.Errorf("the holder created after the switch is still alive")
		}
		return nil
	})
	if !h.sessionAlive(old) {
		t.Error("the released older session was ended")
	}
}
