package controller

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// "Never fight Terraform": the real provider, driven by the real OpenTofu,
// applies and destroys while a repair-mode controller watches the same
// registry. Both talk to Consul through counting proxies, so every write
// is attributed: the provider's writes must be exactly those its apply
// needs, and the controller must write nothing at all.

var (
	providerOnce sync.Once
	providerDir  string
	providerErr  error
)

// builtProvider builds the provider from this tree once, into a directory
// that a dev_overrides CLI configuration can point at.
func builtProvider(t *testing.T) string {
	t.Helper()
	providerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "consullock-provider-")
		if err != nil {
			providerErr = err
			return
		}
		if providerErr = testenv.BuildProvider(context.Background(), dir); providerErr == nil {
			providerDir = dir
		}
	})
	if providerErr != nil {
		t.Fatal(providerErr)
	}
	return providerDir
}

// tofuWorkspace is a directory with a configuration, run with the real
// OpenTofu against an address (the agent or a proxy in front of it).
type tofuWorkspace struct {
	t  *testing.T
	tf *testenv.Tofu
}

func newTofuWorkspace(t *testing.T, addr, token string) *tofuWorkspace {
	t.Helper()
	tf, err := testenv.NewTofuWorkspace(builtProvider(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tf.Env = append(os.Environ(), "TF_LOG=",
		"CONSUL_HTTP_ADDR="+addr, "CONSUL_HTTP_TOKEN="+token,
		"CONSUL_HTTP_TOKEN_FILE=", "CONSUL_HTTP_SSL=", "CONSUL_NAMESPACE=", "CONSUL_PARTITION=")
	return &tofuWorkspace{t: t, tf: tf}
}

func (w *tofuWorkspace) write(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.tf.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// run runs tofu with args and fails the test on a non-zero exit.
func (w *tofuWorkspace) run(args ...string) string {
	w.t.Helper()
	start := time.Now()
	out, err := w.tf.Run(context.Background(), args...)
	if err != nil {
		w.t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	w.t.Logf("tofu %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return string(out)
}

// config renders a configuration with one mutex, one semaphore and an ACL
// policy for the mutex holders, under the harness's registry and prefix.
func tfConfig(h *harness, nodePrefixes []string, semLimit int) string {
	quoted := make([]string, len(nodePrefixes))
	for i, p := range nodePrefixes {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf(`terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

provider "consullock" {
  registry_prefix = %q
}

resource "consullock_lock" "job" {
  name   = %q
  prefix = "%s/job"
}

resource "consullock_lock" "pool" {
  name   = %q
  prefix = "%s/pool"
  limit  = %d
}

resource "consullock_acl_policy" "workers" {
  name                  = %q
  lock_keys             = [consullock_lock.job.key]
  semaphore_prefixes    = [consullock_lock.pool.prefix]
  session_node_prefixes = [%s]
}
`, h.registry, h.name("job"), h.prefix, h.name("pool"), h.prefix, semLimit, h.name("workers"), strings.Join(quoted, ", "))
}

// registryLag is how late the controller's registry watch hears of a
// declaration change in the Terraform tests: later than its other watches
// hear of the live write that follows it, as seen on Consul 1.16 (the
// watches answer independently, in any order).
const registryLag = 1500 * time.Millisecond

// newLaggingProxy returns the address of a proxy to addr that holds every
// changed answer of a blocking query on the KV prefix for lag before
// passing it on, so the watch on prefix hears of each change after the
// other watches do.
func newLaggingProxy(t *testing.T, addr, prefix string, lag time.Duration) string {
	t.Helper()
	target, _ := url.Parse("http://" + addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		index := r.URL.Query().Get("index")
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/kv/"+prefix) && index != "" && index != "0" &&
			resp.Header.Get("X-Consul-Index") != index {
			select {
			case <-time.After(lag):
			case <-r.Context().Done():
			}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// tfWorld is a controller and a tofu workspace on the metered agent, each
// behind its own counting proxy; the controller's registry watch lags
// (registryLag) so that it may see an apply's writes in either order.
type tfWorld struct {
	h          *harness
	c          *running
	ctrl, tf   *countingProxy
	ws         *tofuWorkspace
	grace      time.Duration
	job, pool  lockmodel.Lock
	policyName string
}

func newTFWorld(t *testing.T) *tfWorld {
	a := metered(t)
	h := newHarness(t, a)
	w := &tfWorld{h: h, ctrl: newCountingProxy(t, a), tf: newCountingProxy(t, a)}
	w.c = h.startWith(startOpts{mode: compliance.ModeRepair, addr: w.ctrl.Addr(),
		watchAddr: newLaggingProxy(t, w.ctrl.Addr(), h.registry+"/", registryLag)})
	w.grace = w.c.cfg.ApplyGrace
	w.ws = newTofuWorkspace(t, w.tf.Addr(), a.ManagementToken)
	w.job, _ = lockmodel.Lock{Name: h.name("job"), Prefix: h.prefix + "/job"}.Normalize()
	w.pool, _ = lockmodel.Lock{Name: h.name("pool"), Prefix: h.prefix + "/pool", Limit: 3}.Normalize()
	w.policyName = h.name("workers")
	return w
}

// settle waits past the controller's apply grace, so that anything it
// would do about what the apply wrote has been done.
func (w *tfWorld) settle() {
	time.Sleep(w.grace + 2*time.Second)
}

// controllerQuiet fails unless the controller has made no write and no
// repair, logged no repair attempt and reported no drift: an apply in
// progress is pending, not drift (Pending).
func (w *tfWorld) controllerQuiet(when string) {
	t := w.h.t
	t.Helper()
	quiet(t, when, w.c, w.ctrl)
}

// quiet is controllerQuiet for any controller c whose requests go through
// proxy.
func quiet(t *testing.T, when string, c *running, proxy *countingProxy) {
	t.Helper()
	if writes := proxy.Writes(); len(writes) != 0 {
		t.Errorf("%s: the controller wrote to Consul: %s", when, formatCounts(writes))
	}
	for _, k := range driftKinds {
		if n := c.Metrics().RepairsTotal(k); n != 0 {
			t.Errorf("%s: consullock_repairs_total{kind=%s} = %v, want 0", when, k, n)
		}
		if n := c.Metrics().DriftTotal(k); n != 0 {
			t.Errorf("%s: consullock_drift_total{kind=%s} = %v, want 0", when, k, n)
		}
	}
	if n := c.Metrics().RepairsTotal(compliance.KindEndSession); n != 0 {
		t.Errorf("%s: consullock_repairs_total{kind=%s} = %v, want 0", when, compliance.KindEndSession, n)
	}
	if l := c.logs.lines(`"msg":"repair`); len(l) != 0 {
		t.Errorf("%s: the controller tried to repair:\n%s", when, strings.Join(l, "\n"))
	}
	if l := c.logs.lines(`"msg":"drift detected"`); len(l) != 0 {
		t.Errorf("%s: the controller reported drift:\n%s", when, strings.Join(l, "\n"))
	}
}

func (w *tfWorld) policy() *api.ACLPolicy {
	w.h.t.Helper()
	p, _, err := w.h.api.ACL().PolicyReadByName(w.policyName, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		w.h.t.Fatal(err)
	}
	return p
}

func isPolicyWrite(k string) bool {
	return strings.HasPrefix(k, "PUT /v1/acl/policy")
}

// firstIndex returns the position of the first write equal to w, or -1.
func firstIndex(seq []string, w string) int {
	for i, s := range seq {
		if s == w {
			return i
		}
	}
	return -1
}

// declaredFirst fails unless the write decl comes before the write live
// in seq, both present: the order the controller relies on.
func declaredFirst(t *testing.T, when string, seq []string, decl, live string) {
	t.Helper()
	d, l := firstIndex(seq, decl), firstIndex(seq, live)
	switch {
	case d < 0 || l < 0:
		t.Errorf("%s: expected writes %q and %q, got:\n  %s", when, decl, live, strings.Join(seq, "\n  "))
	case d > l:
		t.Errorf("%s: the provider touched the live object (%s, write #%d) before its declaration (%s, write #%d)", when, live, l+1, decl, d+1)
	}
}

func (w *tfWorld) recordPath(kind, name string) string {
	return "/v1/kv/" + lockmodel.RegistryKey(w.h.registry, kind, name)
}

func TestTerraform_applyChangingRulesDoesNotFightTheController(t *testing.T) {
	w := newTFWorld(t)
	h := w.h

	w.ws.write(tfConfig(h, []string{"worker-"}, 3))
	w.ws.run("apply", "-auto-approve", "-no-color", "-input=false")
	w.settle()
	w.controllerQuiet("after the first apply")
	p1 := w.policy()
	if p1 == nil {
		t.Fatal("the apply created no policy")
	}
	if pair := h.get(w.job.Key); pair == nil || pair.Flags != lockmodel.LockFlagValue {
		t.Fatalf("the apply created no mutex key: %+v", pair)
	}

	// The apply that matters: new session node prefix (the rules change)
	// and a new semaphore limit (the key's value changes), while the
	// controller watches both.
	for round, change := range []struct {
		prefixes []string
		limit    int
	}{
		{[]string{"worker-", "batch-"}, 5},
		{[]string{"batch-"}, 4},
	} {
		before := w.policy()
		beforeSem := h.get(w.pool.Key)
		w.tf.Reset()
		agentBefore := readAgentCounters(t, h.a)

		w.ws.write(tfConfig(h, change.prefixes, change.limit))
		w.ws.run("apply", "-auto-approve", "-no-color", "-input=false")
		after := w.policy()
		afterSem := h.get(w.pool.Key)
		w.settle()

		when := fmt.Sprintf("round %d", round+1)
		w.controllerQuiet(when)
		want := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{w.job.Key},
			SemaphorePrefixes: []string{w.pool.Prefix}, SessionNodePrefixes: change.prefixes})
		final := w.policy()
		if same, _ := aclrules.RulesEquivalent(want, final.Rules); !same {
			t.Errorf("%s: live rules %q, want %q", when, final.Rules, want)
		}
		// No flapping: the policy changed once (the apply), and nothing
		// changed it after the apply returned.
		if after.ModifyIndex == before.ModifyIndex {
			t.Errorf("%s: the apply did not change the policy (ModifyIndex %d)", when, after.ModifyIndex)
		}
		if final.ModifyIndex != after.ModifyIndex {
			t.Errorf("%s: the policy changed after the apply: ModifyIndex %d -> %d", when, after.ModifyIndex, final.ModifyIndex)
		}
		tfWrites := w.tf.Writes()
		seq := w.tf.Sequence()
		declaredFirst(t, when, seq, "PUT "+w.recordPath(lockmodel.KindACLPolicy, w.policyName), "PUT /v1/acl/policy/"+after.ID)
		declaredFirst(t, when, seq, "PUT "+w.recordPath(lockmodel.KindLock, w.pool.Name), "PUT /v1/kv/"+w.pool.Key)
		if n := writesMatching(tfWrites, isPolicyWrite); n != 1 {
			t.Errorf("%s: the provider wrote the policy %d times, want 1 (%s)", when, n, formatCounts(tfWrites))
		}
		agentWrites, _ := readAgentCounters(t, h.a).writesSince(agentBefore)
		if n := agentWrites["consul_acl_policy_upsert_count"]; n != 1 {
			t.Errorf("%s: the agent applied %v policy upserts, want exactly the apply's 1 (%s)", when, n, formatCounts(agentWrites))
		}
		// The semaphore key: the limit changed once, by the apply.
		finalSem := h.get(w.pool.Key)
		s, _ := lockmodel.DecodeSemaphoreState(finalSem.Value)
		if s.Limit != change.limit {
			t.Errorf("%s: semaphore Limit %d, want %d", when, s.Limit, change.limit)
		}
		if afterSem.ModifyIndex == beforeSem.ModifyIndex || finalSem.ModifyIndex != afterSem.ModifyIndex {
			t.Errorf("%s: semaphore key ModifyIndex %d -> %d (apply) -> %d (after the grace); want one change, by the apply",
				when, beforeSem.ModifyIndex, afterSem.ModifyIndex, finalSem.ModifyIndex)
		}
		t.Logf("%s: policy ModifyIndex %d -> %d; provider writes: %s; agent writes: %s",
			when, before.ModifyIndex, final.ModifyIndex, formatCounts(tfWrites), formatCounts(agentWrites))
	}
	if out := w.ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after the applies is not empty:\n%s", out)
	}
}

func TestTerraform_destroyLeavesNoOrphanAndNothingResurrected(t *testing.T) {
	w := newTFWorld(t)
	h := w.h
	records := func() []string {
		keys, _, err := h.api.KV().Keys(h.registry+"/", "", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	// Several rounds: the window between the provider's two deletions is
	// short, a single round could pass by luck.
	for round := 1; round <= 3; round++ {
		when := fmt.Sprintf("round %d", round)
		w.ws.write(tfConfig(h, []string{"worker-"}, 3))
		w.ws.run("apply", "-auto-approve", "-no-color", "-input=false")
		if h.get(w.job.Key) == nil || h.get(w.pool.Key) == nil || len(records()) != 3 {
			t.Fatalf("%s: apply did not create the keys and 3 records (records: %v)", when, records())
		}
		policyID := w.policy().ID
		// The controller must have seen the declarations before the
		// destroy, or the test would prove nothing.
		eventually(t, 10*time.Second, func() error {
			w.c.mu.Lock()
			defer w.c.mu.Unlock()
			if _, ok := w.c.cache.locks[w.job.Name]; !ok || w.c.cache.livePolicies[policyID].ID == "" {
				return fmt.Errorf("controller has not seen the declarations yet")
			}
			return nil
		})

		w.tf.Reset()
		w.ws.run("destroy", "-auto-approve", "-no-color", "-input=false")
		seq := w.tf.Sequence()
		declaredFirst(t, when, seq, "DELETE "+w.recordPath(lockmodel.KindLock, w.job.Name), "DELETE /v1/kv/"+w.job.Key)
		declaredFirst(t, when, seq, "DELETE "+w.recordPath(lockmodel.KindLock, w.pool.Name), "DELETE /v1/kv/"+w.pool.Key)
		declaredFirst(t, when, seq, "DELETE "+w.recordPath(lockmodel.KindACLPolicy, w.policyName), "DELETE /v1/acl/policy/"+policyID)
		w.settle()
		for _, key := range []string{w.job.Key, w.pool.Key} {
			if p := h.get(key); p != nil {
				t.Errorf("%s: lock key %s exists after destroy (flags %#x, ModifyIndex %d): resurrected or orphaned",
					when, key, p.Flags, p.ModifyIndex)
			}
		}
		if rs := records(); len(rs) != 0 {
			t.Errorf("%s: records left after destroy: %v", when, rs)
		}
		if p, _, err := h.api.ACL().PolicyRead(policyID, nil); err == nil && p != nil {
			t.Errorf("%s: policy %s exists after destroy", when, p.Name)
		}
		w.controllerQuiet(when)
		if t.Failed() {
			return
		}
	}
	if n := w.c.Metrics().ViolationsTotal(compliance.ReasonMaxHoldExceeded); n != 0 {
		t.Errorf("violations = %v", n)
	}
}

// TestApplyGrace_aChangedDeclarationIsLeftToItsApplyThenConverged plays
// the provider's part by hand: a declaration written while the controller
// watches is left alone for the apply grace (the apply writes the live
// object meanwhile), and converged after it when the apply never did.
func TestApplyGrace_aChangedDeclarationIsLeftToItsApplyThenConverged(t *testing.T) {
	const grace = 2 * time.Second
	h := newHarness(t, agent)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("workers"), rules)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, configure: func(cfg *Config) { cfg.ApplyGrace = grace }})

	// A new lock and new rules are declared; the "apply" then fails to
	// write either live object.
	declared := time.Now()
	l := h.declareLock(lockmodel.Lock{Name: h.name("new"), Prefix: h.prefix + "/new"})
	newRules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"batch-"}})
	h.declarePolicy(record.ACLPolicySpec{Name: p.Name, ID: p.ID, Rules: newRules})

	time.Sleep(grace / 2)
	if h.get(l.Key) != nil {
		t.Errorf("the key of a lock declared %s ago was created within the apply grace", time.Since(declared).Round(time.Millisecond))
	}
	if live := h.livePolicy(p.ID); live.ModifyIndex != p.ModifyIndex {
		t.Errorf("the policy was rewritten within the apply grace")
	}
	if l := c.logs.lines(`"msg":"drift detected"`); len(l) != 0 {
		t.Errorf("drift reported within the apply grace:\n%s", strings.Join(l, "\n"))
	}

	// After the grace, the declarations win.
	h.waitKey(l.Key)
	eventually(t, 10*time.Second, func() error {
		if same, _ := aclrules.RulesEquivalent(newRules, h.livePolicy(p.ID).Rules); !same {
			return fmt.Errorf("policy rules not converged to the declaration")
		}
		return nil
	})
	if took := time.Since(declared); took < grace {
		t.Errorf("converged after %s, within the apply grace of %s", took, grace)
	}
	// The controller counts a repair when its write returns, which can be
	// after the test sees the write's effect: wait for the count, then
	// make sure it does not grow past one.
	repairs := func() error {
		rk, ra := c.Metrics().RepairsTotal(compliance.KindRecreateKey), c.Metrics().RepairsTotal(compliance.KindRestoreACLRules)
		if rk != 1 || ra != 1 {
			return fmt.Errorf("repairs: recreate_key %v, restore_acl_rules %v; want 1, 1", rk, ra)
		}
		return nil
	}
	eventually(t, 5*time.Second, repairs)
	time.Sleep(grace)
	if err := repairs(); err != nil {
		t.Errorf("after another apply grace: %v", err)
	}
}

func TestApplyGrace_aHolderStillInViolationAfterAnApplyIsNotCountedTwice(t *testing.T) {
	const grace = time.Second
	h := newHarness(t, agent)
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	l := lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l", SessionDefaults: h.name("strict")}
	l = h.declareLock(l)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, configure: func(cfg *Config) { cfg.ApplyGrace = grace }})
	h.waitKey(l.Key)
	bad := h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(l.Key, bad)
	reported := func() int {
		return len(c.logs.lines(`"msg":"drift detected"`, `"kind":"holder_non_compliant"`, bad))
	}
	eventually(t, 10*time.Second, func() error {
		if reported() != 1 {
			return fmt.Errorf("violation reported %d times", reported())
		}
		return nil
	})
	// An apply changes the lock's description: its declaration settles,
	// and the holder is still the same one in the same violation.
	l.Description = "changed by an apply"
	h.declareLock(l)
	time.Sleep(grace + time.Second)
	if n := c.Metrics().ViolationsTotal(lockmodel.ViolationTTLTooLong); n != 1 {
		t.Errorf("violations_total{ttl_too_long} = %v, want 1", n)
	}
	if n := reported(); n != 1 {
		t.Errorf("violation reported %d times, want once", n)
	}
}

