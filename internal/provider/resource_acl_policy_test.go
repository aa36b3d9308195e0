package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// aclTestNames returns a policy name and a KV prefix that no other test
// uses (the agent is shared).
func aclTestNames(t *testing.T) (name, prefix string) {
	prefix = testenv.UniquePrefix(t.Name())
	name = "p-" + strings.TrimPrefix(prefix, "t/")
	if len(name) > 128 {
		name = name[len(name)-128:]
	}
	return name, prefix
}

// aclPolicyConfig is a policy for a mutex under prefix/mutex and a semaphore
// under prefix/sem, with sessions on the test agent's node.
func aclPolicyConfig(name, prefix string, agentRead bool, extra string) string {
	return fmt.Sprintf(`
resource "consullock_acl_policy" "p" {
  name                  = %[1]q
  description           = "holders of %[2]s"
  lock_keys             = ["%[2]s/mutex/.lock"]
  semaphore_prefixes    = ["%[2]s/sem"]
  read_keys             = ["%[2]s/decl"]
  session_node_prefixes = [%[3]q]
  agent_read            = %[4]t
  %[5]s
}
`, name, prefix, agent.NodeName, agentRead, extra)
}

// expectedRules is the canonical text aclPolicyConfig renders, written out
// by hand so the test reads as the grant it checks.
func expectedRules(prefix string, agentRead bool) string {
	s := fmt.Sprintf(`key "%[1]s/mutex/.lock" {
  policy = "write"
}

key_prefix "%[1]s/sem/" {
  policy = "write"
}

key "%[1]s/decl" {
  policy = "read"
}

session_prefix %[2]q {
  policy = "write"
}
`, prefix, agent.NodeName)
	if agentRead {
		s += `
agent_prefix "" {
  policy = "read"
}
`
	}
	return s
}

func livePolicy(t *testing.T, name string) *api.ACLPolicy {
	t.Helper()
	p, _, err := agent.Client().ACL().PolicyReadByName(name, nil)
	if err != nil {
		t.Fatalf("reading policy %s: %v", name, err)
	}
	if p == nil {
		t.Fatalf("policy %s does not exist", name)
	}
	return p
}

// setLiveRules changes a policy's rules behind the provider's back.
func setLiveRules(t *testing.T, name, rules string) {
	t.Helper()
	p := livePolicy(t, name)
	p.Rules = rules
	if _, _, err := agent.Client().ACL().PolicyUpdate(p, nil); err != nil {
		t.Fatalf("updating policy %s out of band: %v", name, err)
	}
}

func registryRecordKey(name string) string {
	return lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindACLPolicy, name)
}

// checkPolicyLive checks the live policy and its declaration record.
func checkPolicyLive(name, rules string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		id := s.RootModule().Resources["consullock_acl_policy.p"].Primary.Attributes["id"]
		p, _, err := agent.Client().ACL().PolicyReadByName(name, nil)
		if err != nil || p == nil {
			return fmt.Errorf("policy %s: %v (found: %v)", name, err, p != nil)
		}
		if p.ID != id {
			return fmt.Errorf("live policy ID %s, state ID %s", p.ID, id)
		}
		if p.Rules != rules {
			return fmt.Errorf("live rules:\n%s\nwant:\n%s", p.Rules, rules)
		}
		pair, _, err := agent.Client().KV().Get(registryRecordKey(name), &api.QueryOptions{RequireConsistent: true})
		if err != nil || pair == nil {
			return fmt.Errorf("registry record %s: %v (found: %v)", registryRecordKey(name), err, pair != nil)
		}
		spec, err := record.DecodeACLPolicyRecord(pair.Value)
		if err != nil {
			return err
		}
		if spec.ID != id || spec.Rules != rules || spec.Name != name {
			return fmt.Errorf("registry record says %+v; want ID %s and rules\n%s", spec, id, rules)
		}
		return nil
	}
}

