package provider

import (
	"fmt"
	"regexp"
	"testing"

	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// lock_rules returns exactly what consullock_acl_policy renders for the
// same inputs, and the hand-written canonical text.
func TestAccFunctionLockRules_sameTextAsPolicyResource(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	prefix := testenv.UniquePrefix(t.Name())
	name := "fn-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	config := aclPolicyConfig(name, prefix, true, "") + fmt.Sprintf(`
locals {
  rules = provider::consullock::lock_rules({
    lock_keys             = ["%[1]s/mutex/.lock"]
    semaphore_prefixes    = ["%[1]s/sem"]
    read_keys             = ["%[1]s/decl"]
    session_node_prefixes = [%[2]q]
    agent_read            = true
  })
}
output "rules" {
  value = local.rules
}
output "same_as_policy" {
  value = local.rules == consullock_acl_policy.p.rules
}
`, prefix, agent.NodeName)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: config,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("rules", knownvalue.StringExact(expectedRules(prefix, true))),
				statecheck.ExpectKnownOutputValue("same_as_policy", knownvalue.Bool(true)),
			},
		}},
	})
}

func TestAccFunctions_worstCaseGapAndLockKey(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: `
output "gap" {
  value = provider::consullock::worst_case_gap("15s", "15s")
}
output "gap_no_delay" {
  value = provider::consullock::worst_case_gap("1m", "0s")
}
output "key" {
  value = provider::consullock::lock_key("service/billing/leader/")
}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("gap", knownvalue.StringExact("45s")),
				statecheck.ExpectKnownOutputValue("gap_no_delay", knownvalue.StringExact("2m0s")),
				statecheck.ExpectKnownOutputValue("key", knownvalue.StringExact("service/billing/leader/.lock")),
			},
		}},
	})
}

// Bad arguments are function errors that name the argument.
func TestAccFunctions_badArgumentsNameTheArgument(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	step := func(expr, want string) tfresource.TestStep {
		return tfresource.TestStep{
			Config:      fmt.Sprintf("output \"x\" {\n  value = %s\n}\n", expr),
			ExpectError: diagRE(want),
		}
	}
	for _, tc := range []struct{ name, expr, want string }{
		{"ttl too short", `provider::consullock::worst_case_gap("5s", "15s")`, `ttl: "5s" is not allowed`},
		{"ttl not a duration", `provider::consullock::worst_case_gap("soon", "15s")`, `ttl: "soon" is not a duration`},
		{"lock_delay too long", `provider::consullock::worst_case_gap("15s", "2m")`, `lock_delay: "2m0s" is not allowed`},
		{"prefix", `provider::consullock::lock_key("/a//b")`, `prefix: "/a//b" is not allowed`},
		{"no node prefixes", `provider::consullock::lock_rules({ lock_keys = ["a/.lock"] })`, `session_node_prefixes`},
		{"unknown attribute", `provider::consullock::lock_rules({ lock_key = ["a"], session_node_prefixes = [""] })`, `unknown attribute "lock_key"`},
		{"bad key", `provider::consullock::lock_rules({ lock_keys = ["a//b"], session_node_prefixes = [""] })`, `lock_keys: "a//b" is not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tfresource.Test(t, tfresource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps:                    []tfresource.TestStep{step(tc.expr, tc.want)},
			})
		})
	}
}
