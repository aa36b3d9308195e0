package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/jobctl"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// checkPauseRecord asserts the pause record at key: its reason and
// writer, or that it is absent (reason "").
func checkPauseRecord(t *testing.T, key, reason, by string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, key)
		switch {
		case reason == "" && pair == nil:
			return nil
		case reason == "":
			return fmt.Errorf("pause record %s exists: %s", key, pair.Value)
		case pair == nil:
			return fmt.Errorf("pause record %s does not exist", key)
		}
		p, err := record.DecodePauseRecord(pair.Value)
		if err != nil || p.Reason != reason || p.By != by {
			return fmt.Errorf("pause record %s: %+v, %v; want reason %q by %q", key, p, err, reason, by)
		}
		return nil
	}
}

// cli runs a job-control program as an operator would (the environment's
// Consul address and token).
func cli(t *testing.T, main func(context.Context, []string) int, args ...string) func() {
	return func() {
		if code := main(context.Background(), args); code != 0 {
			t.Fatalf("consullock %s exited %d", strings.Join(args, " "), code)
		}
	}
}

// paused set: Terraform owns the pause; a CLI pause with another reason
// or a CLI resume shows as drift and apply puts the pause back. Removed,
// the lock is resumed, and the CLI owns the record: a CLI pause is not
// drift. Destroy deletes the record.
func TestAccLock_pausedOwnsThePauseRecordAndShowsCLIDrift(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	config := func(paused string) string {
		attr := ""
		if paused != "" {
			attr = fmt.Sprintf("paused = %q", paused)
		}
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  %s
}
`, p, attr)
	}
	addr, pauseKey := "consullock_lock.test", reg+"/pauses/nightly"
	flags := []string{"-lock", "nightly", "-registry-prefix", reg}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(p+"/nightly/.lock", reg+"/locks/nightly", pauseKey),
		Steps: []resource.TestStep{
			{
				Config: config("INC-1: billing outage"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("pause_key"), knownvalue.StringExact(pauseKey)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: checkPauseRecord(t, pauseKey, "INC-1: billing outage", "terraform"),
			},
			{
				// consullock pause -force with another reason (without
				// -force it refuses to replace a pause): drift, put back.
				PreConfig: cli(t, jobctl.PauseMain, append(flags, "-reason", "someone else", "-force")...),
				Config:    config("INC-1: billing outage"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("paused"), knownvalue.StringExact("INC-1: billing outage")),
					},
				},
				Check: checkPauseRecord(t, pauseKey, "INC-1: billing outage", "terraform"),
			},
			{
				// consullock resume -force (without it, it refuses
				// Terraform's pause): drift, the pause is put back.
				PreConfig: cli(t, jobctl.ResumeMain, append(flags, "-force")...),
				Config:    config("INC-1: billing outage"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				Check: checkPauseRecord(t, pauseKey, "INC-1: billing outage", "terraform"),
			},
			{
				// Removing paused resumes the lock.
				Config: config(""),
				Check:  checkPauseRecord(t, pauseKey, "", ""),
			},
			{
				// Unset, the CLI owns the pause: no drift.
				PreConfig: cli(t, jobctl.PauseMain, append(flags, "-reason", "cli pause", "-by", "alice")...),
				Config:    config(""),
				PlanOnly:  true,
				Check:     checkPauseRecord(t, pauseKey, "cli pause", "alice"),
			},
		},
	})
}

func TestAccLock_pausedRefusesBadReason(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: lockTestProvider(p+"/registry") + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  paused = %q
}
`, p, strings.Repeat("x", record.MaxPauseReasonLength+1)),
			ExpectError: regexp.MustCompile(`(?s)Invalid Paused.*paused:.*at most 512 characters`),
		}},
	})
}

// The data source reports the pause of the declared lock whose key it
// reads, whoever wrote it, and null once resumed.
func TestAccLockDataSource_pausedFromThePauseRecord(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
}

data "consullock_lock" "test" {
  key = consullock_lock.test.key
}
`, p)
	flags := []string{"-lock", "nightly", "-registry-prefix", reg}
	paused := func(check knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.consullock_lock.test", tfjsonpath.New("paused"), check)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, ConfigStateChecks: []statecheck.StateCheck{paused(knownvalue.Null())}},
			{
				PreConfig:         cli(t, jobctl.PauseMain, append(flags, "-reason", "INC-7")...),
				Config:            cfg,
				ConfigStateChecks: []statecheck.StateCheck{paused(knownvalue.StringExact("INC-7"))},
			},
			{
				PreConfig:         cli(t, jobctl.ResumeMain, flags...),
				Config:            cfg,
				ConfigStateChecks: []statecheck.StateCheck{paused(knownvalue.Null())},
			},
		},
	})
}
