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

// Every resource has an identity (by name; a token by accessor ID), and
// `import { to = ..., identity = { ... } }` imports it with no change.
func TestAccIdentity_importByIdentityBlock(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureIdentityImport)
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	name := "id-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(p, "-")
	cfg := ephemeralProviderBlock + lockTestProvider(reg) + aclPolicyConfig(name, p, false, "") + fmt.Sprintf(`
resource "consullock_session_defaults" "fast" {
  name = "fast"
  ttl  = "20s"
}

resource "consullock_lock" "test" {
  name             = "identified"
  prefix           = "%s/identified"
  session_defaults = consullock_session_defaults.fast.name
}

resource "consullock_acl_token" "t" {
  policies = [consullock_acl_policy.p.name]
}
`, p)
	importStep := func(addr string) tfresource.TestStep {
		return tfresource.TestStep{
			Config:          cfg,
			ResourceName:    addr,
			ImportState:     true,
			ImportStateKind: tfresource.ImportBlockWithResourceIdentity,
		}
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("consullock_lock.test", map[string]knownvalue.Check{"name": knownvalue.StringExact("identified")}),
					statecheck.ExpectIdentity("consullock_session_defaults.fast", map[string]knownvalue.Check{"name": knownvalue.StringExact("fast")}),
					statecheck.ExpectIdentity("consullock_acl_policy.p", map[string]knownvalue.Check{"name": knownvalue.StringExact(name)}),
					statecheck.ExpectIdentityValueMatchesState("consullock_acl_token.t", tfjsonpath.New("accessor_id")),
				},
			},
			importStep("consullock_lock.test"),
			importStep("consullock_session_defaults.fast"),
			importStep("consullock_acl_policy.p"),
			importStep("consullock_acl_token.t"),
		},
	})
}
