package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// checkWaitersRecord asserts the waiters the lock's record declares, as
// stored: `"waiters":"queue"` for queue, `"waiters":"handoff"` for handoff,
// no waiters field at all for race.
func checkWaitersRecord(t *testing.T, recordKey, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, recordKey)
		if pair == nil {
			return fmt.Errorf("registry record %s does not exist", recordKey)
		}
		var rec struct {
			Spec map[string]json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(pair.Value, &rec); err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		raw, found := rec.Spec[lockmodel.FieldWaiters]
		switch {
		case want == lockmodel.WaitersRace && found:
			return fmt.Errorf("registry record %s declares waiters %s; want no waiters field for race: %s", recordKey, raw, pair.Value)
		case want != lockmodel.WaitersRace && string(raw) != fmt.Sprintf("%q", want):
			return fmt.Errorf("registry record %s declares waiters %s; want %q: %s", recordKey, raw, want, pair.Value)
		}
		l, err := record.DecodeLockRecord(pair.Value)
		if err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		got := l.Waiters
		if got == "" {
			got = lockmodel.WaitersRace
		}
		if got != want || l.Queued() != (want != lockmodel.WaitersRace) || l.HandsOff() != (want == lockmodel.WaitersHandOff) {
			return fmt.Errorf("registry record %s reads back as waiters %q (queued %v, hands off %v); want %q",
				recordKey, l.Waiters, l.Queued(), l.HandsOff(), want)
		}
		return nil
	}
}

// TestAccLock_waitersQueueIsRecordedUpdatedInPlaceAndImported: waiters =
// "queue" is written to the declaration record (the field the runner reads),
// plans nothing after apply, is read back on import, and changing it to
// "race" is an in-place update that drops the field from the record; unset,
// it is the default race and plans nothing.
func TestAccLock_waitersQueueIsRecordedUpdatedInPlaceAndImported(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(waiters string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "herd"
  prefix = "%s/herd"
  %s
}
`, p, waiters)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/herd/.lock", reg+"/locks/herd"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				Config: cfg(`waiters = "queue"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, tfjsonpath.New("waiters"), knownvalue.StringExact("queue"))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("waiters"), knownvalue.StringExact("queue")),
				},
				Check: checkWaitersRecord(t, recordKey, lockmodel.WaitersQueue),
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "herd",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				Config: cfg(`waiters = "race"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("waiters"), knownvalue.StringExact("race")),
				},
				Check: checkWaitersRecord(t, recordKey, lockmodel.WaitersRace),
			},
			{
				// Unset is the default, race: nothing to change.
				Config:   cfg(""),
				PlanOnly: true,
			},
		},
	})
}

// TestAccLock_waitersHandOffIsRecordedUpdatedInPlaceAndRefusedOnASemaphore:
// waiters = "handoff" is accepted, written to the declaration record as
// `"waiters":"handoff"` (the field the runner reads), reached from "queue"
// by an update in place, plans nothing after apply and is read back on
// import; with limit = 3 it is a plan error naming waiters and the value,
// as "queue" is, and the lock is left as it was.
func TestAccLock_waitersHandOffIsRecordedUpdatedInPlaceAndRefusedOnASemaphore(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(extra string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "herd"
  prefix = "%s/herd"
  %s
}
`, p, extra)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/herd/.lock", reg+"/locks/herd"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				Config: cfg(`waiters = "queue"`),
				Check:  checkWaitersRecord(t, recordKey, lockmodel.WaitersQueue),
			},
			{
				Config: cfg(`waiters = "handoff"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("waiters"), knownvalue.StringExact("handoff")),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("waiters"), knownvalue.StringExact("handoff")),
				},
				Check: checkWaitersRecord(t, recordKey, lockmodel.WaitersHandOff),
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "herd",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				Config: cfg("limit = 3\n  waiters = \"handoff\""), PlanOnly: true,
				ExpectError: diagRE("Queued Waiters On A Semaphore", `with consullock_lock.test`, `waiters: "handoff (limit 3)" is not allowed;`,
					`"handoff" only on a mutex (limit 1)`),
			},
			{
				// The refused plan changed nothing.
				Config:   cfg(`waiters = "handoff"`),
				PlanOnly: true,
			},
		},
	})
}

// TestAccLock_waitersRejectsBadInputAtPlan: an unknown mode, and queue on a
// semaphore, are plan errors naming waiters, the value and what is allowed.
func TestAccLock_waitersRejectsBadInputAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(extra string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "herd"
  prefix = "%s/herd"
  %s
}
`, p, extra)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(`waiters = "fifo"`), PlanOnly: true,
				ExpectError: diagRE(`Attribute waiters value must be one of: ["race" "queue" "handoff"], got: "fifo"`),
			},
			{
				Config: cfg("limit = 3\n  waiters = \"queue\""), PlanOnly: true,
				ExpectError: diagRE("Queued Waiters On A Semaphore", `with consullock_lock.test`, `waiters: "queue (limit 3)" is not allowed;`,
					`"queue" only on a mutex (limit 1)`),
			},
		},
	})
}

// TestAccLock_aLockDeclaredBeforeWaitersPlansNoChange: a state written by a
// provider without waiters (the attribute absent) and a record without the
// field, as every lock declared before waiters existed has, plan no change
// after the refresh: Read takes waiters from the record, race.
func TestAccLock_aLockDeclaredBeforeWaitersPlansNoChange(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	config := reattachTerraformBlock + lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "old" {
  name   = "old"
  prefix = "%s/old"
}
`, p)
	w := newTofuWorkdir(t, config)
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	t.Cleanup(func() { _, _ = w.run(t, "destroy", "-input=false", "-no-color", "-auto-approve") })
	if err := checkWaitersRecord(t, reg+"/locks/old", lockmodel.WaitersRace)(nil); err != nil {
		t.Fatal(err)
	}

	// Make the state what an earlier provider wrote: no waiters attribute.
	statePath := filepath.Join(w.dir, "terraform.tfstate")
	data, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	// Only the attribute goes: every other field of the state stays as
	// tofu wrote it.
	type object = map[string]json.RawMessage
	var whole object
	if err := json.Unmarshal(data, &whole); err != nil {
		t.Fatal(err)
	}
	var resources []object
	if err := json.Unmarshal(whole["resources"], &resources); err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, r := range resources {
		var instances []object
		if err := json.Unmarshal(r["instances"], &instances); err != nil {
			t.Fatal(err)
		}
		for _, inst := range instances {
			var attrs object
			if err := json.Unmarshal(inst["attributes"], &attrs); err != nil {
				t.Fatal(err)
			}
			if _, ok := attrs["waiters"]; ok {
				delete(attrs, "waiters")
				removed++
			}
			if inst["attributes"], err = json.Marshal(attrs); err != nil {
				t.Fatal(err)
			}
		}
		if r["instances"], err = json.Marshal(instances); err != nil {
			t.Fatal(err)
		}
	}
	if whole["resources"], err = json.Marshal(resources); err != nil {
		t.Fatal(err)
	}
	if removed != 1 {
		t.Fatalf("removed waiters from %d instances, want 1:\n%s", removed, data)
	}
	if data, err = json.MarshalIndent(whole, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, data, 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := w.run(t, "plan", "-input=false", "-no-color", "-detailed-exitcode")
	if err != nil || !strings.Contains(out, "No changes.") {
		t.Fatalf("plan after the refresh of a lock declared before waiters: %v (exit 2: changes)\n%s", err, out)
	}
}
