package controller

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestHolders_agreeWithTheOneRule feeds the shared Consul states to the
// controller's holders (what it judges and exports as
// consullock_lock_holder_info): it must name the holders lockmodel.Holders
// names, which status, the data source and the protocol name too.
func TestHolders_agreeWithTheOneRule(t *testing.T) {
	for _, c := range holdercases.Cases {
		l := c.Lock()
		keys := map[string]lockmodel.KeyEntry{}
		for _, e := range c.Entries(l.Prefix, holdercases.ID) {
			keys[e.Key] = e.KeyEntry
		}
		got := []string{}
		for _, s := range compliance.HolderSessions(l, keys, c.Sessions(holdercases.ID)) {
			got = append(got, s.ID)
		}
		if want := c.WantIDs(holdercases.ID); !slices.Equal(got, want) {
			t.Errorf("%s: controller holders = %q, want %q", c.Name, got, want)
		}
	}
}

// listedWithoutKey declares a semaphore of limit 3 under a profile of ttl
// 15s, starts a controller in mode and makes three sessions listed in its
// holder table: compliant holds its contender key, violating (ttl 60s)
// holds its contender key, released (ttl 60s) released it.
func listedWithoutKey(t *testing.T, mode compliance.Mode) (h *harness, c *running, sem lockmodel.Lock, compliant, violating, released string) {
	h = newHarness(t, agent)
	profile := lockmodel.SessionProfile{Name: h.name("p"), TTL: 15 * time.Second, LockDelay: 15 * time.Second, Behavior: lockmodel.BehaviorDelete}
	h.declareProfile(profile)
	sem = h.declareLock(lockmodel.Lock{Name: h.name("workers"), Prefix: h.prefix + "/workers", Limit: 3, SessionDefaults: profile.Name})
	c = h.start(mode)
	if mode != compliance.ModeObserve {
		h.waitKey(sem.Key) // recreated by the controller; written below in observe mode
	}

	compliant = h.session(api.SessionEntry{LockDelay: 15 * time.Second, Behavior: api.SessionBehaviorDelete}, false)
	violating = h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second, Behavior: api.SessionBehaviorDelete}, false)
	released = h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second, Behavior: api.SessionBehaviorDelete}, false)
	for _, s := range []string{compliant, violating, released} {
		ok, _, err := h.api.KV().Acquire(&api.KVPair{Key: sem.Prefix + "/" + s, Session: s, Flags: lockmodel.SemaphoreFlagValue}, nil)
		if err != nil || !ok {
			t.Fatalf("acquire the contender key of %s: %v %v", s, ok, err)
		}
	}
	if ok, _, err := h.api.KV().Release(&api.KVPair{Key: sem.Prefix + "/" + released, Session: released, Flags: lockmodel.SemaphoreFlagValue}, nil); err != nil || !ok {
		t.Fatalf("release the contender key of %s: %v %v", released, ok, err)
	}
	table, err := lockmodel.EncodeSemaphoreState(lockmodel.SemaphoreState{Limit: 3, Holders: map[string]bool{compliant: true, violating: true, released: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.api.KV().Put(&api.KVPair{Key: sem.Key, Flags: lockmodel.SemaphoreFlagValue, Value: table}, nil); err != nil {
		t.Fatal(err)
	}
	return h, c, sem, compliant, violating, released
}

// holderInfo says which of sessions consullock_lock_holder_info lists for lock.
func holderInfo(t *testing.T, url, lock string, sessions ...string) map[string]bool {
	listed := map[string]bool{}
	for series := range scrape(t, url) {
		if !strings.HasPrefix(series, "consullock_lock_holder_info{") || !strings.Contains(series, fmt.Sprintf("lock=%q", lock)) {
			continue
		}
		for _, s := range sessions {
			if strings.Contains(series, fmt.Sprintf("session=%q", s)) {
				listed[s] = true
			}
		}
	}
	return listed
}

// TestEnforce_aListedSessionWithoutItsContenderKeyHoldsNoSlot: a session
// the holder table still lists after it released its contender key holds
// no slot (status, the data source and its own monitor say so): the
// controller does not end it for breaking the profile. A listed session
// that holds its key and breaks the profile is ended (enforce acts on
// semaphore holders, through the fresh read before acting).
func TestEnforce_aListedSessionWithoutItsContenderKeyHoldsNoSlot(t *testing.T) {
	h, c, _, _, violating, released := listedWithoutKey(t, compliance.ModeEnforce)
	eventually(t, 15*time.Second, func() error {
		if h.sessionAlive(violating) {
			return fmt.Errorf("the violating holder %s is still alive", violating)
		}
		return nil
	})
	if !h.sessionAlive(released) {
		t.Errorf("the session %s that holds no slot (contender key released) was ended", released)
	}
	if lines := c.logs.lines(`"msg":"drift detected"`, released); len(lines) != 0 {
		t.Errorf("the session that holds no slot was judged:\n%s", strings.Join(lines, "\n"))
	}
}

// TestMetrics_holderInfoListsOnlySessionsHoldingASlot: the controller
// exports as holders (consullock_lock_holder_info, consullock_lock_holders)
// the sessions status lists, not a listed session without its contender
// key.
func TestMetrics_holderInfoListsOnlySessionsHoldingASlot(t *testing.T) {
	_, c, sem, compliant, violating, released := listedWithoutKey(t, compliance.ModeObserve)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	eventually(t, 10*time.Second, func() error {
		listed := holderInfo(t, srv.URL, sem.Name, compliant, violating, released)
		if !listed[compliant] || !listed[violating] || listed[released] {
			return fmt.Errorf("consullock_lock_holder_info lists the holders %v, %v and the session without its key %v; want true, true, false",
				listed[compliant], listed[violating], listed[released])
		}
		if n := scrape(t, srv.URL)[lockSeries("consullock_lock_holders", sem.Name)]; n != 2 {
			return fmt.Errorf("consullock_lock_holders = %v, want 2", n)
		}
		return nil
	})
}
