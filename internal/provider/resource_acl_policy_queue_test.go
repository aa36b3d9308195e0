package provider

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestAccACLPolicy_queuePrefixesGrantOnlyTheQueueFolder: queue_prefixes =
// ["<p>/job"] renders key_prefix "<p>/job/.queue/" write, known at plan, the
// same in lock_rules, and read back on import; a real token of the policy
// writes a queue entry (a plain PUT, and an acquire with its session as a
// queued waiter does) and gets HTTP 403 on <p>/job/other and on
// <p>/job/.queued, which share the prefix but not the folder.
func TestAccACLPolicy_queuePrefixesGrantOnlyTheQueueFolder(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	name, prefix := aclTestNames(t)
	reg := prefix + "/registry"
	lockPrefix := prefix + "/job"
	const addr = "consullock_acl_policy.p"
	config := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_acl_policy" "p" {
  name                  = %[1]q
  lock_keys             = ["%[2]s/.lock"]
  queue_prefixes        = ["%[2]s"]
  session_node_prefixes = [%[3]q]
}

output "same_as_policy" {
  value = provider::consullock::lock_rules({
    lock_keys             = ["%[2]s/.lock"]
    queue_prefixes        = ["/%[2]s/"]
    session_node_prefixes = [%[3]q]
  }) == consullock_acl_policy.p.rules
}
`, name, lockPrefix, agent.NodeName)
	rules := fmt.Sprintf(`key "%[1]s/.lock" {
  policy = "write"
}

key_prefix "%[1]s/.queue/" {
  policy = "write"
}

session_prefix %[2]q {
  policy = "write"
}
`, lockPrefix, agent.NodeName)

	worker := func(*terraform.State) error {
		tok, _, err := agent.Client().ACL().TokenCreate(&api.ACLToken{
			Description: "queued waiter", Policies: []*api.ACLTokenPolicyLink{{Name: name}},
		}, nil)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _, _ = agent.Client().ACL().TokenDelete(tok.AccessorID, nil) })
		t.Cleanup(func() { _, _ = agent.Client().KV().DeleteTree(lockPrefix+"/", nil) })
		w := agent.ClientWithToken(tok.SecretID)
		if _, err := w.KV().Put(&api.KVPair{Key: lockPrefix + "/.queue/x"}, nil); err != nil {
			return fmt.Errorf("worker PUT %s/.queue/x: %v; want HTTP 200", lockPrefix, err)
		}
		session, _, err := w.Session().Create(&api.SessionEntry{Name: "waiter", Node: agent.NodeName, LockDelay: time.Millisecond}, nil)
		if err != nil {
			return fmt.Errorf("worker session: %w", err)
		}
		t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(session, nil) })
		entry := lockPrefix + "/.queue/" + session
		if ok, _, err := w.KV().Acquire(&api.KVPair{Key: entry, Session: session}, nil); err != nil || !ok {
			return fmt.Errorf("worker acquiring its queue entry %s: %v %v", entry, ok, err)
		}
		for _, k := range []string{lockPrefix + "/other", lockPrefix + "/.queued"} {
			_, err := w.KV().Put(&api.KVPair{Key: k, Value: []byte("x")}, nil)
			var se api.StatusError
			if !errors.As(err, &se) || se.Code != http.StatusForbidden {
				return fmt.Errorf("worker PUT %s: %v; want HTTP 403", k, err)
			}
			if pair, _, _ := agent.Client().KV().Get(k, nil); pair != nil {
				return fmt.Errorf("%s was written: %s", k, pair.Value)
			}
		}
		return nil
	}

	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(rules))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("same_as_policy", knownvalue.Bool(true)),
				},
				Check: tfresource.ComposeTestCheckFunc(func(*terraform.State) error {
					if live := livePolicy(t, name).Rules; live != rules {
						return fmt.Errorf("live rules:\n%s\nwant\n%s", live, rules)
					}
					return nil
				}, worker),
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
		},
	})
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: lockTestProvider(reg) + `
resource "consullock_acl_policy" "bad" {
  name                  = "bad"
  session_node_prefixes = ["w"]
  queue_prefixes        = ["jobs//a"]
}
`,
			PlanOnly:    true,
			ExpectError: diagRE("Invalid Queue Prefix", `queue_prefixes: "jobs//a" is not allowed; it has an empty segment ('//')`),
		}},
	})
}
