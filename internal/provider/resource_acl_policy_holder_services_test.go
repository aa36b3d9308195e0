package provider

import (
	"fmt"
	"regexp"
	"testing"

	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// holder_services renders service "<name>" write on each name and
// node_prefix read on each session node prefix, in the policy and in
// lock_rules alike (one implementation), is read back on import, and
// refuses a name that is not a DNS label at plan. That these rules are
// exactly what a holder needs is proven against the agent by
// consul.TestHolderService_workerRulesAllowExactlyTheirService and
// TestHolderServiceCatalog_needsServiceWriteOnly.
func TestAccACLPolicy_holderServicesGrantServiceWriteOnEachName(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	prefix := testenv.UniquePrefix(t.Name())
	reg := prefix + "/registry"
	name := "hs-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	config := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_acl_policy" "p" {
  name                  = %[1]q
  semaphore_prefixes    = ["%[2]s/web"]
  session_node_prefixes = ["worker-"]
  holder_services       = ["web-leader"]
}

output "same_as_policy" {
  value = provider::consullock::lock_rules({
    semaphore_prefixes    = ["%[2]s/web"]
    session_node_prefixes = ["worker-"]
    holder_services       = ["web-leader"]
  }) == consullock_acl_policy.p.rules
}
`, name, prefix)
	want := fmt.Sprintf("key_prefix \"%s/web/\" {\n  policy = \"write\"\n}\n\nsession_prefix \"worker-\" {\n  policy = \"write\"\n}\n\n"+
		"node_prefix \"worker-\" {\n  policy = \"read\"\n}\n\n"+
		"service \"web-leader\" {\n  policy = \"write\"\n}\n", prefix)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("same_as_policy", knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("consullock_acl_policy.p", tfjsonpath.New("rules"), knownvalue.StringExact(want)),
				},
			},
			{
				ResourceName:      "consullock_acl_policy.p",
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
  holder_services       = ["Web_Leader"]
}
`,
			PlanOnly:    true,
			ExpectError: diagRE(`holder_services`, `"Web_Leader" is not allowed; 1 to 63 lower-case letters, digits or '-'`),
		}},
	})
}
