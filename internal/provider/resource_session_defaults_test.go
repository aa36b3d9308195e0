package provider

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// checkProfileRecord asserts that the registry record decodes to want
// (a profile whose every field is explicit, so resolving it changes nothing).
func checkProfileRecord(t *testing.T, recordKey string, want lockmodel.SessionProfile) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, recordKey)
		if pair == nil {
			return fmt.Errorf("registry record %s does not exist", recordKey)
		}
		got, err := record.DecodeSessionProfileRecord(pair.Value)
		if err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		if !reflect.DeepEqual(got, lockmodel.Profile{SessionProfile: want}) {
			return fmt.Errorf("registry record %s is %+v, want %+v", recordKey, got, want)
		}
		return nil
	}
}

func TestAccSessionDefaults_defaultsAndComputedValuesKnownAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name = "standard"
}
`
	addr, record := "consullock_session_defaults.test", reg+"/session-defaults/standard"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(record),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("worst_case_gap"), knownvalue.StringExact("45s")),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("renew_every"), knownvalue.StringExact("5s")),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(record)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ttl"), knownvalue.StringExact("15s")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("lock_delay"), knownvalue.StringExact("15s")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("behavior"), knownvalue.StringExact("release")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("node_checks"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("serfHealth")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("service_checks"), knownvalue.Null()),
				},
				Check: checkProfileRecord(t, record, lockmodel.SessionProfile{
					Name: "standard", TTL: 15 * time.Second, LockDelay: 15 * time.Second, Behavior: lockmodel.BehaviorRelease,
					NodeChecks: []string{"serfHealth"}, RenewEvery: 5 * time.Second,
				}),
			},
			{Config: cfg, PlanOnly: true},
		},
	})
}

func TestAccSessionDefaults_updatesRecordInPlace(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	addr, record := "consullock_session_defaults.test", reg+"/session-defaults/batch"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(record),
		Steps: []resource.TestStep{
			{
				Config: lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name           = "batch"
  ttl            = "30s"
  lock_delay     = "5s"
  behavior       = "delete"
  node_checks    = ["serfHealth", "mem"]
  service_checks = [{ id = "service:batch" }]
  renew_every    = "8s"
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("worst_case_gap"), knownvalue.StringExact("1m5s")),
				},
				Check: checkProfileRecord(t, record, lockmodel.SessionProfile{
					Name: "batch", TTL: 30 * time.Second, LockDelay: 5 * time.Second, Behavior: lockmodel.BehaviorDelete,
					NodeChecks: []string{"serfHealth", "mem"}, ServiceChecks: []lockmodel.ServiceCheck{{ID: "service:batch"}},
					RenewEvery: 8 * time.Second,
				}),
			},
			{
				Config: lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name        = "batch"
  ttl         = "1m"
  lock_delay  = "0s"
  node_checks = []
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("worst_case_gap"), knownvalue.StringExact("2m0s")),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("renew_every"), knownvalue.StringExact("20s")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ttl"), knownvalue.StringExact("1m")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("behavior"), knownvalue.StringExact("release")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("node_checks"), knownvalue.ListSizeExact(0)),
				},
				Check: checkProfileRecord(t, record, lockmodel.SessionProfile{
					Name: "batch", TTL: time.Minute, LockDelay: 0, Behavior: lockmodel.BehaviorRelease,
					NodeChecks: []string{}, RenewEvery: 20 * time.Second,
				}),
			},
		},
	})
}

func TestAccSessionDefaults_recreatesRecordDeletedOutOfBand(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name = "gone"
}
`
	addr, recordKey := "consullock_session_defaults.test", reg+"/session-defaults/gone"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(recordKey),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					if _, err := agent.Client().KV().Delete(recordKey, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
			},
			{
				// A record edited out of band shows as drift and is put back.
				PreConfig: func() {
					data, err := record.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "gone", TTL: time.Hour, LockDelay: time.Second})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := agent.Client().KV().Put(&api.KVPair{Key: recordKey, Value: data}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("ttl"), knownvalue.StringExact("15s")),
					},
				},
				Check: checkProfileRecord(t, recordKey, lockmodel.SessionProfile{
					Name: "gone", TTL: 15 * time.Second, LockDelay: 15 * time.Second, Behavior: lockmodel.BehaviorRelease,
					NodeChecks: []string{"serfHealth"}, RenewEvery: 5 * time.Second,
				}),
			},
		},
	})
}

