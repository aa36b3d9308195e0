package compliance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	mutexKey = "jobs/report/.lock"
	semKey   = "jobs/thumbs/.lock"
	sessA    = "aaaaaaaa-0000-0000-0000-000000000001"
	sessB    = "bbbbbbbb-0000-0000-0000-000000000002"
	policyID = "11111111-2222-3333-4444-555555555555"
	rules    = "key \"jobs/report/.lock\" {\n  policy = \"write\"\n}\n"
)

// baseState declares a mutex with profile "strict" and max_hold 1h, a
// semaphore of limit 3, and one ACL policy; live state matches it.
func baseState() State {
	return State{
		Locks: map[string]lockmodel.Lock{
			"report": {Name: "report", Prefix: "jobs/report", Key: mutexKey, Limit: 1, SessionDefaults: "strict", MaxHold: time.Hour},
			"thumbs": {Name: "thumbs", Prefix: "jobs/thumbs", Limit: 3, SessionDefaults: "strict"},
		},
		Profiles: map[string]lockmodel.Profile{
			"strict": lockmodel.SessionProfile{Name: "strict", TTL: 15 * time.Second, LockDelay: 15 * time.Second, Behavior: lockmodel.BehaviorRelease}.Resolve(),
		},
		Policies: map[string]record.ACLPolicySpec{
			"holder": {Name: "holder", ID: policyID, Rules: rules},
		},
		Keys: map[string]lockmodel.KeyEntry{
			mutexKey: {Flags: lockmodel.LockFlagValue, ModifyIndex: 10},
			semKey:   {Flags: lockmodel.SemaphoreFlagValue, Value: []byte(`{"Limit":3,"Holders":{}}`), ModifyIndex: 11},
		},
		Sessions:     map[string]lockmodel.ObservedSession{},
		LivePolicies: map[string]LivePolicy{policyID: {ID: policyID, Name: "holder", Rules: rules, ModifyIndex: 12}},
		HeldSince:    map[LockSession]time.Time{},
		Now:          t0,
	}
}

// compliant is a session that satisfies profile "strict".
func compliant(id string) lockmodel.ObservedSession {
	return lockmodel.ObservedSession{ID: id, Node: "n1", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
		Behavior: lockmodel.BehaviorRelease, NodeChecks: []string{"serfHealth"}}
}

func holdMutex(st *State, s lockmodel.ObservedSession, since time.Time) {
	st.Sessions[s.ID] = s
	k := st.Keys[mutexKey]
	k.Session, k.LockIndex = s.ID, 1
	st.Keys[mutexKey] = k
	st.HeldSince[LockSession{Lock: "report", Session: s.ID}] = since
}

// holdSlots makes sessions hold their contender keys of the semaphore
// "thumbs": a listed session holds a slot only with its key
// (lockmodel.Holders).
func holdSlots(st *State, sessions ...string) {
	for _, id := range sessions {
		st.Keys["jobs/thumbs/"+id] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, Session: id, LockIndex: 1, ModifyIndex: 29}
	}
}