func checkPolicyDestroyed(names ...string) tfresource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, name := range names {
			// With the management token, 403 "ACL not found" means gone.
			p, _, err := agent.Client().ACL().PolicyReadByName(name, nil)
			if err != nil && !strings.Contains(err.Error(), "ACL not found") {
				return err
			}
			if err == nil && p != nil {
				return fmt.Errorf("policy %s still exists", name)
			}
			pair, _, err := agent.Client().KV().Get(registryRecordKey(name), nil)
			if err != nil {
				return err
			}
			if pair != nil {
				return fmt.Errorf("registry record %s still exists", pair.Key)
			}
		}
		return nil
	}
}

func TestAccACLPolicy_rulesKnownAtPlanAndRecorded(t *testing.T) {
	name, prefix := aclTestNames(t)
	renamed := name + "-renamed"
	const addr = "consullock_acl_policy.p"
	var id string
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name, renamed),
		Steps: []tfresource.TestStep{
			{
				Config: aclPolicyConfig(name, prefix, true, `datacenters = ["dc1"]`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
						// What a reviewer sees in CI: the exact grant, before apply.
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(expectedRules(prefix, true))),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(registryRecordKey(name))),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringRegexp(aclUUID)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("datacenters"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact("dc1")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("description"), knownvalue.StringExact("holders of "+prefix)),
				},
				Check: tfresource.ComposeTestCheckFunc(
					checkPolicyLive(name, expectedRules(prefix, true)),
					func(s *terraform.State) error {
						id = s.RootModule().Resources[addr].Primary.Attributes["id"]
						if dcs := livePolicy(t, name).Datacenters; len(dcs) != 1 || dcs[0] != "dc1" {
							return fmt.Errorf("live datacenters %v", dcs)
						}
						return nil
					},
				),
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return id, nil },
				ImportStateVerify: true,
			},
			{
				// A narrower grant is an in-place update of the same policy.
				Config: aclPolicyConfig(name, prefix, false, ""),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(expectedRules(prefix, false))),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("datacenters"), knownvalue.Null()),
				},
				Check: checkPolicyLive(name, expectedRules(prefix, false)),
			},
			{
				// A rename keeps the policy (tokens link it by ID) and moves
				// its declaration record.
				Config: aclPolicyConfig(renamed, prefix, false, ""),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(registryRecordKey(renamed))),
					},
				},
				Check: tfresource.ComposeTestCheckFunc(
					checkPolicyLive(renamed, expectedRules(prefix, false)),
					tfresource.TestCheckResourceAttrPtr(addr, "id", &id),
					func(*terraform.State) error {
						pair, _, err := agent.Client().KV().Get(registryRecordKey(name), nil)
						if err != nil || pair != nil {
							return fmt.Errorf("old registry record %s still there (err %v)", registryRecordKey(name), err)
						}
						return nil
					},
				),
			},
		},
	})
}

func TestAccACLPolicy_reformattedRulesAreNotDrift(t *testing.T) {
	name, prefix := aclTestNames(t)
	const addr = "consullock_acl_policy.p"
	config := aclPolicyConfig(name, prefix, true, "")
	// The same grants, reordered, re-indented and commented, as a person
	// editing the policy in the UI might leave them.
	reformatted := fmt.Sprintf(`# edited by hand
agent_prefix "" { policy = "read" }   // consul lock
session_prefix %[2]q {
	policy = "write"
}
/* the semaphore */
key_prefix "%[1]s/sem/" { policy = "write" }
key "%[1]s/decl" { policy = "read" }
key "%[1]s/mutex/.lock" { policy = "write" }
key "%[1]s/decl" { policy = "read" }
`, prefix, agent.NodeName)
	// And as JSON, the other syntax Consul accepts.
	asJSON := fmt.Sprintf(`{
  "key": {"%[1]s/mutex/.lock": {"policy": "write"}, "%[1]s/decl": {"policy": "read"}},
  "key_prefix": {"%[1]s/sem/": {"policy": "write"}},
  "session_prefix": {%[2]q: {"policy": "write"}},
  "agent_prefix": {"": {"policy": "read"}}
}`, prefix, agent.NodeName)
	unchanged := func(text string) tfresource.TestCheckFunc {
		return func(*terraform.State) error {
			if got := livePolicy(t, name).Rules; got != text {
				return fmt.Errorf("the provider rewrote equivalent rules; live now:\n%s", got)
			}
			return nil
		}
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				Check:  checkPolicyLive(name, expectedRules(prefix, true)),
			},
			{
				PreConfig: func() { setLiveRules(t, name, reformatted) },
				Config:    config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(expectedRules(prefix, true))),
				},
				Check: unchanged(reformatted),
			},
			{
				PreConfig: func() { setLiveRules(t, name, asJSON) },
				Config:    config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: unchanged(asJSON),
			},
		},
	})
}

