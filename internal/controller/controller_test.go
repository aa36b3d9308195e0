package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is the Consul agent shared by the tests of this package (ACLs on,
// default deny). Tests that restart an agent start their own.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	code := testenv.RunWithAgent(m, &agent)
	stopMetered()
	os.Exit(code)
}

// logBuffer collects a controller's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log events that contain every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		ok := l != ""
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	t        *testing.T
	a        *testenv.Agent
	api      *api.Client
	registry string
	prefix   string // lock keys go under it
}

func newHarness(t *testing.T, a *testenv.Agent) *harness {
	t.Helper()
	p := testenv.UniquePrefix(t.Name())
	return &harness{t: t, a: a, api: a.Client(), registry: p + "/registry", prefix: p + "/locks"}
}

func (h *harness) clientAt(addr, token string, attempts int) *consul.Client {
	h.t.Helper()
	c, err := consul.New(consul.Settings{Address: addr, Token: token,
		Retry: consul.RetrySettings{MaxAttempts: attempts, MaxElapsed: 2 * time.Second}})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

type running struct {
	*Controller
	logs *logBuffer
	stop func()
}

// start runs a controller (no leader election: it acts at once) with the
// management token unless token is given, and waits for its initial sync.
func (h *harness) start(mode compliance.Mode, token ...string) *running {
	h.t.Helper()
	o := startOpts{mode: mode}
	if len(token) > 0 {
		o.token = token[0]
	}
	return h.startWith(o)
}

// startOpts tune startWith; the zero value (with a mode) is start's.
type startOpts struct {
	mode  compliance.Mode
	token string // "" = the management token, "none" = no token
	addr  string // "" = the agent; e.g. a countingProxy
	// watchAddr serves the blocking queries; "" = addr.
	watchAddr string
	ha        bool // elect a leader (Config.DisableHA false)
	configure func(*Config)
	// noWait: return without waiting for the initial sync.
	noWait bool
}

func (h *harness) startWith(o startOpts) *running {
	h.t.Helper()
	tok, addr := o.token, o.addr
	switch tok {
	case "":
		tok = h.a.ManagementToken
	case "none":
		tok = ""
	}
	if addr == "" {
		addr = h.a.Addr
	}
	watchAddr := o.watchAddr
	if watchAddr == "" {
		watchAddr = addr
	}
	logs := &logBuffer{}
	cfg := Config{Mode: o.mode, RegistryPrefix: h.registry, DisableHA: !o.ha, WatchClient: h.clientAt(watchAddr, tok, 1), ApplyGrace: compliance.DefaultApplyGrace,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), WaitTime: 30 * time.Second}
	if o.configure != nil {
		o.configure(&cfg)
	}
	c, err := New(h.clientAt(addr, tok, 3), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				h.t.Error("controller did not stop within 10s")
			}
		})
	}
	h.t.Cleanup(func() {
		stop()
		if h.t.Failed() {
			h.t.Logf("controller log:\n%s", logs.String())
		}
	})
	eventually(h.t, 20*time.Second, func() error {
		if !c.Ready() && !o.noWait {
			return fmt.Errorf("controller not ready")
		}
		return nil
	})
	return &running{Controller: c, logs: logs, stop: stop}
}

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) put(key string, value []byte) {
	h.t.Helper()
	if _, err := h.api.KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) declareLock(l lockmodel.Lock) lockmodel.Lock {
	h.t.Helper()
	rec, err := record.EncodeLockRecord(l)
	if err != nil {
		h.t.Fatal(err)
	}
	h.put(lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), rec)
	n, _ := l.Normalize()
	return n
}

func (h *harness) declareProfile(p lockmodel.SessionProfile) {
	h.t.Helper()
	rec, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		h.t.Fatal(err)
	}
	h.put(lockmodel.RegistryKey(h.registry, lockmodel.KindSessionDefaults, p.Name), rec)
}

func (h *harness) declarePolicy(s record.ACLPolicySpec) {
	h.t.Helper()
	rec, err := record.EncodeACLPolicyRecord(s)
	if err != nil {
		h.t.Fatal(err)
	}
	h.put(lockmodel.RegistryKey(h.registry, lockmodel.KindACLPolicy, s.Name), rec)
}

func (h *harness) get(key string) *api.KVPair {
	h.t.Helper()
	p, _, err := h.api.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) waitKey(key string) *api.KVPair {
	h.t.Helper()
	var p *api.KVPair
	eventually(h.t, 10*time.Second, func() error {
		if p = h.get(key); p == nil {
			return fmt.Errorf("key %s does not exist", key)
		}
		return nil
	})
	return p
}