type want struct {
	kind    Kind
	act     bool
	lock    string
	reasons []string
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		mode  Mode
		setup func(*State)
		want  []want
	}{
		{"nothing drifts: nothing to do", ModeEnforce, func(*State) {}, nil},
		{"a compliant holder is left alone", ModeEnforce, func(st *State) { holdMutex(st, compliant(sessA), t0.Add(-time.Minute)) }, nil},

		{"a deleted key whose declaration just changed is left to the apply", ModeRepair, func(st *State) {
			delete(st.Keys, mutexKey)
			st.Settling = map[string]bool{"locks/report": true}
		}, nil},
		{"a policy whose declaration just changed is left to the apply", ModeEnforce, func(st *State) {
			lp := st.LivePolicies[policyID]
			lp.Rules = `key_prefix "" { policy = "write" }`
			st.LivePolicies[policyID] = lp
			st.Settling = map[string]bool{"acl-policies/holder": true}
		}, nil},
		{"only the settling declaration waits", ModeRepair, func(st *State) {
			delete(st.Keys, mutexKey)
			delete(st.Keys, semKey)
			st.Settling = map[string]bool{"locks/thumbs": true}
		}, []want{{kind: KindRecreateKey, act: true, lock: "report"}}},

		{"repair recreates a deleted mutex key", ModeRepair, func(st *State) { delete(st.Keys, mutexKey) },
			[]want{{kind: KindRecreateKey, act: true, lock: "report"}}},
		{"observe reports a deleted key without acting", ModeObserve, func(st *State) { delete(st.Keys, mutexKey) },
			[]want{{kind: KindRecreateKey, act: false, lock: "report"}}},
		{"a key whose watch has not answered is not recreated", ModeRepair, func(st *State) {
			delete(st.Keys, mutexKey)
			st.UnknownKeys = map[string]bool{mutexKey: true}
		}, nil},
		{"repair restores an unheld key's flags", ModeRepair, func(st *State) {
			k := st.Keys[mutexKey]
			k.Flags = 0
			st.Keys[mutexKey] = k
		}, []want{{kind: KindRestoreFlags, act: true, lock: "report"}}},
		{"repair only reports a held key's wrong flags", ModeRepair, func(st *State) {
			holdMutex(st, compliant(sessA), t0)
			k := st.Keys[mutexKey]
			k.Flags = 0
			st.Keys[mutexKey] = k
		}, []want{{kind: KindHeldKeyDrift, act: false, lock: "report"}}},
		{"repair restores a semaphore's Limit", ModeRepair, func(st *State) {
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, Value: []byte(`{"Limit":9,"Holders":{"` + sessA + `":true}}`), ModifyIndex: 20}
		}, []want{{kind: KindRestoreLimit, act: true, lock: "thumbs"}}},
		{"an empty semaphore value is a fresh semaphore, not drift", ModeRepair, func(st *State) {
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: 20}
		}, nil},
		{"a semaphore value that is not a table is only reported", ModeRepair, func(st *State) {
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, Value: []byte("garbage"), ModifyIndex: 20}
		}, []want{{kind: KindUnusableKey, act: false, lock: "thumbs"}}},

		{"repair puts back widened ACL rules", ModeRepair, func(st *State) {
			lp := st.LivePolicies[policyID]
			lp.Rules = `key_prefix "" { policy = "write" }`
			st.LivePolicies[policyID] = lp
		}, []want{{kind: KindRestoreACLRules, act: true}}},
		{"reformatted ACL rules are not drift", ModeRepair, func(st *State) {
			lp := st.LivePolicies[policyID]
			lp.Rules = `key "jobs/report/.lock" { policy = "write" }`
			st.LivePolicies[policyID] = lp
		}, nil},
		{"live ACL rules that do not parse are drift", ModeRepair, func(st *State) {
			lp := st.LivePolicies[policyID]
			lp.Rules = `key "x" {`
			st.LivePolicies[policyID] = lp
		}, []want{{kind: KindRestoreACLRules, act: true}}},
		{"a declared policy without an ID yet is skipped", ModeRepair, func(st *State) {
			st.Policies["holder"] = record.ACLPolicySpec{Name: "holder", Rules: rules}
			st.LivePolicies = map[string]LivePolicy{}
		}, nil},
		{"a deleted policy is reported, not re-created", ModeRepair, func(st *State) { st.LivePolicies = map[string]LivePolicy{} },
			[]want{{kind: KindACLPolicyMissing, act: false}}},
		{"an unknown policy list decides nothing about policies", ModeRepair, func(st *State) { st.LivePolicies = nil }, nil},

		{"never fight Terraform: an undeclared lock's missing key is not recreated", ModeEnforce, func(st *State) {
			delete(st.Locks, "report")
			delete(st.Keys, mutexKey)
		}, nil},
		{"never fight Terraform: an undeclared policy's rules are not touched", ModeEnforce, func(st *State) {
			delete(st.Policies, "holder")
			lp := st.LivePolicies[policyID]
			lp.Rules = `key_prefix "" { policy = "write" }`
			st.LivePolicies[policyID] = lp
		}, nil},

		{"enforce ends a session with a longer TTL", ModeEnforce, func(st *State) {
			s := compliant(sessA)
			s.TTL = time.Hour
			holdMutex(st, s, t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationTTLTooLong}}}},
		{"enforce ends a session with a shorter lock delay", ModeEnforce, func(st *State) {
			s := compliant(sessA)
			s.LockDelay = 0
			holdMutex(st, s, t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationLockDelayTooShort}}}},
		{"enforce ends a session with another behavior", ModeEnforce, func(st *State) {
			s := compliant(sessA)
			s.Behavior = lockmodel.BehaviorDelete
			holdMutex(st, s, t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationBehaviorMismatch}}}},
		{"enforce ends a session without the declared node check", ModeEnforce, func(st *State) {
			s := compliant(sessA)
			s.NodeChecks = nil
			holdMutex(st, s, t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationNodeCheckMissing}}}},
		{"enforce ends a holder past max_hold", ModeEnforce, func(st *State) { holdMutex(st, compliant(sessA), t0.Add(-2*time.Hour)) },
			[]want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{ReasonMaxHoldExceeded}}}},
		{"a holder within max_hold is left alone", ModeEnforce, func(st *State) { holdMutex(st, compliant(sessA), t0.Add(-59*time.Minute)) }, nil},
		{"repair only reports a non-compliant holder", ModeRepair, func(st *State) {
			s := compliant(sessA)
			s.TTL = time.Hour
			holdMutex(st, s, t0.Add(-2*time.Hour))
		}, []want{{kind: KindHolderNonCompliant, act: false, lock: "report", reasons: []string{lockmodel.ViolationTTLTooLong, ReasonMaxHoldExceeded}}}},
		{"observe only reports a non-compliant holder", ModeObserve, func(st *State) {
			s := compliant(sessA)
			s.Behavior = lockmodel.BehaviorDelete
			holdMutex(st, s, t0)
		}, []want{{kind: KindHolderNonCompliant, act: false, lock: "report", reasons: []string{lockmodel.ViolationBehaviorMismatch}}}},
		{"a holder whose session the watch has not seen is not judged", ModeEnforce, func(st *State) {
			holdMutex(st, compliant(sessA), t0.Add(-2*time.Hour))
			delete(st.Sessions, sessA)
		}, nil},
		{"a missing profile is reported, the holder is not ended", ModeEnforce, func(st *State) {
			delete(st.Profiles, "strict")
			holdMutex(st, compliant(sessA), t0)
		}, []want{{kind: KindProfileMissing, act: false, lock: "report"}}},
		{"enforce ends a semaphore holder that violates the profile, not the compliant one", ModeEnforce, func(st *State) {
			bad := compliant(sessB)
			bad.TTL = time.Hour
			st.Sessions[sessA], st.Sessions[sessB] = compliant(sessA), bad
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: 30,
				Value: []byte(`{"Limit":3,"Holders":{"` + sessA + `":true,"` + sessB + `":true}}`)}
			holdSlots(st, sessA, sessB)
		}, []want{{kind: KindEndSession, act: true, lock: "thumbs", reasons: []string{lockmodel.ViolationTTLTooLong}}}},
		{"a session holding two locks is ended once", ModeEnforce, func(st *State) {
			bad := compliant(sessA)
			bad.TTL = time.Hour
			holdMutex(st, bad, t0)
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: 30,
				Value: []byte(`{"Limit":3,"Holders":{"` + sessA + `":true}}`)}
			holdSlots(st, sessA)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationTTLTooLong}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := baseState()
			tt.setup(&st)
			got := Decide(st, tt.mode)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d decisions, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.kind || g.Act != w.act || g.Lock != w.lock || !slices.Equal(g.Reasons, w.reasons) {
					t.Errorf("decision %d = {%s act=%v lock=%q reasons=%v}, want {%s act=%v lock=%q reasons=%v}\n%s",
						i, g.Kind, g.Act, g.Lock, g.Reasons, w.kind, w.act, w.lock, w.reasons, g.Detail)
				}
			}
		})
	}
}

