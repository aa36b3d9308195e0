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

// lock_rules renders run_ledgers as consullock_acl_policy does under the
// same registry prefix, defaults that prefix to consul-lock, and names a
// bad lock name.
func TestAccFunctionLockRules_runLedgersAsThePolicyRendersThem(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	prefix := testenv.UniquePrefix(t.Name())
	reg := prefix + "/registry"
	name := "fn-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	config := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_acl_policy" "p" {
  name                  = %[1]q
  lock_keys             = ["%[2]s/a/.lock"]
  run_ledgers           = ["a"]
  session_node_prefixes = ["worker-"]
}

output "same_as_policy" {
  value = provider::consullock::lock_rules({
    lock_keys             = ["%[2]s/a/.lock"]
    run_ledgers           = ["a"]
    session_node_prefixes = ["worker-"]
    registry_prefix       = %[3]q
  }) == consullock_acl_policy.p.rules
}

output "default_prefix" {
  value = provider::consullock::lock_rules({ run_ledgers = ["nightly"], session_node_prefixes = ["worker-"] })
}
`, name, prefix, reg)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("same_as_policy", knownvalue.Bool(true)),
					statecheck.ExpectKnownOutputValue("default_prefix", knownvalue.StringExact(
						"key \"consul-lock/runs/nightly\" {\n  policy = \"write\"\n}\n\nsession_prefix \"worker-\" {\n  policy = \"write\"\n}\n")),
				},
			},
		},
	})
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config:      `output "x" { value = provider::consullock::lock_rules({ run_ledgers = ["a/b"], session_node_prefixes = [""] }) }`,
			ExpectError: diagRE(`run_ledgers: "a/b" is not allowed`),
		}},
	})
}