func TestAccACLPolicy_widenedRulesAreDriftAndRestored(t *testing.T) {
	name, prefix := aclTestNames(t)
	const addr = "consullock_acl_policy.p"
	config := aclPolicyConfig(name, prefix, true, "")
	want := expectedRules(prefix, true)
	restores := func() tfresource.ConfigPlanChecks {
		return tfresource.ConfigPlanChecks{
			PreApply: []plancheck.PlanCheck{
				plancheck.ExpectNonEmptyPlan(),
				plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				plancheck.ExpectKnownValue(addr, tfjsonpath.New("rules"), knownvalue.StringExact(want)),
			},
			PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
		}
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				Check:  checkPolicyLive(name, want),
			},
			{
				// Someone grants write on the whole KV store.
				PreConfig:        func() { setLiveRules(t, name, want+"\nkey_prefix \"\" {\n  policy = \"write\"\n}\n") },
				Config:           config,
				ConfigPlanChecks: restores(),
				Check:            checkPolicyLive(name, want),
			},
			{
				// Someone turns a read into a write (same rule, wider).
				PreConfig:        func() { setLiveRules(t, name, strings.Replace(want, "policy = \"read\"", "policy = \"write\"", 1)) },
				Config:           config,
				ConfigPlanChecks: restores(),
				Check:            checkPolicyLive(name, want),
			},
			{
				// Someone removes a rule: also drift.
				PreConfig: func() {
					setLiveRules(t, name, strings.Replace(want, "agent_prefix \"\" {\n  policy = \"read\"\n}\n", "", 1))
				},
				Config:           config,
				ConfigPlanChecks: restores(),
				Check:            checkPolicyLive(name, want),
			},
			{
				// The declaration record is deleted: apply writes it again.
				PreConfig: func() {
					if _, err := agent.Client().KV().Delete(registryRecordKey(name), nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(registryRecordKey(name))),
					},
				},
				Check: checkPolicyLive(name, want),
			},
			{
				// The policy is deleted: the provider's token is valid, so
				// it is gone for certain and plan creates it again.
				PreConfig: func() {
					if _, err := agent.Client().ACL().PolicyDelete(livePolicy(t, name).ID, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
				Check: checkPolicyLive(name, want),
			},
		},
	})
}

