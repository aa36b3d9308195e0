package controller

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// holding reports whether the controller has seen lock name held.
func (c *Controller) holding(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := c.recon.lockStatus[name]
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
	c := h.start(compliance.ModeEnforce)
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
		!strings.Contains(reports[0], compliance.ReasonPredatesProfile) || !strings.Contains(reports[0], `"act":false`) {
		t.Errorf("reports of the older holder:\n%s\nwant one holder_predates_profile, act false, reason %s", strings.Join(reports, "\n"), compliance.ReasonPredatesProfile)
	}
	if !h.sessionAlive(old) {
		t.Fatal("the holder whose session predates the profile change was ended")
	}
	if p := h.get(before.Key); p == nil || p.Session != old {
		t.Errorf("the older holder lost its lock: %+v", p)
	}
	if got := c.Metrics().ViolationsTotal(compliance.ReasonPredatesProfile); got != 1 {
		t.Errorf("violations_total{reason=%q} = %v, want 1", compliance.ReasonPredatesProfile, got)
	}
	if got := c.Metrics().RepairsTotal(compliance.KindEndSession); got != 1 {
		t.Errorf("repairs_total{kind=end_session} = %v, want 1 (the younger session only)", got)
	}
}

// TestEnforce_maxHoldBoundsTheHolderClockByWhatItSaw: the "started" in a
// holder value is the holder node's clock, believed only within what the
// controller saw itself (lockmodel.HoldStart). A holder that acquired
// after the controller saw the lock unheld, claiming to have started 2h
// ago, is not ended by a 1h max_hold on first sight; one that claims to
// start in an hour is ended 2s after the controller saw it.
func TestEnforce_maxHoldBoundsTheHolderClockByWhatItSaw(t *testing.T) {
	h := newHarness(t, agent)
	// Named so that the skewed-past lock is decided first in a round.
	past := h.declareLock(lockmodel.Lock{Name: h.name("1past"), Prefix: h.prefix + "/past", MaxHold: time.Hour})
	future := h.declareLock(lockmodel.Lock{Name: h.name("2future"), Prefix: h.prefix + "/future", MaxHold: 2 * time.Second})
	c := h.start(compliance.ModeEnforce)
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
	if got := c.Metrics().ViolationsTotal(compliance.ReasonMaxHoldExceeded); got != 1 {
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
	c := h.startWith(startOpts{mode: compliance.ModeEnforce, configure: func(cfg *Config) { cfg.ApplyGrace = grace }})
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

// TestEnforce_maxHoldSurvivesAControllerRestart: a hold is timed from the
// start its holder wrote, not from when a controller first saw it, so a
// restart (or a take-over by another replica) does not restart the count.
// A holder whose value says it acquired 2h ago, seen first by a controller
// that was not running then, is past a 1h max_hold at once: the first
// controller reports it, the next one (enforce) ends it.
func TestEnforce_maxHoldSurvivesAControllerRestart(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l", MaxHold: time.Hour})
	if _, err := h.api.KV().Put(&api.KVPair{Key: l.Key, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	value, err := json.Marshal(lockmodel.HolderValue{Node: "worker-1", PID: 1, Started: time.Now().Add(-2 * time.Hour).UTC(), Lock: l.Name})
	if err != nil {
		t.Fatal(err)
	}
	holder := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	h.acquireWith(l.Key, holder, value)

	first := h.start(compliance.ModeObserve)
	eventually(t, 10*time.Second, func() error {
		if len(first.logs.lines(`"msg":"drift detected"`, compliance.ReasonMaxHoldExceeded, holder)) == 0 {
			return fmt.Errorf("the controller has not reported the 2h-old hold as past its 1h max_hold")
		}
		return nil
	})
	srv := httptest.NewServer(first.Handler())
	held := scrape(t, srv.URL)[fmt.Sprintf("consullock_lock_holder_held_seconds{lock=%q,session=%q}", l.Name, holder)]
	srv.Close()
	if held < (2 * time.Hour).Seconds() {
		t.Errorf("holder_held_seconds = %v, want at least 7200 (the holder's start, 2h ago)", held)
	}
	first.stop()
	if !h.sessionAlive(holder) {
		t.Fatal("observe mode ended a session")
	}

	restarted := time.Now()
	second := h.start(compliance.ModeEnforce)
	eventually(t, 10*time.Second, func() error {
		if h.sessionAlive(holder) {
			return fmt.Errorf("the restarted controller has not ended the holder past max_hold")
		}
		return nil
	})
	t.Logf("the restarted controller ended the 2h-old hold (max_hold 1h) %s after it started", time.Since(restarted).Round(time.Millisecond))
	if got := second.Metrics().ViolationsTotal(compliance.ReasonMaxHoldExceeded); got != 1 {
		t.Errorf("violations_total{reason=max_hold_exceeded} = %v, want 1", got)
	}
}

// TestMetrics_fencingTokensOfMutexAndSemaphoreHolders: every holder has a
// consullock_lock_holder_fencing_token, the ModifyIndex of its mutex key or
// semaphore contender key (the token status and the data source report);
// the lock's consullock_lock_fencing_token is the highest of them, for a
// semaphore too. consullock_lock_always_held follows the declaration.
func TestMetrics_fencingTokensOfMutexAndSemaphoreHolders(t *testing.T) {
	h := newHarness(t, agent)
	mutex := h.declareLock(lockmodel.Lock{Name: h.name("daemon"), Prefix: h.prefix + "/daemon", AlwaysHeld: true})
	sem := h.declareLock(lockmodel.Lock{Name: h.name("workers"), Prefix: h.prefix + "/workers", Limit: 3})
	c := h.start(compliance.ModeRepair)
	h.waitKey(mutex.Key)
	h.waitKey(sem.Key)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

	owner := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	h.acquire(mutex.Key, owner)
	var sessions []string
	for range 2 {
		sm, err := h.api.SemaphorePrefix(sem.Prefix, 3)
		if err != nil {
			t.Fatal(err)
		}
		if lost, err := sm.Acquire(nil); err != nil || lost == nil {
			t.Fatalf("api.Semaphore acquire: %v", err)
		}
		t.Cleanup(func() { _ = sm.Release() })
	}
	table, _ := lockmodel.DecodeSemaphoreState(h.get(sem.Key).Value)
	for id := range table.Holders {
		sessions = append(sessions, id)
	}
	if len(sessions) != 2 {
		t.Fatalf("semaphore holders %v, want 2", table.Holders)
	}

	want := map[string]float64{
		fmt.Sprintf("consullock_lock_holder_fencing_token{lock=%q,session=%q}", mutex.Name, owner): float64(h.get(mutex.Key).ModifyIndex),
		lockSeries("consullock_lock_fencing_token", mutex.Name):                                    float64(h.get(mutex.Key).ModifyIndex),
		lockSeries("consullock_lock_always_held", mutex.Name):                                      1,
		lockSeries("consullock_lock_always_held", sem.Name):                                        0,
	}
	var highest uint64
	for _, id := range sessions {
		token := h.get(sem.Prefix + "/" + id).ModifyIndex
		highest = max(highest, token)
		want[fmt.Sprintf("consullock_lock_holder_fencing_token{lock=%q,session=%q}", sem.Name, id)] = float64(token)
	}
	want[lockSeries("consullock_lock_fencing_token", sem.Name)] = float64(highest)
	eventually(t, 10*time.Second, func() error {
		m := scrape(t, srv.URL)
		for series, v := range want {
			if got, ok := m[series]; !ok || got != v {
				return fmt.Errorf("%s = %v (exported %v), want %v", series, got, ok, v)
			}
		}
		return nil
	})
}