func TestDecide_writesWhatConsulLockClientsNeed(t *testing.T) {
	st := baseState()
	delete(st.Keys, mutexKey)
	delete(st.Keys, semKey)
	got := Decide(st, ModeRepair)
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	if m := got[0]; m.Flags != lockmodel.LockFlagValue || m.ModifyIndex != 0 || len(m.Value) != 0 {
		t.Errorf("mutex recreate = flags %x index %d value %q; want api.Lock flags, CAS 0, empty value", m.Flags, m.ModifyIndex, m.Value)
	}
	if s := got[1]; s.Flags != lockmodel.SemaphoreFlagValue || s.ModifyIndex != 0 || string(s.Value) != `{"Limit":3,"Holders":{}}` {
		t.Errorf("semaphore recreate = flags %x index %d value %q", s.Flags, s.ModifyIndex, s.Value)
	}
}

func TestDecide_restoreLimitKeepsHolders(t *testing.T) {
	st := baseState()
	st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: 42,
		Value: []byte(`{"Limit":1,"Holders":{"` + sessA + `":true}}`)}
	got := Decide(st, ModeRepair)
	if len(got) != 1 {
		t.Fatalf("got %+v", got)
	}
	want := `{"Limit":3,"Holders":{"` + sessA + `":true}}`
	if string(got[0].Value) != want || got[0].ModifyIndex != 42 {
		t.Errorf("value %s index %d; want %s by CAS 42", got[0].Value, got[0].ModifyIndex, want)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"observe", "repair", "enforce"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("fix"); err == nil {
		t.Error("ParseMode(fix) accepted")
	}
}

