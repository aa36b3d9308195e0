package provider

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// checkHolderServiceRecord asserts the holder_service the lock's record
// declares (nil: none, and the record does not mention it).
func checkHolderServiceRecord(t *testing.T, recordKey string, want *holdersvc.Service) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, recordKey)
		if pair == nil {
			return fmt.Errorf("registry record %s does not exist", recordKey)
		}
		got, err := record.DecodeLockRecord(pair.Value)
		if err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		if want == nil {
			if got.HolderService != nil || strings.Contains(string(pair.Value), "holder_service") {
				return fmt.Errorf("registry record %s declares a holder_service: %s", recordKey, pair.Value)
			}
			return nil
		}
		if got.HolderService == nil || !reflect.DeepEqual(*got.HolderService, *want) {
			return fmt.Errorf("registry record %s declares holder_service %+v, want %+v", recordKey, got.HolderService, want)
		}
		return nil
	}
}

func TestAccLock_holderServiceIsRecordedUpdatedInPlaceAndImported(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(holder string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "web"
  prefix = "%s/web"
  limit  = 2
  %s
}
`, p, holder)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/web/.lock", reg+"/locks/web"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				Config: cfg(`holder_service = { name = "web-leader", tags = ["primary", "v2"], port = 8080, meta = { team = "web" } }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("holder_service"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"name": knownvalue.StringExact("web-leader"),
						"tags": knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("primary"), knownvalue.StringExact("v2")}),
						"port": knownvalue.Int64Exact(8080),
						"meta": knownvalue.MapExact(map[string]knownvalue.Check{"team": knownvalue.StringExact("web")}),
					})),
				},
				Check: checkHolderServiceRecord(t, recordKey, &holdersvc.Service{Name: "web-leader", Tags: []string{"primary", "v2"}, Port: 8080, Meta: map[string]string{"team": "web"}}),
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "web",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				Config: cfg(`holder_service = { name = "web" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("holder_service").AtMapKey("port"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("holder_service").AtMapKey("tags"), knownvalue.Null()),
				},
				Check: checkHolderServiceRecord(t, recordKey, &holdersvc.Service{Name: "web", Tags: []string{}, Meta: map[string]string{}}),
			},
			{
				Config: cfg(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("holder_service"), knownvalue.Null()),
				},
				Check: checkHolderServiceRecord(t, recordKey, nil),
			},
		},
	})
}

// Bad holder_service input is a plan-time error naming the attribute, the
// value and what is allowed.
func TestAccLock_holderServiceRejectsBadInputAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(holder string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "web"
  prefix = "%s/web"
  holder_service = %s
}
`, p, holder)
	}
	step := func(holder string, want *regexp.Regexp) resource.TestStep {
		return resource.TestStep{Config: cfg(holder), PlanOnly: true, ExpectError: want}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			step(`{ name = "Web_Leader" }`, diagRE(`holder_service.name: "Web_Leader" is not allowed; 1 to 63 lower-case letters, digits or '-'`)),
			step(`{ name = "web", tags = ["v1.2"] }`, diagRE(`"v1.2" is not allowed; 1 to 63 lower-case letters, digits or '-'`, `<tag>.<name>.service.consul`)),
			step(`{ name = "web", port = 0 }`, regexp.MustCompile(`(?s)holder_service.port.*between 1 and 65535, got: 0`)),
			step(`{ name = "web", port = 65536 }`, regexp.MustCompile(`(?s)holder_service.port.*between 1 and 65535, got: 65536`)),
			step(`{ name = "web", meta = { fencing_token = "1" } }`, diagRE(`"fencing_token" is not allowed; a key other than`, `the runner writes them`)),
			step(`{ name = "web", meta = { "consul-x" = "1" } }`, diagRE(`"consul-x" is not allowed; a key not starting with "consul-"`)),
			step(`{ name = "web", meta = { "a.b" = "1" } }`, diagRE(`"a.b" is not allowed; a key of 1 to 128 letters, digits, '-' or '_'`)),
		},
	})
}

// A session profile whose lock_delay leaves the holder check less than a
// renewal interval (a destroyed session frees the key lock_delay after the
// destroy) is a plan warning naming the numbers and the renew_every or
// lock_delay that would do: the quickstart's ttl 10s, lock_delay 5s.
func TestAccLock_holderServiceWithAFlappingProfileWarnsAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	profile := lockTestProvider(reg) + `
resource "consullock_session_defaults" "tight" {
  name        = "tight"
  ttl         = "10s"
  lock_delay  = "5s"
}
`
	w := newTofuWorkdir(t, reattachTerraformBlock+profile)
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	t.Cleanup(func() { _, _ = w.run(t, "destroy", "-input=false", "-no-color", "-auto-approve") })
	w.setConfig(t, reattachTerraformBlock+profile+fmt.Sprintf(`
resource "consullock_lock" "web" {
  name             = "web"
  prefix           = "%s/web"
  session_defaults = consullock_session_defaults.tight.name
  holder_service   = { name = "web" }
}
`, p))
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out, "Warning: Holder Check May Flap", "with consullock_lock.web",
		"frees the lock lock_delay 5s after the destroy", "the check TTL is 1s", "Lower renew_every below 800ms",
		"raise lock_delay above 12.333333333s")
}
