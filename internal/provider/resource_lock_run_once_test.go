package provider

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// checkRunOnceRecord asserts the run_once the lock's record declares (nil:
// none).
func checkRunOnceRecord(t *testing.T, recordKey string, want *ledger.RunOnce) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, recordKey)
		if pair == nil {
			return fmt.Errorf("registry record %s does not exist", recordKey)
		}
		got, err := record.DecodeLockRecord(pair.Value)
		if err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		if got.RunOnce != nil {
			// When the slots were declared: checked by the schedule test.
			if got.RunOnce.Since.IsZero() {
				return fmt.Errorf("registry record %s declares run_once without since: %s", recordKey, pair.Value)
			}
			got.RunOnce.Since = time.Time{}
		}
		if !reflect.DeepEqual(got.RunOnce, want) {
			return fmt.Errorf("registry record %s declares run_once %+v, want %+v", recordKey, got.RunOnce, want)
		}
		if want == nil && strings.Contains(string(pair.Value), "run_once") {
			return fmt.Errorf("registry record %s mentions run_once: %s", recordKey, pair.Value)
		}
		return nil
	}
}

func TestAccLock_runOnceIsRecordedUpdatedInPlaceAndImported(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(runOnce string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  %s
}
`, p, runOnce)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/nightly/.lock", reg+"/locks/nightly"
	h := time.Hour
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				// Written as a user writes them; the import below reads the
				// same strings back (lockmodel.ShortDuration).
				Config: cfg(`run_once = { period = "24h", offset = "2h" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_once"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"period": knownvalue.StringExact("24h"), "offset": knownvalue.StringExact("2h"),
						"max_attempts": knownvalue.Int64Exact(3), "keep": knownvalue.Int64Exact(20),
						"max_runtime": knownvalue.Null(), "retry_after": knownvalue.Null(), "retry_backoff": knownvalue.Float64Exact(2), "overlap": knownvalue.StringExact("wait"),
						"schedule": knownvalue.Null(), "time_zone": knownvalue.Null(), "starting_deadline": knownvalue.Null(),
						"next_slots": knownvalue.ListExact([]knownvalue.Check{
							knownvalue.StringRegexp(dailyAt("02:00:00Z")), knownvalue.StringRegexp(dailyAt("02:00:00Z")), knownvalue.StringRegexp(dailyAt("02:00:00Z")),
						}),
					})),
				},
				Check: checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Period: 24 * h, Offset: 2 * h, MaxAttempts: 3, Keep: 20}),
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "nightly",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
				// Computed from the clock at import: a slot may pass.
				ImportStateVerifyIgnore: []string{"run_once.next_slots"},
			},
			{
				Config: cfg(`run_once = { period = "1h", max_attempts = 5, keep = 50 }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_once").AtMapKey("offset"), knownvalue.Null()),
				},
				Check: checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Period: h, MaxAttempts: 5, Keep: 50}),
			},
			{
				Config: cfg(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run_once"), knownvalue.Null()),
				},
				Check: checkRunOnceRecord(t, recordKey, nil),
			},
		},
	})
}

// dailyAt matches a run ID at the given time of day ("02:30:00+02:00").
func dailyAt(clock string) *regexp.Regexp {
	return regexp.MustCompile(`^\d{4}-\d\d-\d\dT` + regexp.QuoteMeta(clock) + `$`)
}

func TestAccLock_runOnceScheduleIsRecordedShownAtPlanAndImported(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(runOnce string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  %s
}
`, p, runOnce)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/nightly/.lock", reg+"/locks/nightly"
	runOnce := tfjsonpath.New("run_once")
	var since time.Time
	sinceIs := func(same bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			got, err := record.DecodeLockRecord(kvPair(t, recordKey).Value)
			if err != nil {
				return err
			}
			if same && !got.RunOnce.Since.Equal(since) {
				return fmt.Errorf("run_once.since moved from %s to %s though the slots did not change", since, got.RunOnce.Since)
			}
			if !same && got.RunOnce.Since.Before(since) {
				return fmt.Errorf("run_once.since went back from %s to %s", since, got.RunOnce.Since)
			}
			since = got.RunOnce.Since
			return nil
		}
	}
	berlin := knownvalue.StringRegexp(regexp.MustCompile(`^\d{4}-\d\d-\d\dT02:30:00\+0[12]:00$`))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				Config: cfg(`run_once = { schedule = "30 2 * * *", time_zone = "Europe/Berlin", starting_deadline = "10m" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					// The next slots are known at plan, in the zone's offset.
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectKnownValue(addr, runOnce.AtMapKey("next_slots"), knownvalue.ListExact([]knownvalue.Check{berlin, berlin, berlin})),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, runOnce, knownvalue.ObjectExact(map[string]knownvalue.Check{
						"schedule": knownvalue.StringExact("30 2 * * *"), "time_zone": knownvalue.StringExact("Europe/Berlin"),
						"max_runtime": knownvalue.Null(), "retry_after": knownvalue.Null(), "retry_backoff": knownvalue.Float64Exact(2), "overlap": knownvalue.StringExact("wait"),
						"starting_deadline": knownvalue.StringExact("10m"), "period": knownvalue.Null(), "offset": knownvalue.Null(),
						"max_attempts": knownvalue.Int64Exact(3), "keep": knownvalue.Int64Exact(20),
						"next_slots": knownvalue.ListExact([]knownvalue.Check{berlin, berlin, berlin}),
					})),
				},
				Check: resource.ComposeTestCheckFunc(checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin",
					StartingDeadline: 10 * time.Minute, MaxAttempts: 3, Keep: 20}), sinceIs(false)),
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "nightly",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore:              []string{"run_once.next_slots"},
			},
			{
				// The same slots: the record keeps when they were declared.
				Config: cfg(`run_once = { schedule = "30 2 * * *", time_zone = "Europe/Berlin", keep = 30 }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: resource.ComposeTestCheckFunc(checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin",
					MaxAttempts: 3, Keep: 30}), sinceIs(true)),
			},
			{
				// time_zone defaults to UTC; the slots follow.
				Config: cfg(`run_once = { schedule = "30 2 * * *" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, runOnce.AtMapKey("time_zone"), knownvalue.StringExact("UTC")),
						plancheck.ExpectKnownValue(addr, runOnce.AtMapKey("next_slots").AtSliceIndex(0), knownvalue.StringRegexp(dailyAt("02:30:00Z"))),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: resource.ComposeTestCheckFunc(checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "UTC", MaxAttempts: 3, Keep: 20}), sinceIs(false)),
			},
			{
				Config: cfg(`run_once = { period = "24h" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, runOnce.AtMapKey("time_zone"), knownvalue.Null())},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: checkRunOnceRecord(t, recordKey, &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 3, Keep: 20}),
			},
		},
	})
}

func TestAccLock_runOnceRejectsBadInputAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(extra string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "nightly"
  prefix = "%s/nightly"
  %s
}
`, p, extra)
	}
	step := func(extra string, want *regexp.Regexp) resource.TestStep {
		return resource.TestStep{Config: cfg(extra), PlanOnly: true, ExpectError: want}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			step(`run_once = { period = "30s" }`, diagRE(`run_once.period: "30s" is not allowed; a duration from 1m0s to 8784h0m0s`)),
			step(`run_once = { period = "1h", offset = "1h" }`, diagRE(`run_once.offset: "1h" is not allowed; a duration from 0s to less than the period (1h0m0s)`)),
			step(`run_once = { period = "1h", max_attempts = 0 }`, regexp.MustCompile(`(?s)run_once.max_attempts.*between 1 and 100`)),
			step(`run_once = { period = "1h", keep = 1001 }`, regexp.MustCompile(`(?s)run_once.keep.*between 1 and 1000`)),
			step(`run_once = { schedule = "0 2 * *" }`, diagRE(`run_once.schedule: "0 2 * *" is not allowed; 4 fields, not 5; want a 5-field cron expression`)),
			step(`run_once = { schedule = "0 2 30 2 *" }`, diagRE(`run_once.schedule: "0 2 30 2 *" is not allowed; no date matches`)),
			step(`run_once = { schedule = "0 2 * * *", time_zone = "Europe/Berlim" }`, diagRE(`run_once.time_zone: "Europe/Berlim" is not allowed; not a known time zone; want an IANA time zone name`)),
			step(`run_once = { schedule = "@daily", period = "24h" }`, diagRE("Conflicting Run Once Slots", `run_once.schedule ("@daily") and run_once.period ("24h") both name the runs' slots`)),
			step(`run_once = { max_attempts = 2 }`, diagRE("Missing Run Once Slots", "run_once needs run_once.period")),
			step(`run_once = { period = "1h", time_zone = "Europe/Berlin" }`, diagRE("Time Zone Without Schedule", `run_once.time_zone ("Europe/Berlin") applies to run_once.schedule only`)),
			step(`run_once = { schedule = "@daily", starting_deadline = "0s" }`, diagRE(`run_once.starting_deadline: "0s" is not allowed; a duration from 1s to 8784h0m0s, or unset for no deadline`)),
			step("limit = 3\n  run_once = { period = \"1h\" }", diagRE("Run Once On A Semaphore", `run_once: "run_once with limit 3" is not allowed; run_once only on a mutex (limit 1)`)),
		},
	})
}

// A period shorter than the session profile's worst_case_gap is a plan
// warning naming both: a crashed run may not be taken over within it.
func TestAccLock_runOncePeriodShorterThanTheWorstCaseGapWarnsAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	profile := lockTestProvider(reg) + `
resource "consullock_session_defaults" "slow" {
  name       = "slow"
  ttl        = "1h"
  lock_delay = "1m"
}
`
	w := newTofuWorkdir(t, reattachTerraformBlock+profile)
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	t.Cleanup(func() { _, _ = w.run(t, "destroy", "-input=false", "-no-color", "-auto-approve") })
	w.setConfig(t, reattachTerraformBlock+profile+fmt.Sprintf(`
resource "consullock_lock" "short" {
  name             = "short"
  prefix           = "%s/short"
  session_defaults = consullock_session_defaults.slow.name
  run_once         = { period = "1h" }
}

resource "consullock_lock" "long" {
  name             = "long"
  prefix           = "%s/long"
  session_defaults = consullock_session_defaults.slow.name
  run_once         = { period = "24h" }
}
`, p, p))
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Run Period Shorter Than Worst-Case Gap",
		"with consullock_lock.short",
		`run_once.period is 1h0m0s but the session profile "slow" has worst_case_gap 2h1m0s`,
	)
	if n := strings.Count(out, "Warning: Run Period Shorter Than Worst-Case Gap"); n != 1 {
		t.Errorf("%d such warnings, want 1 (for the 1h period only):\n%s", n, out)
	}
}
