package lockproto

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func TestLossJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const ttl = 10 * time.Second
	// Without health checks, LossAfter is the TTL.
	ttlRule := lockmodel.StopRule{TTL: ttl, RenewEvery: 3 * time.Second, RenewTimeout: 2 * time.Second, Grace: 2 * time.Second, Margin: time.Second}
	// With health checks and lock_delay 10s: LossAfter 10 - 1 - 2 = 7s.
	delayRule := lockmodel.StopRule{TTL: 30 * time.Second, LockDelay: 10 * time.Second, HealthChecks: true,
		RenewEvery: 2 * time.Second, RenewTimeout: 2 * time.Second, Grace: 2 * time.Second, Margin: time.Second}
	type step struct {
		obs   *Observation // nil: only check the clock
		now   time.Duration
		lost  bool
		about string // part of the reason when lost
	}
	cases := []struct {
		name  string
		rule  lockmodel.StopRule
		steps []step
	}{
		{"renewals keep the lock", ttlRule, []step{
			{&Observation{Kind: ObsRenewed, At: at(3 * time.Second)}, 3 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(6 * time.Second)}, 6 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
		}},
		{"the key held by another session is loss at once", ttlRule, []step{
			{&Observation{Kind: ObsKeyLost, At: at(time.Second), Detail: "held by session x"}, time.Second, true, "held by session x"},
		}},
		{"a renewal answered 404 is loss at once", ttlRule, []step{
			{&Observation{Kind: ObsSessionGone, At: at(time.Second)}, time.Second, true, "no longer exists"},
		}},
		{"one No cluster leader is not loss (Consul issue 1162)", ttlRule, []step{
			{&Observation{Kind: ObsRenewFailed, At: at(3 * time.Second), Detail: "No cluster leader"}, 4 * time.Second, false, ""},
			{&Observation{Kind: ObsReadFailed, At: at(4 * time.Second), Detail: "No cluster leader"}, 5 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(5 * time.Second)}, 5 * time.Second, false, ""},
			{nil, 14 * time.Second, false, ""},
		}},
		{"no successful renewal for longer than the TTL is loss (Consul issue 18271)", ttlRule, []step{
			{&Observation{Kind: ObsRenewFailed, At: at(3 * time.Second)}, 4 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewFailed, At: at(6 * time.Second)}, 7 * time.Second, false, ""},
			{nil, ttl, false, ""},
			{nil, ttl + time.Millisecond, true, "no successful session renewal"},
		}},
		{"successful reads do not stand in for renewals", ttlRule, []step{
			{&Observation{Kind: ObsKeyHeld, At: at(5 * time.Second)}, 5 * time.Second, false, ""},
			{&Observation{Kind: ObsKeyHeld, At: at(9 * time.Second)}, 9 * time.Second, false, ""},
			{nil, 11 * time.Second, true, "longer than the session TTL"},
		}},
		{"a late answer to an old renewal does not move the clock back", ttlRule, []step{
			{&Observation{Kind: ObsRenewed, At: at(6 * time.Second)}, 6 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(3 * time.Second)}, 7 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
			{nil, 16*time.Second + time.Millisecond, true, "no successful session renewal"},
		}},
		{"once lost, always lost", ttlRule, []step{
			{&Observation{Kind: ObsSessionGone, At: at(time.Second)}, time.Second, true, "no longer exists"},
			{&Observation{Kind: ObsRenewed, At: at(2 * time.Second)}, 2 * time.Second, true, "no longer exists"},
		}},
		{"with health checks, renewals every renew_every keep the lock", delayRule, []step{
			{&Observation{Kind: ObsRenewed, At: at(2 * time.Second)}, 3 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(4 * time.Second)}, 6 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(8 * time.Second)}, 10 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
		}},
		{"with health checks, a hung agent (no answer at all) is loss at lock_delay - grace - margin", delayRule, []step{
			{&Observation{Kind: ObsRenewed, At: at(2 * time.Second)}, 3 * time.Second, false, ""},
			{nil, 9 * time.Second, false, ""},
			{nil, 9*time.Second + time.Millisecond, true, "another holder may acquire from 10s after the last renewal"},
		}},
		{"with health checks, refused renewals are loss at the same moment", delayRule, []step{
			{&Observation{Kind: ObsRenewFailed, At: at(2 * time.Second), Detail: "connection refused"}, 2 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewFailed, At: at(5 * time.Second), Detail: "connection refused"}, 5 * time.Second, false, ""},
			{nil, 7*time.Second + time.Millisecond, true, "no successful session renewal for 7.001s"},
		}},
		{"renewals refused with 403 name the lost permission in the loss", delayRule, []step{
			{&Observation{Kind: ObsRenewFailed, At: at(2 * time.Second), Cause: "the token lost session:write on web-1"}, 2 * time.Second, false, ""},
			{nil, 7*time.Second + time.Millisecond, true, "the token lost session:write on web-1: no successful session renewal for 7.001s"},
		}},
		{"a refusal followed by a renewal is forgotten", delayRule, []step{
			{&Observation{Kind: ObsRenewFailed, At: at(2 * time.Second), Cause: "the token lost session:write on web-1"}, 2 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewed, At: at(3 * time.Second)}, 3 * time.Second, false, ""},
			{&Observation{Kind: ObsRenewFailed, At: at(5 * time.Second), Detail: "connection refused"}, 5 * time.Second, false, ""},
			{nil, 10*time.Second + time.Millisecond, true, "no successful session renewal for 7.001s"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := NewLossJudge(tc.rule, t0)
			for i, s := range tc.steps {
				var v Verdict
				if s.obs != nil {
					v = j.Observe(*s.obs)
				}
				if !v.Lost {
					v = j.Check(at(s.now))
				}
				if v.Lost != s.lost || (s.lost && !strings.Contains(v.Reason, s.about)) ||
					(v.Lost && strings.Contains(v.Reason, "lost session:write") && !strings.Contains(s.about, "lost session:write")) {
					t.Fatalf("step %d: verdict %+v, want lost=%v about %q", i, v, s.lost, s.about)
				}
			}
		})
	}
}

