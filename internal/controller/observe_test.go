package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// shippedRules reads one of the ACL rule files shipped in examples/controller.
func shippedRules(t *testing.T, file string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "examples", "controller", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// electionWrite reports whether a write is the leader election's own: its
// session (create, renew, destroy) and the leader key (acquire, release).
func electionWrite(registry string) func(string) bool {
	return func(w string) bool {
		return w == "PUT /v1/session/create" || strings.HasPrefix(w, "PUT /v1/session/renew/") ||
			strings.HasPrefix(w, "PUT /v1/session/destroy/") || w == "PUT /v1/kv/"+registry+"/controller/.lock"
	}
}

// observeWorld declares drift of every kind observe mode reports, in the
// default registry "consul-lock" that the shipped rules name, on the
// metered agent (node "controller-1", which the shipped rules let the
// controller create its leader session on).
type observeWorld struct {
	h          *harness
	token      string
	gone, held lockmodel.Lock
	bad        string
	policy     *api.ACLPolicy
	heldIndex  uint64
}

func newObserveWorld(t *testing.T) *observeWorld {
	a := metered(t)
	h := newHarness(t, a)
	h.registry = lockmodel.DefaultRegistryPrefix
	t.Cleanup(func() { _, _ = h.api.KV().DeleteTree(h.registry+"/", nil) })

	// Exactly the shipped rules: the registry is the default one they name.
	tok, err := a.MintToken(h.name("observe"), shippedRules(t, "observe.hcl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &observeWorld{h: h, token: tok.SecretID}
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("strict"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	w.gone = h.declareLock(lockmodel.Lock{Name: h.name("gone"), Prefix: h.prefix + "/gone"})
	w.held = h.declareLock(lockmodel.Lock{Name: h.name("held"), Prefix: h.prefix + "/held", SessionDefaults: h.name("strict")})
	if _, err := h.api.KV().Put(&api.KVPair{Key: w.held.Key, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	w.bad = h.session(api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, false)
	h.acquire(w.held.Key, w.bad)
	w.heldIndex = h.get(w.held.Key).ModifyIndex
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{w.held.Key}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("holder"), rules)
	p.Rules = widened
	if w.policy, _, err = h.api.ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// untouched fails unless every drifted object is as the test left it.
func (w *observeWorld) untouched(when string) {
	h := w.h
	h.t.Helper()
	if p := h.get(w.gone.Key); p != nil {
		h.t.Errorf("%s: the deleted lock key %s was created", when, w.gone.Key)
	}
	if p := h.get(w.held.Key); p == nil || p.ModifyIndex != w.heldIndex || p.Session != w.bad {
		h.t.Errorf("%s: the held key changed: %+v", when, p)
	}
	if !h.sessionAlive(w.bad) {
		h.t.Errorf("%s: the non-compliant holder's session was ended", when)
	}
	if p := h.livePolicy(w.policy.ID); p.ModifyIndex != w.policy.ModifyIndex {
		h.t.Errorf("%s: the policy was rewritten (ModifyIndex %d -> %d)", when, w.policy.ModifyIndex, p.ModifyIndex)
	}
}

// reportsAll waits until c has reported each kind of drift, not acting.
func reportsAll(t *testing.T, c *running) {
	t.Helper()
	eventually(t, 15*time.Second, func() error {
		for _, kind := range []compliance.Kind{compliance.KindRecreateKey, compliance.KindRestoreACLRules, compliance.KindHolderNonCompliant} {
			if len(c.logs.lines(`"msg":"drift detected"`, `"kind":"`+string(kind)+`"`, `"act":false`)) == 0 {
				return fmt.Errorf("no report of %s yet", kind)
			}
		}
		return nil
	})
}

func TestObserve_shippedReadOnlyRulesReportDriftAndWriteNothing(t *testing.T) {
	w := newObserveWorld(t)
	h := w.h

	t.Run("with leader election", func(t *testing.T) {
		proxy := newCountingProxy(t, h.a)
		before := readAgentCounters(t, h.a)
		c := h.startWith(startOpts{mode: compliance.ModeObserve, token: w.token, addr: proxy.Addr(), ha: true})
		eventually(t, 15*time.Second, func() error {
			if !c.IsLeader() {
				return fmt.Errorf("not leader: the shipped rules must allow the election on node %s", meteredNode)
			}
			return nil
		})
		reportsAll(t, c)
		time.Sleep(time.Second) // time to act, were it going to
		c.stop()

		writes := proxy.Writes()
		if other := writesMatching(writes, func(k string) bool { return !electionWrite(h.registry)(k) }); other != 0 {
			t.Errorf("observe mode wrote outside its leader election: %s", formatCounts(writes))
		}
		agentWrites, _ := readAgentCounters(t, h.a).writesSince(before)
		if n := agentWrites["consul_acl_policy_upsert_count"]; n != 0 {
			t.Errorf("the agent applied %v policy upserts", n)
		}
		t.Logf("observe mode with leader election: controller writes %s; agent writes %s", formatCounts(writes), formatCounts(agentWrites))
		w.untouched("observe")
		for _, k := range []compliance.Kind{compliance.KindRecreateKey, compliance.KindRestoreACLRules, compliance.KindEndSession} {
			if n := c.Metrics().RepairsTotal(k); n != 0 {
				t.Errorf("repairs{%s} = %v in observe mode", k, n)
			}
		}
		if n := c.Metrics().ViolationsTotal(lockmodel.ViolationTTLTooLong); n != 1 {
			t.Errorf("violations_total{ttl_too_long} = %v, want 1", n)
		}
		if l := c.logs.lines(`"level":"ERROR"`); len(l) != 0 {
			t.Errorf("errors with the shipped observe rules:\n%s", strings.Join(l, "\n"))
		}
		if l := c.logs.lines(`hidden by ACLs`); len(l) != 0 {
			t.Errorf("the shipped observe rules hide sessions:\n%s", strings.Join(l, "\n"))
		}
	})

	t.Run("without leader election no write at all", func(t *testing.T) {
		proxy := newCountingProxy(t, h.a)
		before := readAgentCounters(t, h.a)
		c := h.startWith(startOpts{mode: compliance.ModeObserve, token: w.token, addr: proxy.Addr()})
		reportsAll(t, c)
		time.Sleep(time.Second)
		c.stop()
		if writes := proxy.Writes(); len(writes) != 0 {
			t.Errorf("observe mode with -no-leader-election wrote: %s", formatCounts(writes))
		}
		if d, total := readAgentCounters(t, h.a).writesSince(before); total != 0 {
			t.Errorf("the agent applied writes while only an observer ran: %s", formatCounts(d))
		}
		w.untouched("observe without election")
	})

	t.Run("repair mode with the same token names the missing permissions", func(t *testing.T) {
		c := h.startWith(startOpts{mode: compliance.ModeRepair, token: w.token, ha: true})
		eventually(t, 15*time.Second, func() error {
			if len(c.logs.lines(`"msg":"repair failed"`, `"kind":"recreate_key"`, `\"key:write\"`, w.gone.Key)) == 0 {
				return fmt.Errorf("no repair failure naming key:write on %s", w.gone.Key)
			}
			if len(c.logs.lines(`"msg":"repair failed"`, `"kind":"restore_acl_rules"`, `\"acl:write\"`, w.policy.Name)) == 0 {
				return fmt.Errorf("no repair failure naming acl:write on policy %s", w.policy.Name)
			}
			return nil
		})
		for _, k := range []compliance.Kind{compliance.KindRecreateKey, compliance.KindRestoreACLRules} {
			if n := counterValue(c.metrics.repairErrors.WithLabelValues(string(k))); n < 1 {
				t.Errorf("consullock_repair_errors_total{kind=%s} = %v", k, n)
			}
			if n := c.Metrics().RepairsTotal(k); n != 0 {
				t.Errorf("repairs{%s} = %v without the permission", k, n)
			}
		}
		for _, l := range c.logs.lines(`"msg":"repair failed"`) {
			t.Logf("%s", l)
		}
		w.untouched("repair without write permissions")
	})
}
