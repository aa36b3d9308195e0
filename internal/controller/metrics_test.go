package controller

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// scrape reads /metrics over HTTP into series -> value, the series written
// as the text format prints it: `name{label="value",...}`.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func lockSeries(name, lock string) string { return fmt.Sprintf("%s{lock=%q}", name, lock) }

// metricsScript runs a scripted sequence and checks after each step what
// /metrics says.
type metricsScript struct {
	t    *testing.T
	base string // URL of the leader's metrics endpoint
	m    map[string]float64
}

func (s *metricsScript) scrape() {
	s.m = scrape(s.t, s.base)
}

// want fails unless series has value v.
func (s *metricsScript) want(step, series string, v float64) {
	s.t.Helper()
	got, ok := s.m[series]
	if !ok {
		s.t.Errorf("%s: %s is not exported", step, series)
		return
	}
	if got != v {
		s.t.Errorf("%s: %s = %v, want %v", step, series, got, v)
	}
}

// within fails unless series is in [lo, hi].
func (s *metricsScript) within(step, series string, lo, hi float64) {
	s.t.Helper()
	got, ok := s.m[series]
	if !ok {
		s.t.Errorf("%s: %s is not exported", step, series)
		return
	}
	if got < lo || got > hi {
		s.t.Errorf("%s: %s = %v, want within [%v, %v]", step, series, got, lo, hi)
	}
}

func (s *metricsScript) absent(step, series string) {
	s.t.Helper()
	if v, ok := s.m[series]; ok {
		s.t.Errorf("%s: %s = %v, want no such series", step, series, v)
	}
}

// waitFor scrapes until series has value v.
func (s *metricsScript) waitFor(series string, v float64) {
	s.t.Helper()
	eventually(s.t, 10*time.Second, func() error {
		s.scrape()
		if got := s.m[series]; got != v {
			return fmt.Errorf("%s = %v, want %v", series, got, v)
		}
		return nil
	})
}