func TestLossJudgeDeadlineIsLastRenewalPlusTTL(t *testing.T) {
	t0 := time.Now()
	j := NewLossJudge(lockmodel.StopRule{TTL: 10 * time.Second, RenewEvery: 3 * time.Second, RenewTimeout: 2 * time.Second}, t0)
	if !j.Deadline().Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %s", j.Deadline())
	}
	j.Observe(Observation{Kind: ObsRenewed, At: t0.Add(4 * time.Second)})
	if !j.Deadline().Equal(t0.Add(14 * time.Second)) {
		t.Fatalf("deadline after renewal %s", j.Deadline())
	}
}

func TestLockDelayWait(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC)
	cases := []struct {
		name    string
		freedAt time.Time
		delay   time.Duration
		retry   int
		want    time.Duration
		jitter  bool // a back-off: between half of want and want, not always the same
	}{
		{"first retry waits until the delay has certainly passed", now.Add(-2 * time.Second), 5 * time.Second, 0, 3*time.Second + lockDelayMargin, false},
		{"a delay above 60s counts as 60s, as Consul clamps it", now, 90 * time.Second, 0, 60*time.Second + lockDelayMargin, false},
		{"a delay already over backs off briefly", now.Add(-20 * time.Second), 5 * time.Second, 0, 250 * time.Millisecond, true},
		{"later retries back off", now.Add(-20 * time.Second), 5 * time.Second, 3, time.Second, true},
		{"backoff is capped at 5s", now.Add(-20 * time.Second), 5 * time.Second, 30, 5 * time.Second, true},
		{"unknown start of the delay backs off from 250ms", time.Time{}, 15 * time.Second, 0, 250 * time.Millisecond, true},
		{"unknown start, third retry", time.Time{}, 15 * time.Second, 2, time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 50 {
				got := lockDelayWait(tc.freedAt, tc.delay, tc.retry, now)
				seen[got] = true
				if !tc.jitter && got != tc.want {
					t.Fatalf("lockDelayWait = %s, want exactly %s", got, tc.want)
				}
				if tc.jitter && (got < tc.want/2 || got > tc.want) {
					t.Fatalf("lockDelayWait = %s, want between %s and %s", got, tc.want/2, tc.want)
				}
			}
			if tc.jitter && len(seen) == 1 {
				t.Fatalf("lockDelayWait answered %v 50 times: waiters that saw one release would retry in step", seen)
			}
		})
	}
}

func TestSessionCreateBodyWritesEverySettingOut(t *testing.T) {
	p := lockmodel.SessionProfile{Name: "p", TTL: 10 * time.Second, LockDelay: 0, NodeChecks: []string{},
		ServiceChecks: []lockmodel.ServiceCheck{{ID: "svc:web", Namespace: "ns"}}}.Resolve()
	body := sessionCreateBody("n", "", p)
	want := map[string]any{"Name": "n", "TTL": "10s", "LockDelay": "0s", "Behavior": "release", "NodeChecks": []string{},
		"ServiceChecks": []api.ServiceCheck{{ID: "svc:web", Namespace: "ns"}}}
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Fatalf("body = %v\nwant   %v", body, want)
	}
	if _, ok := body["Node"]; ok {
		t.Fatal("Node set although none was asked for: the agent's own node is meant")
	}
	if got := sessionCreateBody("n", "web-1", p)["Node"]; got != "web-1" {
		t.Fatalf("Node = %v", got)
	}
	defaults := sessionCreateBody("n", "", lockmodel.SessionProfile{TTL: 15 * time.Second}.Resolve())
	if fmt.Sprint(defaults["NodeChecks"]) != "[serfHealth]" {
		t.Fatalf("default node checks = %v", defaults["NodeChecks"])
	}
}