func TestAccSessionDefaults_importByName(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(reg + "/session-defaults/imported"),
		Steps: []resource.TestStep{
			{
				Config: lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name           = "imported"
  ttl            = "45s"
  lock_delay     = "10s"
  behavior       = "delete"
  service_checks = [{ id = "service:web" }, { id = "service:db", namespace = "ops" }]
}
`,
			},
			{
				ResourceName:                         "consullock_session_defaults.test",
				ImportState:                          true,
				ImportStateId:                        "imported",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
				// renew_every was not declared: the default of the ttl is
				// imported as null, so that -generate-config-out does not pin
				// it (TestAccImport_generatedConfigPlansClean).
				ImportStateVerifyIgnore: []string{"renew_every"},
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					if len(states) != 1 || states[0].Attributes["renew_every"] != "" {
						return fmt.Errorf("imported renew_every %q, want null (the default of the ttl)", states[0].Attributes["renew_every"])
					}
					return nil
				},
			},
			{
				ResourceName:  "consullock_session_defaults.test",
				ImportState:   true,
				ImportStateId: "not-declared",
				ExpectError:   diagRE(fmt.Sprintf(`No session profile named "not-declared" is recorded under registry prefix %q`, reg)),
			},
		},
	})
}

func TestAccSessionDefaults_refusesDuplicateName(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	data, err := record.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "shared", TTL: 20 * time.Second, LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: reg + "/session-defaults/shared", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
  name = "shared"
}
`,
			ExpectError: diagRE(fmt.Sprintf(`A session profile named "shared" is already recorded at %s/session-defaults/shared`, reg),
				`Import it to manage it here (tofu import consullock_session_defaults.<resource name> shared)`),
		}},
	})
}

func TestAccSessionDefaults_rejectsInvalidInputAtPlan(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	profile := func(attrs string) string {
		return lockTestProvider(reg) + `
resource "consullock_session_defaults" "test" {
` + attrs + `
}
`
	}
	cases := []struct {
		config string
		want   string
	}{
		{profile(`name = "a.b"`), `name: "a.b" is not allowed; use 1 to 128 letters, digits, '-' or '_'`},
		{profile(`name = "p"` + "\n" + `ttl = "5s"`), `ttl: "5s" is not allowed; a duration from 10s to 24h0m0s (Consul's session TTL range)`},
		{profile(`name = "p"` + "\n" + `ttl = "25h"`), `ttl: "25h" is not allowed; a duration from 10s to 24h0m0s`},
		{profile(`name = "p"` + "\n" + `ttl = "0s"`), `ttl: "0s" is not allowed; a duration from 10s to 24h0m0s`},
		{profile(`name = "p"` + "\n" + `ttl = "soon"`), `Invalid Time Duration String Value`},
		{profile(`name = "p"` + "\n" + `lock_delay = "61s"`), `lock_delay: "61s" is not allowed; a duration from 0s to 1m0s; Consul silently clamps longer lock delays to 1m0s`},
		{profile(`name = "p"` + "\n" + `lock_delay = "-1s"`), `lock_delay: "-1s" is not allowed; a duration from 0s to 1m0s`},
		{profile(`name = "p"` + "\n" + `behavior = "destroy"`), `Attribute behavior value must be one of: ["release" "delete"], got: "destroy"`},
		{profile(`name = "p"` + "\n" + `renew_every = "10s"`), `renew_every: "10s" is not allowed; a duration above 0s and below ttl/2 (7.5s for ttl 15s); leave it unset for ttl/3 (5s)`},
		{profile(`name = "p"` + "\n" + `ttl = "1m"` + "\n" + `renew_every = "30s"`), `renew_every: "30s" is not allowed; a duration above 0s and below ttl/2 (30s for ttl 1m0s)`},
		{profile(`name = "p"` + "\n" + `renew_every = "-1s"`), `renew_every: "-1s" is not allowed`},
		{profile(`name = "p"` + "\n" + `node_checks = [""]`), `node_checks: "" is not allowed; a non-empty check ID`},
		{profile(`name = "p"` + "\n" + `node_checks = ["serfHealth", "serfHealth"]`), `node_checks: "serfHealth" is not allowed; each check ID at most once`},
		{profile(`name = "p"` + "\n" + `service_checks = [{ id = "bad id" }]`), `service_checks: "bad id" is not allowed; a check ID of valid UTF-8 without spaces or control characters`},
	}
	steps := make([]resource.TestStep, 0, len(cases))
	for _, c := range cases {
		steps = append(steps, resource.TestStep{Config: c.config, PlanOnly: true, ExpectError: diagRE(c.want)})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps:                    steps,
	})
}