func TestExampleACLRules_parse(t *testing.T) {
	for _, mode := range []string{"observe", "repair", "enforce"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "controller", mode+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := aclrules.ParseRules(string(data))
		if err != nil {
			t.Fatalf("%s.hcl: %v", mode, err)
		}
		if got := p.Grants("key_prefix", "consul-lock/controller/"); got != "write" {
			t.Errorf("%s.hcl grants %q on the leader key prefix, want write", mode, got)
		}
	}
}

// createdAt sets the Raft index at which a session was created.
func createdAt(s lockmodel.ObservedSession, index uint64) lockmodel.ObservedSession {
	s.CreateIndex = index
	return s
}

func TestDecide_holdersThatPredateTheirProfile(t *testing.T) {
	tooLong := func(id string, index uint64) lockmodel.ObservedSession {
		s := createdAt(compliant(id), index)
		s.TTL = time.Hour
		return s
	}
	predates := []string{lockmodel.ViolationTTLTooLong, ReasonPredatesProfile}
	tests := []struct {
		name  string
		mode  Mode
		setup func(*State)
		want  []want
	}{
		{"a session created before the profile tightened is reported and left to finish", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 100}
			holdMutex(st, tooLong(sessA, 50), t0)
		}, []want{{kind: KindHolderPredatesProfile, act: false, lock: "report", reasons: predates}}},
		{"a session created after the profile changed is ended", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 100}
			holdMutex(st, tooLong(sessA, 150), t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationTTLTooLong}}}},
		{"max_hold still ends a session that predates its profile", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 100}
			holdMutex(st, tooLong(sessA, 50), t0.Add(-2*time.Hour))
		}, []want{
			{kind: KindHolderPredatesProfile, act: false, lock: "report", reasons: predates},
			{kind: KindEndSession, act: true, lock: "report", reasons: []string{ReasonMaxHoldExceeded}},
		}},
		{"a compliant session that predates its profile is not reported", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 100}
			holdMutex(st, createdAt(compliant(sessA), 50), t0)
		}, nil},
		{"a lock switched to a stricter profile leaves the sessions created before the switch", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 10}
			st.ProfileSwitched = map[string]uint64{"report": 100}
			holdMutex(st, tooLong(sessA, 50), t0)
		}, []want{{kind: KindHolderPredatesProfile, act: false, lock: "report", reasons: predates}}},
		{"the switch of another lock moves nothing", ModeEnforce, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 10}
			st.ProfileSwitched = map[string]uint64{"thumbs": 100}
			holdMutex(st, tooLong(sessA, 50), t0)
		}, []want{{kind: KindEndSession, act: true, lock: "report", reasons: []string{lockmodel.ViolationTTLTooLong}}}},
		{"repair reports a predating semaphore holder the same way", ModeRepair, func(st *State) {
			st.ProfileIndex = map[string]uint64{"strict": 100}
			st.Sessions[sessB] = tooLong(sessB, 99)
			st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, ModifyIndex: 30,
				Value: []byte(`{"Limit":3,"Holders":{"` + sessB + `":true}}`)}
			holdSlots(st, sessB)
		}, []want{{kind: KindHolderPredatesProfile, act: false, lock: "thumbs", reasons: predates}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := baseState()
			tt.setup(&st)
			got := Decide(st, tt.mode)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d decisions, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.kind || g.Act != w.act || g.Lock != w.lock || !slices.Equal(g.Reasons, w.reasons) {
					t.Errorf("decision %d = {%s act=%v lock=%q reasons=%v}, want {%s act=%v lock=%q reasons=%v}\n%s",
						i, g.Kind, g.Act, g.Lock, g.Reasons, w.kind, w.act, w.lock, w.reasons, g.Detail)
				}
			}
		})
	}
}