func (h *harness) name(s string) string {
	return strings.NewReplacer("/", "-", ".", "-").Replace(h.prefix + "-" + s)
}

// createPolicy creates a live policy and declares it.
func (h *harness) createPolicy(name, rules string) *api.ACLPolicy {
	h.t.Helper()
	p, _, err := h.api.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _, _ = h.api.ACL().PolicyDelete(p.ID, nil) })
	h.declarePolicy(record.ACLPolicySpec{Name: name, ID: p.ID, Rules: rules})
	return p
}

func (h *harness) livePolicy(id string) *api.ACLPolicy {
	h.t.Helper()
	p, _, err := h.api.ACL().PolicyRead(id, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// session creates a session on the agent's node; mutate changes the entry
// (nil checks = CreateNoChecks).
func (h *harness) session(entry api.SessionEntry, noChecks bool) string {
	h.t.Helper()
	if entry.TTL == "" {
		entry.TTL = "15s"
	}
	var id string
	var err error
	if noChecks {
		id, _, err = h.api.Session().CreateNoChecks(&entry, nil)
	} else {
		id, _, err = h.api.Session().Create(&entry, nil)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _, _ = h.api.Session().Destroy(id, nil) })
	return id
}

func (h *harness) acquire(key, session string) {
	h.t.Helper()
	ok, _, err := h.api.KV().Acquire(&api.KVPair{Key: key, Session: session, Flags: lockmodel.LockFlagValue}, nil)
	if err != nil || !ok {
		h.t.Fatalf("acquire %s with %s: ok=%v err=%v", key, session, ok, err)
	}
}

func (h *harness) sessionAlive(id string) bool {
	h.t.Helper()
	se, _, err := h.api.Session().Info(id, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		h.t.Fatal(err)
	}
	return se != nil
}

var widened = `key_prefix "" { policy = "write" }`

func TestRepair_recreatesDeletedLockKeysWithTheRightFlags(t *testing.T) {
	h := newHarness(t, agent)
	mutex := h.declareLock(lockmodel.Lock{Name: h.name("mutex"), Prefix: h.prefix + "/mutex"})
	sem := h.declareLock(lockmodel.Lock{Name: h.name("sem"), Prefix: h.prefix + "/sem", Limit: 3})
	c := h.start(compliance.ModeRepair)

	// Missing at start: created create-only.
	h.waitKey(mutex.Key)
	h.waitKey(sem.Key)
	// Deleted out of band: recreated.
	if _, err := h.api.KV().Delete(mutex.Key, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.api.KV().Delete(sem.Key, nil); err != nil {
		t.Fatal(err)
	}
	m := h.waitKey(mutex.Key)
	s := h.waitKey(sem.Key)
	if m.Flags != lockmodel.LockFlagValue || len(m.Value) != 0 || m.Session != "" {
		t.Errorf("mutex key = flags %#x value %q session %q; want api.Lock flags, empty, unheld", m.Flags, m.Value, m.Session)
	}
	if s.Flags != lockmodel.SemaphoreFlagValue || string(s.Value) != `{"Limit":3,"Holders":{}}` {
		t.Errorf("semaphore key = flags %#x value %q", s.Flags, s.Value)
	}
	// Counted and logged once Consul confirmed the write: wait for it.
	eventually(t, 5*time.Second, func() error {
		if got := c.Metrics().RepairsTotal(compliance.KindRecreateKey); got != 4 {
			return fmt.Errorf("consullock_repairs_total{kind=recreate_key} = %v, want 4", got)
		}
		if len(c.logs.lines(`"msg":"repaired"`, `"lock":"`+mutex.Name+`"`, `"reason":"recreate_key"`, `"before":"absent"`)) == 0 {
			return fmt.Errorf("no repair log event naming the lock, reason and before/after")
		}
		return nil
	})

	// The recreated keys work with Consul's own clients.
	lk, err := h.api.LockOpts(&api.LockOptions{Key: mutex.Key, LockTryOnce: true, LockWaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := lk.Lock(nil); err != nil || ch == nil {
		t.Fatalf("api.Lock on the recreated key: %v", err)
	}
	_ = lk.Unlock()
	sm, err := h.api.SemaphorePrefix(sem.Prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := sm.Acquire(nil); err != nil || ch == nil {
		t.Fatalf("api.Semaphore on the recreated key: %v", err)
	}
	_ = sm.Release()
}

func TestRepair_restoresSemaphoreLimitKeepingHolders(t *testing.T) {
	h := newHarness(t, agent)
	sem := h.declareLock(lockmodel.Lock{Name: h.name("sem"), Prefix: h.prefix + "/sem", Limit: 3})
	c := h.start(compliance.ModeRepair)
	h.waitKey(sem.Key)

	sm, err := h.api.SemaphorePrefix(sem.Prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := sm.Acquire(nil)
	if err != nil || lost == nil {
		t.Fatalf("acquire: %v", err)
	}
	defer func() { _ = sm.Release() }()
	before := h.get(sem.Key)
	state, _ := lockmodel.DecodeSemaphoreState(before.Value)
	if len(state.Holders) != 1 {
		t.Fatalf("holders before = %v", state.Holders)
	}
	state.Limit = 7
	tampered, _ := lockmodel.EncodeSemaphoreState(state)
	if ok, _, err := h.api.KV().CAS(&api.KVPair{Key: sem.Key, Flags: before.Flags, Value: tampered, ModifyIndex: before.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("tamper: %v %v", ok, err)
	}
	eventually(t, 10*time.Second, func() error {
		s, _ := lockmodel.DecodeSemaphoreState(h.get(sem.Key).Value)
		if s.Limit != 3 {
			return fmt.Errorf("limit %d", s.Limit)
		}
		return nil
	})
	after, _ := lockmodel.DecodeSemaphoreState(h.get(sem.Key).Value)
	for id := range state.Holders {
		if !after.Holders[id] {
			t.Errorf("holder %s dropped: %v", id, after.Holders)
		}
	}
	select {
	case <-lost:
		t.Error("the semaphore holder lost its slot")
	case <-time.After(300 * time.Millisecond):
	}
	if got := c.Metrics().RepairsTotal(compliance.KindRestoreLimit); got != 1 {
		t.Errorf("repairs{restore_semaphore_limit} = %v", got)
	}
}

func TestRepair_restoresWidenedACLRules(t *testing.T) {
	h := newHarness(t, agent)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("holder"), rules)
	c := h.start(compliance.ModeRepair)

	p.Rules = widened
	if _, _, err := h.api.ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		live := h.livePolicy(p.ID)
		if same, _ := aclrules.RulesEquivalent(rules, live.Rules); !same {
			return fmt.Errorf("live rules still %q", live.Rules)
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if got := c.Metrics().RepairsTotal(compliance.KindRestoreACLRules); got != 1 {
			return fmt.Errorf("repairs{restore_acl_rules} = %v", got)
		}
		if len(c.logs.lines(`"msg":"repaired"`, `"policy":"`+p.Name+`"`, `"before":"key_prefix`)) == 0 {
			return fmt.Errorf("no repair log with before/after")
		}
		return nil
	})
}

func TestRepair_doesNotRewriteReformattedRules(t *testing.T) {
	h := newHarness(t, agent)
	key := h.prefix + "/a/.lock"
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{key}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("holder"), rules)
	c := h.start(compliance.ModeRepair)

	p.Rules = fmt.Sprintf(`session_prefix "worker-" { policy = "write" }
key %q { policy = "write" }`, key)
	upd, _, err := h.api.ACL().PolicyUpdate(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the controller has read the reformatted policy, then a
	// little longer: nothing may be written.
	eventually(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cache.livePolicies[p.ID].ModifyIndex != upd.ModifyIndex {
			return fmt.Errorf("controller has not read the update")
		}
		return nil
	})
	time.Sleep(time.Second)
	live := h.livePolicy(p.ID)
	if live.ModifyIndex != upd.ModifyIndex || live.Rules != p.Rules {
		t.Errorf("policy rewritten: index %d -> %d, rules %q", upd.ModifyIndex, live.ModifyIndex, live.Rules)
	}
	if got := c.Metrics().RepairsTotal(compliance.KindRestoreACLRules); got != 0 {
		t.Errorf("repairs{restore_acl_rules} = %v, want 0", got)
	}
}

func TestEnforce_endsSessionsThatViolateTheirProfile(t *testing.T) {
	h := newHarness(t, agent)
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second,
		Behavior: lockmodel.BehaviorRelease})
	cases := []struct {
		reason   string
		entry    api.SessionEntry
		noChecks bool
		maxHold  time.Duration
	}{
		{lockmodel.ViolationTTLTooLong, api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false, 0},
		{lockmodel.ViolationLockDelayTooShort, api.SessionEntry{LockDelay: time.Second}, false, 0},
		{lockmodel.ViolationBehaviorMismatch, api.SessionEntry{LockDelay: 15 * time.Second, Behavior: "delete"}, false, 0},
		{lockmodel.ViolationNodeCheckMissing, api.SessionEntry{LockDelay: 15 * time.Second}, true, 0},
		{compliance.ReasonMaxHoldExceeded, api.SessionEntry{LockDelay: 15 * time.Second}, false, 2 * time.Second},
	}
	locks := map[string]lockmodel.Lock{}
	for _, tc := range cases {
		locks[tc.reason] = h.declareLock(lockmodel.Lock{Name: h.name(tc.reason), Prefix: h.prefix + "/" + tc.reason,
			SessionDefaults: h.name("strict"), MaxHold: tc.maxHold})
	}
	// A compliant holder, held throughout, must survive.
	good := h.declareLock(lockmodel.Lock{Name: h.name("good"), Prefix: h.prefix + "/good", SessionDefaults: h.name("strict")})
	c := h.start(compliance.ModeEnforce)
	h.waitKey(good.Key)
	goodSession := h.session(api.SessionEntry{LockDelay: 15 * time.Second}, false)
	h.acquire(good.Key, goodSession)

	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			l := locks[tc.reason]
			h.waitKey(l.Key)
			id := h.session(tc.entry, tc.noChecks)
			h.acquire(l.Key, id)
			eventually(t, 15*time.Second, func() error {
				if h.sessionAlive(id) {
					return fmt.Errorf("session %s still alive", id)
				}
				return nil
			})
			// The controller logs and counts after Consul confirmed the
			// destroy, so the session can vanish a moment before the event.
			eventually(t, 5*time.Second, func() error {
				if got := c.Metrics().ViolationsTotal(tc.reason); got < 1 {
					return fmt.Errorf("violations_total{reason=%s} = %v", tc.reason, got)
				}
				if len(c.logs.lines(`"msg":"repaired"`, `"reason":"`+tc.reason, `"session":"`+id+`"`)) == 0 {
					return fmt.Errorf("no log event for ending %s", id)
				}
				return nil
			})
			if p := h.get(l.Key); p == nil || p.Session != "" {
				t.Errorf("key after the session ended: %+v", p)
			}
		})
	}
	if !h.sessionAlive(goodSession) {
		t.Error("the compliant holder's session was ended")
	}
}