func TestMetrics_showTheScriptedSequence(t *testing.T) {
	h := newHarness(t, agent)
	profile := h.name("strict")
	h.declareProfile(lockmodel.SessionProfile{Name: profile, TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	l := h.declareLock(lockmodel.Lock{Name: h.name("job"), Prefix: h.prefix + "/job", SessionDefaults: profile})
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{"worker-"}})
	policy := h.createPolicy(h.name("workers"), rules)

	// The leader's blocking queries go through a proxy that can cut them;
	// everything else (its election included) goes straight to the agent.
	watches := newCountingProxy(t, h.a)
	leader := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true, watchAddr: watches.Addr()})
	eventually(t, 15*time.Second, func() error {
		if !leader.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	follower := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true})
	srvL := httptest.NewServer(leader.Handler())
	defer srvL.Close()
	srvF := httptest.NewServer(follower.Handler())
	defer srvF.Close()
	s := &metricsScript{t: t, base: srvL.URL}
	held, index := lockSeries("consullock_lock_held", l.Name), lockSeries("consullock_lock_index", l.Name)
	since, unheld := lockSeries("consullock_lock_since_handover_seconds", l.Name), lockSeries("consullock_lock_unheld_seconds", l.Name)
	handovers, holders := lockSeries("consullock_lock_handovers_total", l.Name), lockSeries("consullock_lock_holders", l.Name)
	recreated := `consullock_repairs_total{kind="recreate_key"}`
	restored := `consullock_repairs_total{kind="restore_acl_rules"}`

	// 1. Start: the key is missing; the leader creates it, unheld.
	h.waitKey(l.Key)
	s.waitFor(recreated, 1)
	s.want("start", "consullock_leader", 1)
	s.want("start", held, 0)
	s.want("start", index, 0)
	s.want("start", holders, 0)
	s.within("start", unheld, 0, 30)
	s.absent("start", since)
	if f := scrape(t, srvF.URL); f["consullock_leader"] != 0 || f[recreated] != 0 {
		t.Errorf("follower: leader = %v, repairs{recreate_key} = %v; want 0, 0", f["consullock_leader"], f[recreated])
	}
	for _, w := range watchNames {
		s.want("start", fmt.Sprintf("consullock_watch_errors_total{watch=%q}", w), 0)
	}
	reconciles := s.m["consullock_reconcile_duration_seconds_count"]
	if reconciles < 1 || s.m["consullock_reconcile_duration_seconds_sum"] <= 0 {
		t.Errorf("start: reconcile histogram count %v, sum %v", reconciles, s.m["consullock_reconcile_duration_seconds_sum"])
	}

	// 2. Acquire: a compliant session takes the lock (LockIndex 1).
	s1 := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	acquired := time.Now()
	h.acquire(l.Key, s1)
	s.waitFor(index, 1)
	s.waitFor(handovers, 1) // counted from the same watch answer, in its own step
	s.want("acquire", held, 1)
	s.want("acquire", holders, 1)
	s.want("acquire", unheld, 0)
	s.want("acquire", handovers, 1)
	s.within("acquire", since, 0, time.Since(acquired).Seconds())

	// 3. Hand-over: release, then a second session acquires (LockIndex 2).
	// Its TTL is longer than the profile allows: a violation, reported
	// (repair mode never touches holders).
	if _, _, err := h.api.KV().Release(&api.KVPair{Key: l.Key, Session: s1, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // so that seconds_since_handover has grown before it resets
	s2 := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	handedOver := time.Now()
	h.acquire(l.Key, s2)
	s.waitFor(index, 2)
	s.want("hand-over", held, 1)
	s.want("hand-over", handovers, 2)
	s.within("hand-over", since, 0, time.Since(handedOver).Seconds())
	s.waitFor(`consullock_violations_total{reason="ttl_too_long"}`, 1)
	if !h.sessionAlive(s2) {
		t.Error("repair mode ended the non-compliant holder")
	}

	// 4. Repairs: the policy widened out of band; the key deleted once the
	// holder has released it.
	p := h.livePolicy(policy.ID)
	p.Rules = widened
	if _, _, err := h.api.ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatal(err)
	}
	s.waitFor(restored, 1)
	// Found once, as drift (its declaration did not change), by every
	// replica; nothing is pending.
	s.want("repairs", `consullock_drift_total{kind="restore_acl_rules"}`, 1)
	s.want("repairs", "consullock_declarations_pending", 0)
	eventually(t, 10*time.Second, func() error {
		if f := scrape(t, srvF.URL); f[`consullock_drift_total{kind="restore_acl_rules"}`] != 1 || f[restored] != 0 {
			return fmt.Errorf("follower: drift_total{restore_acl_rules} = %v, repairs = %v; want 1, 0",
				f[`consullock_drift_total{kind="restore_acl_rules"}`], f[restored])
		}
		return nil
	})
	// Taken before the release: the controller's watch may see it before
	// the release's own answer reaches this test.
	released := time.Now()
	if _, _, err := h.api.KV().Release(&api.KVPair{Key: l.Key, Session: s2, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	s.waitFor(held, 0)
	time.Sleep(time.Second)
	s.scrape()
	s.within("release", unheld, 1, time.Since(released).Seconds())
	s.want("release", index, 2)
	s.want("release", handovers, 2)
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	s.waitFor(recreated, 2)
	s.waitFor(index, 0) // a new key starts at LockIndex 0
	s.want("repairs", handovers, 2)
	s.want("repairs", `consullock_repair_errors_total{kind="recreate_key"}`, 0)
	if got := s.m["consullock_reconcile_duration_seconds_count"]; got <= reconciles {
		t.Errorf("reconcile histogram count %v, did not grow from %v", got, reconciles)
	}

	// 5. Watch errors: every blocking query in flight fails once.
	time.Sleep(200 * time.Millisecond) // let the watches block again
	cut := map[string]float64{}
	for _, path := range watches.CutInflight() {
		switch {
		case path == "/v1/session/list":
			cut["sessions"]++
		case path == "/v1/acl/policies":
			cut["acl_policies"]++
		case path == "/v1/kv/"+h.registry+"/":
			cut["registry"]++
		case strings.HasPrefix(path, "/v1/kv/"):
			cut["lock_keys"]++
		}
	}
	if len(cut) != 4 {
		t.Fatalf("cut %v: want one query of each of the 4 watches in flight", cut)
	}
	// Each cut query fails once, and each watch recovers on its next try.
	eventually(t, 10*time.Second, func() error {
		s.scrape()
		for w, n := range cut {
			if got := s.m[fmt.Sprintf("consullock_watch_errors_total{watch=%q}", w)]; got != n {
				return fmt.Errorf("watch_errors_total{watch=%q} = %v, want %v", w, got, n)
			}
		}
		if n := leader.failing.Load(); n != 0 {
			return fmt.Errorf("%d watches still failing", n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	s.scrape()
	for w, n := range cut {
		s.want("watch errors", fmt.Sprintf("consullock_watch_errors_total{watch=%q}", w), n)
	}
	s.want("end", "consullock_leader", 1)
	s.want("end", recreated, 2)
	s.want("end", restored, 1)
	s.want("end", `consullock_violations_total{reason="ttl_too_long"}`, 1)
}
