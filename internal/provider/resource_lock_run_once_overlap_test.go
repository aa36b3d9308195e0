package provider

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// run_once.overlap: the plan shows it ("wait" when unset), it is recorded
// for the runners (absent for wait), changed in place; a value outside
// wait, skip, replace is a plan error naming the attribute, the value and
// the allowed values, and nothing is written.
func TestAccLock_runOnceOverlapIsPlannedRecordedAndValidated(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(extra string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  run_once = { schedule = "0 2 * * *", starting_deadline = "10m" %s }
}
`, p, extra)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/nightly/.lock", reg+"/locks/nightly"
	overlap := tfjsonpath.New("run_once").AtMapKey("overlap")
	ro := func(o ledger.Overlap) *ledger.RunOnce {
		return &ledger.RunOnce{Schedule: "0 2 * * *", TimeZone: "UTC", StartingDeadline: 10 * time.Minute, MaxAttempts: 3, Keep: 20, Overlap: o}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{Config: cfg(`, overlap = "forbid"`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)run_once.overlap.*value must be one of:.*"wait".*"skip".*"replace".*"forbid"`)},
			{
				Config: cfg(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, overlap, knownvalue.StringExact("wait"))},
				},
				Check: checkRunOnceRecord(t, recordKey, ro("")),
			},
			{
				Config: cfg(`, overlap = "replace"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, overlap, knownvalue.StringExact("replace")),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: checkRunOnceRecord(t, recordKey, ro(ledger.OverlapReplace)),
			},
			{ResourceName: addr, ImportState: true, ImportStateId: "nightly", ImportStateVerify: true, ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore: []string{"run_once.next_slots"}},
			{
				Config: cfg(`, overlap = "skip"`),
				Check:  checkRunOnceRecord(t, recordKey, ro(ledger.OverlapSkip)),
			},
		},
	})
}