func TestTrackHolds(t *testing.T) {
	a, b := LockSession{Lock: "report", Session: sessA}, LockSession{Lock: "report", Session: sessB}
	o := LockSession{Lock: "other", Session: sessB}
	look := map[string]time.Time{}
	got := TrackHolds(nil, map[string]map[string]uint64{"report": {sessA: 1}, "other": {sessB: 0}}, look, t0)
	if !got[a].FirstSeen.Equal(t0) || !got[a].NotBefore.IsZero() {
		t.Errorf("a hold present at the first look has no NotBefore: %+v", got[a])
	}
	look["report"], look["other"] = t0, t0
	got = TrackHolds(got, map[string]map[string]uint64{"report": {sessA: 1, sessB: 0}, "other": {sessB: 0}}, look, t0.Add(time.Minute))
	if !got[a].FirstSeen.Equal(t0) || !got[b].FirstSeen.Equal(t0.Add(time.Minute)) || !got[b].NotBefore.Equal(t0) {
		t.Errorf("a holder keeps its first sighting, a new one starts now after the last look: %v", got)
	}
	look["report"] = t0.Add(time.Minute)
	got = TrackHolds(got, map[string]map[string]uint64{"report": {sessA: 2, sessB: 0}}, look, t0.Add(2*time.Minute))
	if !got[a].FirstSeen.Equal(t0.Add(2*time.Minute)) || !got[a].NotBefore.Equal(t0.Add(time.Minute)) {
		t.Errorf("the same session acquiring again (LockIndex 1 -> 2) is a new hold: %v", got[a])
	}
	if !got[o].FirstSeen.Equal(t0) {
		t.Errorf("the hold of a lock not looked at (state unknown) is kept: %v", got)
	}
	got = TrackHolds(got, map[string]map[string]uint64{"report": {sessB: 0}, "other": {}}, look, t0.Add(3*time.Minute))
	if _, ok := got[a]; ok || len(got) != 1 || !got[b].FirstSeen.Equal(t0.Add(time.Minute)) {
		t.Errorf("a holder that let go is forgotten, the other keeps its time: %v", got)
	}
}

func TestPending(t *testing.T) {
	const grace = 5 * time.Second
	cases := []struct {
		name            string
		judged, current uint64
		changed         time.Time
		want            bool
	}{
		{"a declaration unchanged since start: a difference is drift", 7, 7, time.Time{}, false},
		{"changed just now: the apply has not written the object yet", 7, 7, t0, true},
		{"changed within the grace", 7, 7, t0.Add(-grace + time.Millisecond), true},
		{"changed exactly one grace ago: drift", 7, 7, t0.Add(-grace), false},
		{"changed long ago: drift", 7, 7, t0.Add(-time.Hour), false},
		{"a newer declaration than the one judged: the live write was seen first", 7, 9, time.Time{}, true},
		{"the declaration is gone: a destroy in progress", 7, 0, time.Time{}, true},
		{"an older declaration than judged (Consul restored): not the judged one either", 9, 7, t0.Add(-time.Hour), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Pending(c.judged, c.current, c.changed, t0, grace); got != c.want {
				t.Errorf("Pending(judged %d, current %d, changed %v) = %v, want %v", c.judged, c.current, c.changed, got, c.want)
			}
			// Invariant: without an apply grace, only a declaration other
			// than the judged one is pending.
			if got := Pending(c.judged, c.current, c.changed, t0, 0); got != (c.judged != c.current) {
				t.Errorf("with no grace: Pending = %v, want %v", got, c.judged != c.current)
			}
		})
	}
}

func TestDecision_IsDrift(t *testing.T) {
	st := baseState()
	st.Keys = map[string]lockmodel.KeyEntry{semKey: {Flags: 0, ModifyIndex: 11}}
	st.LivePolicies[policyID] = LivePolicy{ID: policyID, Name: "holder", Rules: `key_prefix "" { policy = "write" }`}
	bad := compliant(sessA)
	bad.TTL = time.Minute
	st.Sessions[sessA] = bad
	st.Keys[semKey] = lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, Value: []byte(`{"Limit":3,"Holders":{"` + sessA + `":true}}`), ModifyIndex: 11}
	holdSlots(&st, sessA)
	var drift, other []Kind
	for _, d := range Decide(st, ModeRepair) {
		if d.IsDrift() {
			drift = append(drift, d.Kind)
		} else {
			other = append(other, d.Kind)
		}
	}
	if want := []Kind{KindRecreateKey, KindRestoreACLRules}; !slices.Equal(drift, want) {
		t.Errorf("drift kinds = %v, want %v", drift, want)
	}
	if want := []Kind{KindHolderNonCompliant}; !slices.Equal(other, want) {
		t.Errorf("other kinds = %v, want %v", other, want)
	}
}