func TestSessionMismatches(t *testing.T) {
	p := lockmodel.SessionProfile{Name: "p", TTL: 10 * time.Second, LockDelay: 0}.Resolve()
	exact := &api.SessionEntry{TTL: "10s", LockDelay: 0, Behavior: "release", NodeChecks: []string{"serfHealth"}}
	if d := sessionMismatches(exact, p); len(d) != 0 {
		t.Fatalf("an exact session has mismatches: %v", d)
	}
	// What the Go api would have created: LockDelay dropped, so 15s.
	dropped := *exact
	dropped.LockDelay = 15 * time.Second
	if d := sessionMismatches(&dropped, p); len(d) != 1 || !strings.Contains(d[0], "lock_delay") {
		t.Fatalf("mismatches = %v, want one about lock_delay", d)
	}
	other := &api.SessionEntry{TTL: "20s", LockDelay: time.Second, Behavior: "delete", NodeChecks: []string{}}
	if d := sessionMismatches(other, p); len(d) != 4 {
		t.Fatalf("mismatches = %v, want ttl, lock_delay, behavior, node checks", d)
	}
}

// A waiter prunes a dead semaphore holder (listed, its session holding no
// key) only once the holder's own lock-delay has passed since the waiter
// first saw it dead, and the maximum when it could learn nothing of it; a
// holder that left the table is no concern.
func TestDeadHoldersPruneAfterLockDelay(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	key := func(session string) *api.KVPair { return &api.KVPair{Key: "p/" + session, Session: session} }
	table := func(holders ...string) lockmodel.SemaphoreState {
		st := lockmodel.SemaphoreState{Limit: 2, Holders: map[string]bool{}}
		for _, h := range holders {
			st.Holders[h] = true
		}
		return st
	}
	d := newDeadHolders("p")
	d.delays["b"] = 3 * time.Second // read while b was alive

	// a and b listed, only a alive: b is newly dead and kept for its own 3s.
	st := table("a", "b")
	newly, freeIn := d.prune(st, api.KVPairs{key("a"), {Key: "p/b"}}, t0)
	if !slices.Equal(newly, []string{"b"}) || freeIn != 3*time.Second || !st.Holders["b"] {
		t.Fatalf("first sight: newly %v, freeIn %s, table %v; want [b], 3s, b kept", newly, freeIn, st.Holders)
	}
	// Later sightings count from the first.
	st = table("a", "b")
	newly, freeIn = d.prune(st, api.KVPairs{key("a")}, t0.Add(2*time.Second))
	if len(newly) != 0 || freeIn != time.Second || !st.Holders["b"] {
		t.Fatalf("2s later: newly %v, freeIn %s, table %v; want none, 1s, b kept", newly, freeIn, st.Holders)
	}
	st = table("a", "b")
	_, freeIn = d.prune(st, api.KVPairs{key("a")}, t0.Add(3*time.Second))
	if freeIn != 0 || st.Holders["b"] || !st.Holders["a"] {
		t.Fatalf("3s later: freeIn %s, table %v; want b pruned, a kept", freeIn, st.Holders)
	}

	// A holder whose lock-delay is unknown (its session was never read,
	// its key says nothing) gets the maximum, not the waiter's own.
	d = newDeadHolders("p")
	st = table("c")
	_, freeIn = d.prune(st, nil, t0)
	if freeIn != time.Minute || !st.Holders["c"] {
		t.Fatalf("unknown lock-delay: freeIn %s, table %v; want 60s, c kept", freeIn, st.Holders)
	}
	// c left the table (released) and is forgotten: listed again later, it
	// counts from then.
	d.prune(table(), nil, t0.Add(time.Second))
	if _, ok := d.seen["c"]; ok {
		t.Fatal("a holder that left the table is still remembered as dead")
	}

	// The lock-delay a holder wrote into its contender key, read while it
	// lived, counts once the key is gone with its session (behavior
	// delete); a key of the same name held by another session does not.
	hv := func(lockDelay time.Duration) []byte {
		v, _ := json.Marshal(lockmodel.HolderValue{Node: "n", PID: 1, Started: t0})
		return lockmodel.WithLockDelay(v, lockDelay)
	}
	d = newDeadHolders("p")
	d.prune(table("f", "g"), api.KVPairs{{Key: "p/f", Session: "f", Value: hv(20 * time.Second)},
		{Key: "p/g", Session: "x", Value: hv(0)}, key("g")}, t0)
	st = table("f", "g")
	_, freeIn = d.prune(st, nil, t0.Add(time.Second))
	if freeIn != 20*time.Second || !st.Holders["f"] || !st.Holders["g"] {
		t.Fatalf("written lock-delay 20s: freeIn %s, table %v; want 20s from the first sight, f and g kept", freeIn, st.Holders)
	}
	if got := d.lockDelay("g"); got != time.Minute {
		t.Fatalf("g's lock-delay from a key another session holds: %s, want the maximum", got)
	}

	// lock_delay 0 written by the holder: pruned at once, as api.Semaphore
	// does; the key kept with no session (behavior release) still says so.
	d = newDeadHolders("p")
	st = table("e")
	if _, freeIn = d.prune(st, api.KVPairs{{Key: "p/e", Value: hv(0)}}, t0); freeIn != 0 || st.Holders["e"] {
		t.Fatalf("lock_delay 0: freeIn %s, table %v; want e pruned", freeIn, st.Holders)
	}
}