func TestAccACLPolicy_rejectsBadInputAtPlan(t *testing.T) {
	name, prefix := aclTestNames(t)
	policy := func(attrs string) string {
		return fmt.Sprintf("resource \"consullock_acl_policy\" \"p\" {\n%s\n}\n", attrs)
	}
	nodes := fmt.Sprintf("session_node_prefixes = [%q]", agent.NodeName)
	step := func(attrs, want string) tfresource.TestStep {
		return tfresource.TestStep{
			Config:      policy(attrs),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(want),
		}
	}
	// Diagnostics may be wrapped: match words separated by any space.
	words := func(s string) string {
		return strings.Join(strings.Fields(regexp.QuoteMeta(s)), `\s+`)
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			step(`name = "my policy"`+"\n"+nodes, words("Attribute name must be 1 to 128 letters")),
			step(`name = "`+strings.Repeat("x", 129)+`"`+"\n"+nodes, words("Attribute name must be 1 to 128 letters")),
			step(fmt.Sprintf("name = %q\n%s\nlock_keys = [\"\"]", name, nodes), `(?s)Invalid Lock Key.*`+words(`lock_keys: "" is not allowed; it is empty`)),
			step(fmt.Sprintf("name = %q\n%s\nlock_keys = [\"%s/a\\nb\"]", name, nodes, prefix), `(?s)Invalid Lock Key.*lock_keys:.*`+words("it contains a line break")),
			step(fmt.Sprintf("name = %q\n%s\nlock_keys = [\"%s/a\\\"} key_prefix \\\"\\\" {\"]", name, nodes, prefix), `(?s)Invalid Lock Key.*lock_keys:.*`+words(`it contains the character '"'`)),
			step(fmt.Sprintf("name = %q\n%s\nsemaphore_prefixes = [\"%s/a b\"]", name, nodes, prefix), `(?s)Invalid Semaphore Prefix.*semaphore_prefixes:.*`+words("it contains a space")),
			step(fmt.Sprintf("name = %q\n%s\nread_keys = [\"%s/../etc\"]", name, nodes, prefix), `(?s)Invalid Read Key.*read_keys:.*`+words(`it has a ".." segment`)),
			step(fmt.Sprintf("name = %q\nsession_node_prefixes = [\"web*\"]", name), `(?s)Invalid Session Node Prefix.*session_node_prefixes:`),
			step(fmt.Sprintf("name = %q\nsession_node_prefixes = []", name), `(?s)session_node_prefixes\s+set\s+must\s+contain\s+at\s+least\s+1`),
			step(fmt.Sprintf("name = %q\n%s\ndatacenters = [\"DC 1\"]", name, nodes), words("Attribute datacenters")),
		},
	})
}

// aclProviderTokenRules can do everything the provider does for these
// resources, and nothing else.
const aclProviderTokenRules = `acl = "write"
key_prefix "" { policy = "write" }
`

// policyAndTokenWithProviderToken configures the provider with an explicit
// token and declares a policy and a token.
func policyAndTokenWithProviderToken(providerToken, name, prefix string) string {
	return fmt.Sprintf(`
provider "consullock" {
  token = %q
}

resource "consullock_acl_token" "t" {
  description = "holders of %s"
  policies    = [consullock_acl_policy.p.name]
}
`, providerToken, prefix) + aclPolicyConfig(name, prefix, true, "")
}

// stillInState checks that a refresh with a valid token finds nothing to
// do: both resources survived the failed refresh.
func stillInState(name, prefix string) tfresource.TestStep {
	return tfresource.TestStep{
		Config: policyAndTokenWithProviderToken(agent.ManagementToken, name, prefix),
		ConfigPlanChecks: tfresource.ConfigPlanChecks{
			PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
		},
		ConfigStateChecks: []statecheck.StateCheck{
			statecheck.ExpectKnownValue("consullock_acl_policy.p", tfjsonpath.New("id"), knownvalue.StringRegexp(aclUUID)),
			statecheck.ExpectKnownValue("consullock_acl_token.t", tfjsonpath.New("accessor_id"), knownvalue.StringRegexp(aclUUID)),
		},
	}
}

// invalidTokenError is how a refresh with a deleted or expired provider
// token fails: at provider configuration (token/self is checked once), or
// in Read if the token dies in between.
var invalidTokenError = regexp.MustCompile(`(?s)Invalid\s+(Or\s+Expired\s+)?Consul\s+Token.*(has\s+expired|invalid\s+or\s+expired)`)