// An apply that wrote its declarations and stopped before the live writes
// (killed, or its Consul call failed): the difference is pending for the
// apply grace, then it is drift, reported once, counted and repaired.
func TestTerraform_anApplyThatStopsAfterItsDeclarationsIsDriftAfterTheGrace(t *testing.T) {
	w := newTFWorld(t)
	h := w.h
	w.ws.write(tfConfig(h, []string{"worker-"}, 3))
	w.ws.run("apply", "-auto-approve", "-no-color", "-input=false")
	w.settle()
	w.controllerQuiet("after the apply")
	before := w.policy()

	// The declarations the next apply would write, written as it does
	// (declaration first), and no live write after them.
	policyKey := lockmodel.RegistryKey(h.registry, lockmodel.KindACLPolicy, w.policyName)
	spec, err := record.DecodeACLPolicyRecord(h.get(policyKey).Value)
	if err != nil {
		t.Fatal(err)
	}
	spec.Rules = aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{w.job.Key},
		SemaphorePrefixes: []string{w.pool.Prefix}, SessionNodePrefixes: []string{"batch-"}})
	declared := time.Now()
	h.declarePolicy(spec)
	pool := w.pool
	pool.Limit = 5
	h.declareLock(pool)

	time.Sleep(w.grace / 2)
	if time.Since(declared) < w.grace {
		w.controllerQuiet("within the apply grace")
	}

	eventually(t, w.grace+15*time.Second, func() error {
		if same, _ := aclrules.RulesEquivalent(spec.Rules, w.policy().Rules); !same {
			return fmt.Errorf("policy rules not repaired to the declaration")
		}
		if s, _ := lockmodel.DecodeSemaphoreState(h.get(pool.Key).Value); s.Limit != pool.Limit {
			return fmt.Errorf("semaphore Limit %d, want %d", s.Limit, pool.Limit)
		}
		if w.c.Metrics().RepairsTotal(compliance.KindRestoreACLRules) != 1 || w.c.Metrics().RepairsTotal(compliance.KindRestoreLimit) != 1 {
			return fmt.Errorf("repairs not counted yet")
		}
		return nil
	})
	if took := time.Since(declared); took < w.grace {
		t.Errorf("repaired %s after the declarations, within the apply grace of %s", took.Round(time.Millisecond), w.grace)
	}
	for _, c := range []struct {
		kind  compliance.Kind
		field string
	}{{compliance.KindRestoreACLRules, `"policy":"` + w.policyName + `"`}, {compliance.KindRestoreLimit, `"lock":"` + pool.Name + `"`}} {
		if n := len(w.c.logs.lines(`"level":"WARN"`, `"msg":"drift detected"`, `"kind":"`+string(c.kind)+`"`, c.field)); n != 1 {
			t.Errorf("drift %s reported %d times at WARN, want once", c.kind, n)
		}
		if n := w.c.Metrics().DriftTotal(c.kind); n != 1 {
			t.Errorf("consullock_drift_total{kind=%s} = %v, want 1", c.kind, n)
		}
	}
	if after := w.policy(); after.ModifyIndex == before.ModifyIndex {
		t.Errorf("the policy was not written (ModifyIndex %d)", after.ModifyIndex)
	}
}