func TestObserve_onlyReports(t *testing.T) {
	h := newHarness(t, agent)
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	held := h.declareLock(lockmodel.Lock{Name: h.name("held"), Prefix: h.prefix + "/held", SessionDefaults: h.name("strict")})
	gone := h.declareLock(lockmodel.Lock{Name: h.name("gone"), Prefix: h.prefix + "/gone"})
	if _, err := h.api.KV().Put(&api.KVPair{Key: held.Key, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	bad := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(held.Key, bad)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{held.Key}, SessionNodePrefixes: []string{"w-"}})
	p := h.createPolicy(h.name("holder"), rules)
	p.Rules = widened
	if _, _, err := h.api.ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatal(err)
	}
	before := h.livePolicy(p.ID).ModifyIndex

	c := h.start(compliance.ModeObserve)
	eventually(t, 10*time.Second, func() error {
		for _, kind := range []compliance.Kind{compliance.KindRecreateKey, compliance.KindRestoreACLRules, compliance.KindHolderNonCompliant} {
			if len(c.logs.lines(`"msg":"drift detected"`, `"kind":"`+string(kind)+`"`, `"act":false`)) == 0 {
				return fmt.Errorf("no report of %s yet", kind)
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if h.get(gone.Key) != nil {
		t.Error("observe mode created a key")
	}
	if !h.sessionAlive(bad) {
		t.Error("observe mode ended a session")
	}
	if h.livePolicy(p.ID).ModifyIndex != before {
		t.Error("observe mode rewrote a policy")
	}
	for _, k := range []compliance.Kind{compliance.KindRecreateKey, compliance.KindRestoreACLRules, compliance.KindEndSession} {
		if got := c.Metrics().RepairsTotal(k); got != 0 {
			t.Errorf("repairs{%s} = %v in observe mode", k, got)
		}
	}
	if got := c.Metrics().ViolationsTotal(lockmodel.ViolationTTLTooLong); got != 1 {
		t.Errorf("violations_total{ttl_too_long} = %v, want 1 (reported once)", got)
	}
}

func TestRepair_leavesANonCompliantHolderAlone(t *testing.T) {
	h := newHarness(t, agent)
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l", SessionDefaults: h.name("strict"), MaxHold: time.Second})
	c := h.start(compliance.ModeRepair)
	h.waitKey(l.Key)
	bad := h.session(api.SessionEntry{TTL: "60s", LockDelay: time.Second, Behavior: "delete"}, true)
	h.acquire(l.Key, bad)
	eventually(t, 10*time.Second, func() error {
		if len(c.logs.lines(`"kind":"holder_non_compliant"`, bad, compliance.ReasonMaxHoldExceeded)) == 0 {
			return fmt.Errorf("max_hold not reported yet")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if !h.sessionAlive(bad) {
		t.Fatal("repair mode ended a holder's session")
	}
	if p := h.get(l.Key); p.Session != bad {
		t.Errorf("holder changed: %q", p.Session)
	}
	for _, r := range []string{lockmodel.ViolationTTLTooLong, lockmodel.ViolationLockDelayTooShort, lockmodel.ViolationBehaviorMismatch, lockmodel.ViolationNodeCheckMissing} {
		if len(c.logs.lines(`"kind":"holder_non_compliant"`, bad, r)) == 0 {
			t.Errorf("violation %s not reported", r)
		}
	}
}

func TestRepair_neverFightsTerraform(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	c := h.start(compliance.ModeRepair)
	h.waitKey(l.Key)
	// What the provider does on destroy: the declaration goes first, then
	// the key. The key must stay gone.
	if _, err := h.api.KV().Delete(lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if h.get(l.Key) != nil {
		t.Error("the controller resurrected the key of a destroyed lock")
	}
	if got := c.Metrics().RepairsTotal(compliance.KindRecreateKey); got != 1 {
		t.Errorf("repairs{recreate_key} = %v, want 1 (the initial create only)", got)
	}
}

func TestPermissionErrors_nameThePermission(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	tok, err := agent.MintToken(h.name("readonly"), `key_prefix "" { policy = "read" }
session_prefix "" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := h.start(compliance.ModeRepair, tok.SecretID)
	eventually(t, 10*time.Second, func() error {
		if len(c.logs.lines(`"msg":"repair failed"`, `\"key:write\"`, l.Key)) == 0 {
			return fmt.Errorf("no repair failure naming key:write on %s", l.Key)
		}
		if len(c.logs.lines(`"msg":"watch failed"`, `"watch":"acl_policies"`, `acl:read`)) == 0 {
			return fmt.Errorf("no watch failure naming acl:read")
		}
		return nil
	})
	if h.get(l.Key) != nil {
		t.Error("key created without permission?")
	}
}

func TestAgentRestart_controllerRecoversWithoutRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	own, err := testenv.Start(ctx, testenv.Options{NodeName: "consullock-restart"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	h := newHarness(t, own)
	declare := func() lockmodel.Lock {
		return h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	}
	l := declare()
	c := h.start(compliance.ModeRepair)
	h.waitKey(l.Key)

	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	h.api = own.Client()
	if h.get(l.Key) != nil {
		t.Fatal("dev agent kept its state across a restart")
	}
	declare() // re-seed: the dev agent lost everything
	eventually(t, 45*time.Second, func() error {
		if p := h.get(l.Key); p == nil || p.Flags != lockmodel.LockFlagValue {
			return fmt.Errorf("lock key not recreated after the agent restart")
		}
		return nil
	})
	if len(c.logs.lines(`"msg":"watch failed"`)) == 0 {
		t.Error("the restart was not noticed by any watch")
	}
	// And it keeps watching: a later deletion is repaired too.
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	h.waitKey(l.Key)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the repository's binary once (the controller runs as a
// subprocess, as it does in production).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "consullock-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "consullock")
		buildErr = testenv.BuildConsullock(context.Background(), binPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type replica struct {
	name   string
	cmd    *exec.Cmd
	listen string
	logs   *logBuffer
	done   chan struct{}
	err    error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// replica starts a controller process; extra are more of its flags.
func (h *harness) replica(name string, mode compliance.Mode, extra ...string) *replica {
	h.t.Helper()
	r := &replica{name: name, listen: freeAddr(h.t), logs: &logBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(binary(h.t), append([]string{"controller", "-mode", string(mode), "-listen", r.listen, "-registry-prefix", h.registry}, extra...)...)
	r.cmd.Env = append(os.Environ(), h.a.Env()...)
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	h.t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if h.t.Failed() {
			h.t.Logf("replica %s log:\n%s", r.name, r.logs.String())
		}
	})
	return r
}

// metric returns the value of an unlabelled metric, or -1.
func (r *replica) metric(name string) float64 {
	resp, err := http.Get("http://" + r.listen + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			_, _ = fmt.Sscanf(v, "%g", &f)
			return f
		}
	}
	return -1
}

func (r *replica) ready() bool {
	resp, err := http.Get("http://" + r.listen + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// theLeader waits until exactly one of the live replicas leads.
func theLeader(t *testing.T, timeout time.Duration, rs ...*replica) *replica {
	t.Helper()
	var leader *replica
	eventually(t, timeout, func() error {
		leader = nil
		n := 0
		for _, r := range rs {
			if r.exited() {
				continue
			}
			switch r.metric("consullock_leader") {
			case 1:
				leader = r
				n++
			case 0:
			default:
				return fmt.Errorf("replica %s not serving metrics", r.name)
			}
		}
		if n != 1 {
			return fmt.Errorf("%d leaders", n)
		}
		return nil
	})
	return leader
}

func repairsLogged(rs ...*replica) (total int, by map[string]int) {
	by = map[string]int{}
	for _, r := range rs {
		n := len(r.logs.lines(`"msg":"repaired"`))
		by[r.name] = n
		total += n
	}
	return total, by
}

func TestHA_exactlyOneReplicaActsAndHandsOver(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	a, b := h.replica("a", compliance.ModeRepair), h.replica("b", compliance.ModeRepair)
	eventually(t, 60*time.Second, func() error {
		if !a.ready() || !b.ready() {
			return fmt.Errorf("replicas not ready")
		}
		return nil
	})
	leader := theLeader(t, 20*time.Second, a, b)
	follower := a
	if leader == a {
		follower = b
	}
	h.waitKey(l.Key)

	deleteAndWait := func(wantBy *replica) {
		t.Helper()
		before, _ := repairsLogged(a, b)
		beforeBy := len(wantBy.logs.lines(`"msg":"repaired"`))
		if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
			t.Fatal(err)
		}
		h.waitKey(l.Key)
		time.Sleep(300 * time.Millisecond)
		after, by := repairsLogged(a, b)
		if after != before+1 || len(wantBy.logs.lines(`"msg":"repaired"`)) != beforeBy+1 {
			t.Errorf("repairs logged %d -> %d (%v); want exactly one more, by %s", before, after, by, wantBy.name)
		}
	}
	deleteAndWait(leader)
	if total, by := repairsLogged(a, b); total != 2 || by[follower.name] != 0 {
		t.Errorf("repairs by replica = %v; want only the leader's two", by)
	}

	// SIGTERM: the leader stops acting, releases, destroys, exits 0 fast.
	start := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leader.done:
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not exit within 10s of SIGTERM")
	}
	if leader.err != nil {
		t.Errorf("leader exit after SIGTERM: %v, want status 0", leader.err)
	}
	t.Logf("leader exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if len(leader.logs.lines(`"msg":"released leadership"`)) == 0 {
		t.Error("leader did not log releasing its leadership")
	}
	next := theLeader(t, 15*time.Second, a, b)
	if next != follower {
		t.Fatalf("leader after SIGTERM = %s", next.name)
	}
	t.Logf("take-over after SIGTERM in %s", time.Since(start).Round(time.Millisecond))
	deleteAndWait(next)

	// SIGKILL: a third replica takes over once Consul invalidates the dead
	// leader's session (about 2 x TTL) and its lock-delay passes.
	c := h.replica("c", compliance.ModeRepair)
	eventually(t, 60*time.Second, func() error {
		if !c.ready() {
			return fmt.Errorf("replica c not ready")
		}
		return nil
	})
	if c.metric("consullock_leader") != 0 {
		t.Fatal("a new replica leads while another holds the lock")
	}
	start = time.Now()
	if err := next.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-next.done
	if got := theLeader(t, 60*time.Second, a, b, c); got != c {
		t.Fatalf("leader after SIGKILL = %s", got.name)
	}
	t.Logf("take-over after SIGKILL in %s", time.Since(start).Round(time.Millisecond))
	beforeC := len(c.logs.lines(`"msg":"repaired"`))
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	h.waitKey(l.Key)
	eventually(t, 5*time.Second, func() error {
		if len(c.logs.lines(`"msg":"repaired"`)) != beforeC+1 {
			return fmt.Errorf("the new leader did not log the repair")
		}
		return nil
	})
}