func TestAccACLPolicy_deletedProviderTokenKeepsState(t *testing.T) {
	name, prefix := aclTestNames(t)
	tok, err := agent.MintToken(name+"-provider", aclProviderTokenRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.DeleteToken(tok.AccessorID)
		_, _ = agent.Client().ACL().PolicyDelete(tok.PolicyID, nil)
	})
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{Config: policyAndTokenWithProviderToken(tok.SecretID, name, prefix)},
			{
				PreConfig: func() {
					if err := agent.DeleteToken(tok.AccessorID); err != nil {
						t.Fatal(err)
					}
				},
				Config:      policyAndTokenWithProviderToken(tok.SecretID, name, prefix),
				ExpectError: invalidTokenError,
			},
			{
				// `tofu refresh` with the previous step's configuration.
				RefreshState: true,
				ExpectError:  invalidTokenError,
			},
			stillInState(name, prefix),
		},
	})
}

// TestAccACLPolicy_expiredProviderTokenKeepsState uses a real ExpirationTTL
// (Consul's minimum, 1m), so it waits about a minute; it runs in parallel
// with the other tests.
func TestAccACLPolicy_expiredProviderTokenKeepsState(t *testing.T) {
	// Parallel before minting: a parallel test waits for the sequential
	// ones, and the token's minute must not run out during that wait.
	t.Parallel()
	name, prefix := aclTestNames(t)
	tok, err := agent.MintToken(name+"-provider", aclProviderTokenRules, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.DeleteToken(tok.AccessorID)
		_, _ = agent.Client().ACL().PolicyDelete(tok.PolicyID, nil)
	})
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{Config: policyAndTokenWithProviderToken(tok.SecretID, name, prefix)},
			{
				PreConfig: func() {
					live, _, err := agent.Client().ACL().TokenRead(tok.AccessorID, nil)
					if err != nil || live.ExpirationTime == nil {
						t.Fatalf("reading the provider token: %v", err)
					}
					time.Sleep(time.Until(*live.ExpirationTime) + 2*time.Second)
				},
				Config:      policyAndTokenWithProviderToken(tok.SecretID, name, prefix),
				ExpectError: invalidTokenError,
			},
			stillInState(name, prefix),
		},
	})
}

// The provider checks its token once, at configuration, so a token that
// dies between that check and a Read is only seen by Read itself: these
// tests call Read directly with a client whose token Consul does not know.

func aclTestResourceState(t *testing.T, r resource.Resource, model any) tfsdk.State {
	t.Helper()
	ctx := context.Background()
	var sresp resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sresp)
	state := tfsdk.State{Schema: sresp.Schema, Raw: tftypes.NewValue(sresp.Schema.Type().TerraformType(ctx), nil)}
	if diags := state.Set(ctx, model); diags.HasError() {
		t.Fatalf("building state: %v", diags)
	}
	return state
}

func aclTestProviderData(t *testing.T, token string) *providerData {
	t.Helper()
	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return &providerData{client: client, registryPrefix: testenv.UniquePrefix(t.Name())}
}

func aclTestPolicyModel(id string) aclPolicyModel {
	return aclPolicyModel{
		ID:                  types.StringValue(id),
		Name:                types.StringValue("p-direct"),
		Description:         types.StringValue(""),
		Datacenters:         types.SetNull(types.StringType),
		LockKeys:            aclStringSet([]string{"a/.lock"}),
		SemaphorePrefixes:   types.SetNull(types.StringType),
		SessionNodePrefixes: aclStringSet([]string{"web-"}),
		ReadKeys:            types.SetNull(types.StringType),
		AgentRead:           types.BoolValue(false),
		RunLedgers:          types.SetNull(types.StringType),
		HolderServices:      types.SetNull(types.StringType),
		QueuePrefixes:       types.SetNull(types.StringType),
		Rules:               newACLRulesValue(aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{"a/.lock"}, SessionNodePrefixes: []string{"web-"}})),
		RegistryKey:         types.StringValue("consul-lock/acl-policies/p-direct"),
	}
}

