package provider

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// max_runtime, retry_after and retry_backoff are recorded in the lock's
// declaration (what runners read), updated in place, imported; bad values
// are plan errors naming the attribute, the value and the allowed range,
// and nothing is written.
func TestAccLock_runOnceJobControlIsRecordedAndBadInputFailsAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(runOnce string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  run_once = { period = "24h", %s }
}
`, p, runOnce)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/nightly/.lock", reg+"/locks/nightly"
	bad := func(extra string, want *regexp.Regexp) resource.TestStep {
		return resource.TestStep{Config: cfg(extra), PlanOnly: true, ExpectError: want}
	}
	day := 24 * time.Hour
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			bad(`max_runtime = "-1s"`, diagRE(`run_once.max_runtime: "-1s" is not allowed; a duration from 1s to 8784h0m0s, or unset for no deadline`)),
			bad(`max_runtime = "0s"`, diagRE(`run_once.max_runtime: "0s" is not allowed`)),
			bad(`retry_after = "-5m"`, diagRE(`run_once.retry_after: "-5m" is not allowed; a duration from 0s (retry at once) to 24h0m0s`)),
			bad(`retry_backoff = 0.5`, regexp.MustCompile(`(?s)run_once.retry_backoff.*between\s+1.000000\s+and\s+10.000000.*0.500000`)),
			{
				Config: cfg(`max_runtime = "30m", retry_after = "1m", retry_backoff = 3`),
				Check:  checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Period: day, MaxAttempts: 3, Keep: 20, MaxRuntime: 30 * time.Minute, RetryAfter: time.Minute, RetryBackoff: 3}),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_once").AtMapKey("max_runtime"), knownvalue.StringExact("30m")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_once").AtMapKey("retry_backoff"), knownvalue.Float64Exact(3)),
				},
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{ResourceName: addr, ImportState: true, ImportStateId: "nightly", ImportStateVerify: true, ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore: []string{"run_once.next_slots"}},
			{
				Config: cfg(`retry_after = "10s"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Period: day, MaxAttempts: 3, Keep: 20, RetryAfter: 10 * time.Second}),
			},
		},
	})
}
