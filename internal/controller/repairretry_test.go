package controller

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// controllerACL are rules for a repair-mode controller of ACL policies
// with acl (read: its repair of a widened policy fails; write).
func controllerACL(acl string) string {
	return `key_prefix "" { policy = "read" }
session_prefix "" { policy = "read" }
acl = "` + acl + `"
`
}

// repairFailure is one "repair failed" log line.
type repairFailure struct {
	Time     time.Time `json:"time"`
	Failures int       `json:"failures"`
	RetryIn  string    `json:"retry_in"`
}

// A repair that Consul refuses (the controller's token lacks acl:write on
// a widened policy) is counted at once from 0, and tried again with the
// one back-off (consul.Backoff from repairMinBackoff, jittered) although
// nothing else changes in Consul; once the token is granted acl:write, the
// next retry puts the policy back.
func TestRepair_retriesAFailedRepairWithBackoff(t *testing.T) {
	h := newHarness(t, agent)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{h.prefix + "/a/.lock"}, SessionNodePrefixes: []string{"worker-"}})
	p := h.createPolicy(h.name("holder"), rules)
	tok, err := agent.MintToken(h.name("controller"), controllerACL("read"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.DeleteToken(tok.AccessorID)
		_, _ = h.api.ACL().PolicyDelete(tok.PolicyID, nil)
	})
	c := h.start(compliance.ModeRepair, tok.SecretID)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	s := &metricsScript{t: t, base: srv.URL}
	failed := `consullock_repair_errors_total{kind="restore_acl_rules"}`
	s.scrape()
	s.want("before the drift", failed, 0)

	p.Rules = widened
	if _, _, err := h.api.ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatal(err)
	}
	var fs []repairFailure
	eventually(t, 30*time.Second, func() error {
		fs = nil
		for _, l := range c.logs.lines(`"msg":"repair failed"`, `"kind":"restore_acl_rules"`, `\"acl:write\"`, p.Name) {
			var f repairFailure
			if err := json.Unmarshal([]byte(l), &f); err != nil {
				return err
			}
			fs = append(fs, f)
		}
		if len(fs) < 3 {
			return fmt.Errorf("%d failed attempts logged, want 3", len(fs))
		}
		return nil
	})
	for i, f := range fs {
		pause, err := time.ParseDuration(f.RetryIn)
		if err != nil {
			t.Fatalf("failure %d: retry_in %q: %v", i+1, f.RetryIn, err)
		}
		full := consul.Backoff(repairMinBackoff, repairMaxBackoff, i+1)
		if f.Failures != i+1 || pause < full/2 || pause > full {
			t.Errorf("failure %d: failures=%d retry_in=%s, want failures=%d and retry_in in [%s, %s]", i+1, f.Failures, pause, i+1, full/2, full)
		}
		if i > 0 && f.Time.Sub(fs[i-1].Time) < mustDuration(t, fs[i-1].RetryIn) {
			t.Errorf("failure %d came %s after the one before, which said retry_in=%s", i+1, f.Time.Sub(fs[i-1].Time), fs[i-1].RetryIn)
		}
	}
	s.scrape()
	if got := s.m[failed]; got < float64(len(fs)) {
		t.Errorf("%s = %v after %d failed attempts", failed, got, len(fs))
	}
	t.Logf("failed attempts: %+v", fs)

	// Granted: the next retry repairs, with no other change to wake it.
	grant := &api.ACLPolicy{ID: tok.PolicyID, Name: h.name("controller"), Rules: controllerACL("write")}
	if _, _, err := h.api.ACL().PolicyUpdate(grant, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if same, _ := aclrules.RulesEquivalent(rules, h.livePolicy(p.ID).Rules); !same {
			return fmt.Errorf("the policy is still widened")
		}
		if got := c.Metrics().RepairsTotal(compliance.KindRestoreACLRules); got != 1 {
			return fmt.Errorf("repairs{restore_acl_rules} = %v, want 1", got)
		}
		return nil
	})
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