func TestACLPolicyRead_invalidProviderTokenKeepsState(t *testing.T) {
	r := &aclPolicyResource{data: aclTestProviderData(t, testenv.NewUUID())}
	state := aclTestResourceState(t, r, aclTestPolicyModel(testenv.NewUUID()))
	resp := resource.ReadResponse{State: state}
	r.Read(context.Background(), resource.ReadRequest{State: state}, &resp)
	if !resp.Diagnostics.HasError() {
		t.Fatal("Read with an unknown provider token reported no error")
	}
	if resp.State.Raw.IsNull() {
		t.Fatal("Read removed the resource from state on an invalid provider token")
	}
	detail := resp.Diagnostics.Errors()[0].Detail()
	if !strings.Contains(detail, "the provider's token is invalid or expired") || !strings.Contains(detail, "Nothing was removed from state") {
		t.Errorf("error detail does not say the token is the problem:\n%s", detail)
	}
}

func TestACLPolicyRead_missingPolicyIsRemovedFromState(t *testing.T) {
	r := &aclPolicyResource{data: aclTestProviderData(t, agent.ManagementToken)}
	state := aclTestResourceState(t, r, aclTestPolicyModel(testenv.NewUUID()))
	resp := resource.ReadResponse{State: state}
	r.Read(context.Background(), resource.ReadRequest{State: state}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("Read: %v", resp.Diagnostics)
	}
	if !resp.State.Raw.IsNull() {
		t.Fatal("Read kept a policy Consul does not have, with a valid provider token")
	}
}

func TestACLPolicyModifyPlan_warnsAboutRiskyInputs(t *testing.T) {
	ctx := context.Background()
	data := aclTestProviderData(t, agent.ManagementToken)
	prefix := testenv.UniquePrefix(t.Name())
	record, err := record.EncodeLockRecord(lockmodel.Lock{Name: "nightly-report", Prefix: prefix + "/nightly"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(data.client).Registry(data.registryPrefix).Put(ctx, lockmodel.KindLock, "nightly-report", record, 0); err != nil {
		t.Fatal(err)
	}
	r := &aclPolicyResource{data: data}
	model := aclTestPolicyModel("")
	model.ID = types.StringUnknown()
	model.Rules = newACLRulesUnknown()
	model.RegistryKey = types.StringUnknown()
	model.LockKeys = aclStringSet([]string{prefix + "/nightly/.lock", prefix + "/typo/.lock"})
	model.SessionNodePrefixes = aclStringSet([]string{"", "nightly-report"})
	planState := aclTestResourceState(t, r, model)
	plan := tfsdk.Plan(planState)
	resp := resource.ModifyPlanResponse{Plan: plan}
	r.ModifyPlan(ctx, resource.ModifyPlanRequest{
		Plan:  plan,
		State: tfsdk.State{Schema: planState.Schema, Raw: tftypes.NewValue(planState.Schema.Type().TerraformType(ctx), nil)},
	}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("ModifyPlan: %v", resp.Diagnostics)
	}
	var summaries []string
	for _, w := range resp.Diagnostics.Warnings() {
		summaries = append(summaries, w.Summary()+": "+w.Detail())
	}
	all := strings.Join(summaries, "\n")
	for _, want := range []string{
		"Sessions on any node",
		"Lock key outside the declared locks: lock_keys \"" + prefix + "/typo/.lock\"",
		"Session node prefix looks like a lock name",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, prefix+"/nightly/.lock\" is not under") {
		t.Errorf("the declared lock's own key was flagged:\n%s", all)
	}
	var planned aclPolicyModel
	if diags := resp.Plan.Get(ctx, &planned); diags.HasError() {
		t.Fatal(diags)
	}
	if planned.Rules.IsUnknown() || !strings.Contains(planned.Rules.ValueString(), `session_prefix "" {`) {
		t.Errorf("rules not rendered at plan: %v", planned.Rules)
	}
	if want := lockmodel.RegistryKey(data.registryPrefix, lockmodel.KindACLPolicy, "p-direct"); planned.RegistryKey.ValueString() != want {
		t.Errorf("registry_key planned %v, want %s", planned.RegistryKey, want)
	}
}