// The controller's watches answer independently: here the registry watch
// hears of a declaration change after the other watches hear of the live
// write that followed it (as on Consul 1.16). The old declaration then
// looks violated by the new object: that is an apply in progress, pending,
// and neither reported, counted nor repaired.
func TestApplyGrace_aLiveWriteSeenBeforeItsDeclarationIsPending(t *testing.T) {
	a := metered(t)
	h := newHarness(t, a)
	proxy := newCountingProxy(t, a)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("workers"), rules)
	sem := h.declareLock(lockmodel.Lock{Name: h.name("sem"), Prefix: h.prefix + "/sem", Limit: 3})
	if _, err := h.api.KV().Put(&api.KVPair{Key: sem.Key, Flags: sem.Flags(), Value: lockmodel.NewSemaphoreValue(3)}, nil); err != nil {
		t.Fatal(err)
	}
	c := h.startWith(startOpts{mode: compliance.ModeRepair, addr: proxy.Addr(),
		watchAddr: newLaggingProxy(t, proxy.Addr(), h.registry+"/", registryLag)})
	eventually(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.ready.Load() || c.cache.livePolicies[p.ID].ID == "" {
			return fmt.Errorf("controller not synced yet")
		}
		return nil
	})

	// What an apply does: each declaration, then its live object.
	newRules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"batch-"}})
	h.declarePolicy(record.ACLPolicySpec{Name: p.Name, ID: p.ID, Rules: newRules})
	p.Rules = newRules
	upd, _, err := h.api.ACL().PolicyUpdate(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	sem.Limit = 5
	h.declareLock(sem)
	if _, err := h.api.KV().Put(&api.KVPair{Key: sem.Key, Flags: sem.Flags(), Value: lockmodel.NewSemaphoreValue(5)}, nil); err != nil {
		t.Fatal(err)
	}
	semIndex := h.get(sem.Key).ModifyIndex

	// Past the registry watch's lag and the apply grace.
	time.Sleep(registryLag + c.cfg.ApplyGrace + 2*time.Second)
	quiet(t, "after the apply", c, proxy)
	if live := h.livePolicy(p.ID); live.ModifyIndex != upd.ModifyIndex {
		t.Errorf("the policy changed after the apply: ModifyIndex %d -> %d", upd.ModifyIndex, live.ModifyIndex)
	}
	if now := h.get(sem.Key).ModifyIndex; now != semIndex {
		t.Errorf("the semaphore key changed after the apply: ModifyIndex %d -> %d", semIndex, now)
	}
}
