package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The plan of an unchanged lock skips recomputing what the state already
// holds (planKeepsState). These are the changes that leave the lock's own
// attributes as they were and must still be planned.

// A new registry_prefix moves the lock's record: an in-place update.
func TestAccLock_plansRecordMoveWhenRegistryPrefixChanges(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	cfg := func(reg string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "moved"
  prefix = "%s/moved"
}
`, p)
	}
	addr, key := "consullock_lock.test", p+"/moved/.lock"
	oldRecord, newRecord := p+"/reg-a/locks/moved", p+"/reg-b/locks/moved"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, newRecord),
		Steps: []resource.TestStep{
			{Config: cfg(p + "/reg-a")},
			{
				Config: cfg(p + "/reg-b"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(newRecord)),
					},
				},
				Check: resource.ComposeTestCheckFunc(
					checkLockRecord(t, newRecord, lockmodel.Lock{Name: "moved", Prefix: p + "/moved", Key: key, Limit: 1}),
					checkKeysGone(oldRecord),
				),
			},
		},
	})
}

// Dropping a custom key from the configuration returns the lock to the
// default key <prefix>/.lock: a new key, so a replacement, even though the
// proposed state keeps the old key (key is optional and computed).
func TestAccLock_plansReplaceWhenCustomKeyIsDropped(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	withKey := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "custom"
  prefix = "%[1]s/custom"
  key    = "%[1]s/custom/leader"
}
`, p)
	withoutKey := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "custom"
  prefix = "%s/custom"
}
`, p)
	addr := "consullock_lock.test"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(p+"/custom/leader", p+"/custom/.lock", reg+"/locks/custom"),
		Steps: []resource.TestStep{
			{Config: withKey},
			{
				Config: withoutKey,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("key"), knownvalue.StringExact(p+"/custom/.lock")),
					},
				},
				Check: resource.ComposeTestCheckFunc(
					checkLockKey(t, p+"/custom/.lock", lockmodel.LockFlagValue, nil),
					checkKeysGone(p+"/custom/leader"),
				),
			},
		},
	})
}
