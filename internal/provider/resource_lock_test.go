package provider

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
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

const (
	mutexFlags     = "0x2ddccbc058a50c18"
	semaphoreFlags = "0xe0f69a2baa414de0"
)

// lockTestProvider is the provider block of a lock test: the agent comes
// from CONSUL_HTTP_ADDR/CONSUL_HTTP_TOKEN, the registry is the test's own.
func lockTestProvider(registry string) string {
	return fmt.Sprintf(`
provider "consullock" {
  registry_prefix = %q
}
`, registry)
}

// diagRE matches diagnostic texts as OpenTofu prints them: wrapped at any
// space, with "│" at the start of continuation lines. Several texts must
// appear in order, with anything between them.
func diagRE(texts ...string) *regexp.Regexp {
	res := make([]string, 0, len(texts))
	for _, text := range texts {
		words := strings.Split(text, " ")
		for i, w := range words {
			words[i] = regexp.QuoteMeta(w)
		}
		res = append(res, strings.Join(words, `[\s│]+`))
	}
	return regexp.MustCompile(`(?s)` + strings.Join(res, `.*`))
}

// kvPair reads a key consistently with the management token.
func kvPair(t *testing.T, key string) *api.KVPair {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return pair
}

// newHolderSession creates a session on the agent's node, as a job's lock
// holder would, and destroys it when the test ends.
func newHolderSession(t *testing.T, name string) string {
	t.Helper()
	id, _, err := agent.Client().Session().Create(&api.SessionEntry{
		Name: name, Node: agent.NodeName, Behavior: api.SessionBehaviorRelease, LockDelay: time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatalf("creating session: %v", err)
	}
	t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(id, nil) })
	return id
}

// acquire takes key for session the way api.Lock does (flags included).
func acquire(t *testing.T, key, session, value string, flags uint64) {
	t.Helper()
	ok, _, err := agent.Client().KV().Acquire(&api.KVPair{Key: key, Session: session, Value: []byte(value), Flags: flags}, nil)
	if err != nil || !ok {
		t.Fatalf("acquiring %s with session %s: ok=%v err=%v", key, session, ok, err)
	}
}

// checkKeysGone is a CheckDestroy asserting that keys no longer exist.
func checkKeysGone(keys ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, k := range keys {
			pair, _, err := agent.Client().KV().Get(k, &api.QueryOptions{RequireConsistent: true})
			if err != nil {
				return fmt.Errorf("reading %s: %w", k, err)
			}
			if pair != nil {
				return fmt.Errorf("key %s still exists after destroy", k)
			}
		}
		return nil
	}
}

// checkLockKey asserts what a lock key holds.
func checkLockKey(t *testing.T, key string, flags uint64, check func(*api.KVPair) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, key)
		if pair == nil {
			return fmt.Errorf("lock key %s does not exist", key)
		}
		if pair.Flags != flags {
			return fmt.Errorf("lock key %s has flags %s, want %s", key, lockmodel.FormatFlags(pair.Flags), lockmodel.FormatFlags(flags))
		}
		if check != nil {
			return check(pair)
		}
		return nil
	}
}

// checkLockRecord asserts that the registry record decodes to want.
func checkLockRecord(t *testing.T, recordKey string, want lockmodel.Lock) resource.TestCheckFunc {
	return func(*terraform.State) error {
		pair := kvPair(t, recordKey)
		if pair == nil {
			return fmt.Errorf("registry record %s does not exist", recordKey)
		}
		got, err := record.DecodeLockRecord(pair.Value)
		if err != nil {
			return fmt.Errorf("registry record %s: %w", recordKey, err)
		}
		if got != want {
			return fmt.Errorf("registry record %s is %+v, want %+v", recordKey, got, want)
		}
		return nil
	}
}

func TestAccLock_createsMutexWithKeyAndFlagsKnownAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name        = "nightly-report"
  prefix      = "/%[1]s/nightly/"
  description = "Nightly billing report"
  max_hold    = "2h"
}

resource "consullock_lock" "raw" {
  name   = "leader"
  prefix = "%[1]s/service"
  key    = "%[1]s/service/leader"
}
`, p)
	addr, raw := "consullock_lock.test", "consullock_lock.raw"
	key, rawKey := p+"/nightly/.lock", p+"/service/leader"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, rawKey, reg+"/locks/nightly-report", reg+"/locks/leader"),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("key"), knownvalue.StringExact(key)),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(reg+"/locks/nightly-report")),
						plancheck.ExpectKnownValue(raw, tfjsonpath.New("key"), knownvalue.StringExact(rawKey)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("prefix"), knownvalue.StringExact("/"+p+"/nightly/")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("limit"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("force_destroy"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
					statecheck.ExpectKnownValue(raw, tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLockKey(t, key, lockmodel.LockFlagValue, func(pair *api.KVPair) error {
						if len(pair.Value) != 0 || pair.Session != "" || pair.LockIndex != 0 {
							return fmt.Errorf("new mutex key: want empty value, no session, LockIndex 0; got %q %q %d", pair.Value, pair.Session, pair.LockIndex)
						}
						return nil
					}),
					checkLockKey(t, rawKey, lockmodel.LockFlagValue, nil),
					checkLockRecord(t, reg+"/locks/nightly-report", lockmodel.Lock{
						Name: "nightly-report", Prefix: p + "/nightly", Key: key, Limit: 1,
						MaxHold: 2 * time.Hour, Description: "Nightly billing report",
					}),
				),
			},
			{
				// No diff on re-plan.
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

func TestAccLock_recreatesKeyDeletedOutOfBand(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "cleanup"
  prefix = "%s/cleanup"
}
`, p)
	addr, key, record := "consullock_lock.test", p+"/cleanup/.lock", reg+"/locks/cleanup"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, record),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					if _, err := agent.Client().KV().Delete(key, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
				Check: checkLockKey(t, key, lockmodel.LockFlagValue, nil),
			},
			{
				// A deleted registry record shows as registry_key "" and
				// is rewritten in place.
				PreConfig: func() {
					if _, err := agent.Client().KV().Delete(record, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("registry_key"), knownvalue.StringExact(record)),
					},
				},
				Check: checkLockRecord(t, record, lockmodel.Lock{Name: "cleanup", Prefix: p + "/cleanup", Key: key, Limit: 1}),
			},
		},
	})
}

func TestAccLock_showsAndRepairsFlagDriftKeepingHolder(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name          = "drift"
  prefix        = "%s/drift"
  force_destroy = true
}
`, p)
	addr, key := "consullock_lock.test", p+"/drift/.lock"
	session := newHolderSession(t, "drift-holder")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, reg+"/locks/drift"),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					acquire(t, key, session, "holder-1", lockmodel.LockFlagValue)
					// The holder re-acquires with a raw ?acquire, which
					// writes flags 0: the drift a careless client causes.
					acquire(t, key, session, "holder-2", 0)
				},
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check:              resource.TestCheckResourceAttr(addr, "flags", "0x0000000000000000"),
			},
			{
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
					},
				},
				Check: checkLockKey(t, key, lockmodel.LockFlagValue, func(pair *api.KVPair) error {
					if pair.Session != session || string(pair.Value) != "holder-2" || pair.LockIndex != 1 {
						return fmt.Errorf("repair touched the holder: session %q value %q LockIndex %d; want %q \"holder-2\" 1",
							pair.Session, pair.Value, pair.LockIndex, session)
					}
					return nil
				}),
			},
		},
	})
}

func TestAccLock_refusesDestroyWhileHeld(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	body := `
resource "consullock_lock" "test" {
  name          = "held"
  prefix        = "%s/held"
  force_destroy = %t
}
`
	cfg := lockTestProvider(reg) + fmt.Sprintf(body, p, false)
	cfgForce := lockTestProvider(reg) + fmt.Sprintf(body, p, true)
	addr, key := "consullock_lock.test", p+"/held/.lock"
	session := newHolderSession(t, "job-runner")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkKeysGone(key, reg+"/locks/held"),
			func(*terraform.State) error {
				// force_destroy ends the holder's session, so that its
				// lock-delay applies (TestAccLock_forceDestroyKeepsHoldersLockDelay).
				s, _, err := agent.Client().Session().Info(session, &api.QueryOptions{RequireConsistent: true})
				if err != nil || s != nil {
					return fmt.Errorf("holder session %s after force_destroy: %+v (err %v), want it ended", session, s, err)
				}
				return nil
			},
		),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: func(*terraform.State) error {
					acquire(t, key, session, "running", lockmodel.LockFlagValue)
					return nil
				},
			},
			{
				Config:  cfg,
				Destroy: true,
				ExpectError: diagRE(fmt.Sprintf(`Lock "held" (key %s) is held by session %s ("job-runner") on node %q.`, key, session, agent.NodeName) +
					` Destroying it would pull the key from under a running job. Wait until the holder releases it, or set force_destroy = true`),
			},
			{
				Config: cfgForce,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				Check: checkLockKey(t, key, lockmodel.LockFlagValue, func(pair *api.KVPair) error {
					if pair.Session != session {
						return fmt.Errorf("key %s lost its holder: session %q", key, pair.Session)
					}
					return nil
				}),
			},
		},
	})
}

// force_destroy ends the holders' sessions instead of releasing their keys
// (hole 4 of issue 22): a release sets no lock-delay, so a waiter would
// start at once while the old command still stops within its -grace. An
// ended session's lock-delay, which Consul keys by key name, holds even
// after the key is deleted.
func TestAccLock_forceDestroyKeepsHoldersLockDelay(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	key := p + "/job/.lock"
	const lockDelay = 30 * time.Second
	holder, _, err := agent.Client().Session().Create(&api.SessionEntry{
		Name: "job-runner", Node: agent.NodeName, Behavior: api.SessionBehaviorRelease, LockDelay: lockDelay,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(holder, nil) })
	waiter := newHolderSession(t, "job-waiter")
	t.Cleanup(func() { _, _ = agent.Client().KV().DeleteTree(p+"/", nil) })
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkKeysGone(key, reg+"/locks/job"),
			func(*terraform.State) error {
				// A waiter trying right after the destroy, within the
				// holder's lock-delay, on the deleted key: refused.
				ok, _, err := agent.Client().KV().Acquire(&api.KVPair{Key: key, Session: waiter, Flags: lockmodel.LockFlagValue}, nil)
				if err != nil || ok {
					return fmt.Errorf("a waiter acquired %s right after force_destroy (ok=%v err=%v): the holder's %s lock-delay did not apply", key, ok, err, lockDelay)
				}
				if s, _, err := agent.Client().Session().Info(holder, &api.QueryOptions{RequireConsistent: true}); err != nil || s != nil {
					return fmt.Errorf("holder session %s after force_destroy: %+v (err %v), want it ended", holder, s, err)
				}
				return nil
			},
		),
		Steps: []resource.TestStep{{
			Config: lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name          = "job"
  prefix        = "%s/job"
  force_destroy = true
}
`, p),
			Check: func(*terraform.State) error {
				acquire(t, key, holder, "running", lockmodel.LockFlagValue)
				return nil
			},
		}},
	})
}

// force_destroy needs 'session:write' on the holders' nodes: without it,
// destroy says which rule is missing and deletes nothing.
func TestAccLock_forceDestroyWithoutSessionWriteDeletesNothing(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	key := p + "/job/.lock"
	token, err := agent.MintToken("lock-no-session-write-"+strings.ReplaceAll(p, "/", "-"), fmt.Sprintf(`
key_prefix %q { policy = "write" }
session_prefix "" { policy = "read" }
`, p+"/"), 0)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`
resource "consullock_lock" "test" {
  name          = "job"
  prefix        = "%s/job"
  force_destroy = true
}
`, p)
	cfg := lockTestProvider(reg) + body
	limited := fmt.Sprintf(`
provider "consullock" {
  registry_prefix = %q
  token           = %q
}
`, reg, token.SecretID) + body
	holder := newHolderSession(t, "job-runner")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, reg+"/locks/job"),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: func(*terraform.State) error {
					acquire(t, key, holder, "running", lockmodel.LockFlagValue)
					return nil
				},
			},
			{
				Config:  limited,
				Destroy: true,
				ExpectError: diagRE(fmt.Sprintf(`lacks permission 'session:write' on %q`, agent.NodeName),
					fmt.Sprintf(`session_prefix %q { policy = "write" }`, agent.NodeName), "No session was ended and nothing was deleted."),
			},
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLockKey(t, key, lockmodel.LockFlagValue, func(pair *api.KVPair) error {
						if pair.Session != holder {
							return fmt.Errorf("key %s lost its holder after a refused force_destroy: session %q", key, pair.Session)
						}
						return nil
					}),
					checkLockRecord(t, reg+"/locks/job", lockmodel.Lock{Name: "job", Prefix: p + "/job", Key: key, Limit: 1}),
				),
			},
		},
	})
}

func TestAccLock_changesSemaphoreLimitKeepingHolders(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	body := `
resource "consullock_lock" "test" {
  name          = "workers"
  prefix        = "%s/workers"
  limit         = %d
  force_destroy = %t
}
`
	addr, prefix := "consullock_lock.test", p+"/workers"
	key := prefix + "/.lock"
	var sem *api.Semaphore
	var holder string
	t.Cleanup(func() {
		if sem != nil {
			_ = sem.Release()
		}
	})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkKeysGone(key, reg+"/locks/workers"),
			func(*terraform.State) error {
				// force_destroy ended the holder's session; api.Semaphore's
				// sessions have Behavior delete, so its contender key went
				// with it.
				if s, _, err := agent.Client().Session().Info(holder, &api.QueryOptions{RequireConsistent: true}); err != nil || s != nil {
					return fmt.Errorf("semaphore holder session %s after force_destroy: %+v (err %v), want it ended", holder, s, err)
				}
				if pair := kvPair(t, prefix+"/"+holder); pair != nil {
					return fmt.Errorf("contender key %s/%s after its session ended: %+v, want it deleted (Behavior delete)", prefix, holder, pair)
				}
				return nil
			},
		),
		Steps: []resource.TestStep{
			{
				Config: lockTestProvider(reg) + fmt.Sprintf(body, p, 3, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("key"), knownvalue.StringExact(key)),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("flags"), knownvalue.StringExact(semaphoreFlags)),
					},
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLockKey(t, key, lockmodel.SemaphoreFlagValue, func(pair *api.KVPair) error {
						if string(pair.Value) != `{"Limit":3,"Holders":{}}` {
							return fmt.Errorf("new semaphore value %s", pair.Value)
						}
						return nil
					}),
					func(*terraform.State) error {
						// A real api.Semaphore holder takes a slot.
						var err error
						if sem, err = agent.Client().SemaphorePrefix(prefix, 3); err != nil {
							return err
						}
						if _, err := sem.Acquire(nil); err != nil {
							return fmt.Errorf("api.Semaphore cannot acquire the provider's semaphore: %w", err)
						}
						s, err := lockmodel.DecodeSemaphoreState(kvPair(t, key).Value)
						if err != nil || len(s.Holders) != 1 {
							return fmt.Errorf("holder table after acquire: %+v %v", s, err)
						}
						for h := range s.Holders {
							holder = h
						}
						return nil
					},
				),
			},
			{
				Config: lockTestProvider(reg) + fmt.Sprintf(body, p, 5, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("limit"), knownvalue.Int64Exact(5)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLockKey(t, key, lockmodel.SemaphoreFlagValue, func(pair *api.KVPair) error {
						s, err := lockmodel.DecodeSemaphoreState(pair.Value)
						if err != nil || s.Limit != 5 || !s.Holders[holder] || len(s.Holders) != 1 {
							return fmt.Errorf("after limit change: %s (err %v); want Limit 5 and holder %s kept", pair.Value, err, holder)
						}
						return nil
					}),
					func(*terraform.State) error {
						if pair := kvPair(t, prefix+"/"+holder); pair == nil || pair.Session != holder {
							return fmt.Errorf("contender key of %s lost its session: %+v", holder, pair)
						}
						return nil
					},
					checkLockRecord(t, reg+"/locks/workers", lockmodel.Lock{Name: "workers", Prefix: prefix, Key: key, Limit: 5}),
				),
			},
			{
				// The limit edited out of band shows as drift and is put back.
				PreConfig: func() {
					pair := kvPair(t, key)
					value, err := lockmodel.SemaphoreValueWithLimit(pair.Value, 7)
					if err != nil {
						t.Fatal(err)
					}
					pair.Value = value
					if ok, _, err := agent.Client().KV().CAS(pair, nil); err != nil || !ok {
						t.Fatalf("editing the limit: %v %v", ok, err)
					}
				},
				Config: lockTestProvider(reg) + fmt.Sprintf(body, p, 5, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				Check: checkLockKey(t, key, lockmodel.SemaphoreFlagValue, func(pair *api.KVPair) error {
					if s, err := lockmodel.DecodeSemaphoreState(pair.Value); err != nil || s.Limit != 5 || !s.Holders[holder] {
						return fmt.Errorf("after repair: %s", pair.Value)
					}
					return nil
				}),
			},
			{
				Config:  lockTestProvider(reg) + fmt.Sprintf(body, p, 5, false),
				Destroy: true,
				ExpectError: diagRE(fmt.Sprintf(`Lock "workers" (key %s) is held by session`, key),
					fmt.Sprintf(`on node %q.`, agent.NodeName), `or set force_destroy = true`),
			},
			{Config: lockTestProvider(reg) + fmt.Sprintf(body, p, 5, true)},
			{
				// Changing between mutex and semaphore replaces the lock;
				// force_destroy ends the holder's session first.
				Config: lockTestProvider(reg) + fmt.Sprintf(body, p, 1, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
					},
				},
				Check: checkLockKey(t, key, lockmodel.LockFlagValue, nil),
			},
		},
	})
}

func TestAccLock_adoptsCompatibleExistingKey(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	mutexKey, semKey := p+"/legacy/.lock", p+"/pool/.lock"
	session := newHolderSession(t, "legacy-job")
	var before *api.KVPair
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "mutex" {
  name          = "legacy"
  prefix        = "%[1]s/legacy"
  force_destroy = true
}

resource "consullock_lock" "semaphore" {
  name   = "pool"
  prefix = "%[1]s/pool"
  limit  = 2
}
`, p)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(mutexKey, semKey),
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					// A job already runs under api.Lock, and a semaphore
					// exists from an earlier `consul lock -n 2`.
					acquire(t, mutexKey, session, "owner-data", lockmodel.LockFlagValue)
					before = kvPair(t, mutexKey)
					if _, err := agent.Client().KV().Put(&api.KVPair{Key: semKey, Flags: lockmodel.SemaphoreFlagValue,
						Value: []byte(`{"Limit":2,"Holders":{}}`)}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("consullock_lock.mutex", tfjsonpath.New("flags"), knownvalue.StringExact(mutexFlags)),
					statecheck.ExpectKnownValue("consullock_lock.semaphore", tfjsonpath.New("flags"), knownvalue.StringExact(semaphoreFlags)),
				},
				Check: checkLockKey(t, mutexKey, lockmodel.LockFlagValue, func(pair *api.KVPair) error {
					if pair.ModifyIndex != before.ModifyIndex || pair.Session != session || string(pair.Value) != "owner-data" || pair.LockIndex != before.LockIndex {
						return fmt.Errorf("adoption changed the key: before %+v, after %+v", before, pair)
					}
					return nil
				}),
			},
		},
	})
}

func TestAccLock_refusesIncompatibleExistingKey(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	plainKey, semKey := p+"/config/.lock", p+"/sem/.lock"
	put := func(key string, flags uint64, value string) {
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: key, Flags: flags, Value: []byte(value)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(plainKey, 0, "app config")
	put(semKey, lockmodel.SemaphoreFlagValue, `{"Limit":4,"Holders":{}}`)
	otherRecord, err := record.EncodeLockRecord(lockmodel.Lock{Name: "taken", Prefix: p + "/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	put(reg+"/locks/taken", 0, string(otherRecord))
	lock := func(name, prefix string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = %q
  prefix = %q
}
`, name, prefix)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: lock("config", p+"/config"),
				ExpectError: diagRE(fmt.Sprintf(`key %q has flags 0x0000000000000000 (a plain KV key) but the lock is declared as a mutex (limit 1)`, plainKey),
					`The key is not a lock key. Choose another prefix or key; or, if nothing uses it, delete it (consul kv delete `+plainKey+`) and apply again.`),
			},
			{
				Config:      lock("sem", p+"/sem"),
				ExpectError: diagRE(`The key is an api.Semaphore semaphore with limit 4: declare limit = 4 to adopt it as it is.`),
			},
			{
				Config: lock("taken", p+"/mine"),
				ExpectError: diagRE(fmt.Sprintf(`A lock named "taken" is already recorded at %s/locks/taken, for key %q,`, reg, p+"/elsewhere/.lock"),
					`Lock names are unique per registry prefix. Import it to manage it here`),
			},
			{
				PreConfig: func() {
					if pair := kvPair(t, plainKey); pair == nil || string(pair.Value) != "app config" || pair.Flags != 0 {
						t.Errorf("the refused key was changed: %+v", pair)
					}
					if pair := kvPair(t, p+"/mine/.lock"); pair != nil {
						t.Errorf("a lock whose name is taken created its key anyway: %+v", pair)
					}
				},
				Config:   lockTestProvider(reg),
				PlanOnly: true,
			},
		},
	})
}

func TestAccLock_refreshWithoutReadPermissionKeepsState(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	key := p + "/guard/.lock"
	// A token that may read the lock key but not the registry: Consul hides
	// the record from a transaction instead of refusing it.
	token, err := agent.MintToken("lock-reader-"+strings.ReplaceAll(p, "/", "-"), fmt.Sprintf(`key %q { policy = "read" }`, key), 0)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "guard"
  prefix = "%s/guard"
}
`, p)
	cfg := lockTestProvider(reg) + body
	limited := fmt.Sprintf(`
provider "consullock" {
  registry_prefix = %q
  token           = %q
}
`, reg, token.SecretID) + body
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, reg+"/locks/guard"),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				Config:   limited,
				PlanOnly: true,
				ExpectError: diagRE(fmt.Sprintf(`Consul hid key %q from the token (results filtered by ACLs)`, reg+"/locks/guard"),
					`needs permission 'key:read' on its key and on its registry record`),
			},
			{
				// The lock is still in state: nothing was removed on a guess.
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

func TestAccLock_importByName(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_session_defaults" "fast" {
  name = "fast"
  ttl  = "20s"
}

resource "consullock_lock" "test" {
  name             = "imported"
  prefix           = "%s/imported"
  session_defaults = consullock_session_defaults.fast.name
  max_hold         = "45m"
  description      = "Import me"
}
`, p)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(p+"/imported/.lock", reg+"/locks/imported", reg+"/session-defaults/fast"),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				ResourceName:                         "consullock_lock.test",
				ImportState:                          true,
				ImportStateId:                        "imported",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				ResourceName:                         "consullock_session_defaults.fast",
				ImportState:                          true,
				ImportStateId:                        "fast",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore:              []string{"renew_every"}, // the ttl's default: imported null
			},
			{
				ResourceName:  "consullock_lock.test",
				ImportState:   true,
				ImportStateId: "no-such-lock",
				ExpectError:   diagRE(fmt.Sprintf(`No lock named "no-such-lock" is recorded under registry prefix %q`, reg)),
			},
		},
	})
}

func TestAccLock_requiresExistingSessionProfile(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(p + "/job/.lock"),
		Steps: []resource.TestStep{
			{
				Config: lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name             = "job"
  prefix           = "%s/job"
  session_defaults = "missing-profile"
}
`, p),
				ExpectError: diagRE(fmt.Sprintf(`session_defaults is "missing-profile", but no session profile of that name is declared in this configuration or recorded under registry prefix %q`, reg),
					`Declare it with a consullock_session_defaults resource named "missing-profile"`),
			},
		},
	})
}

func TestAccLock_rejectsInvalidInputAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	lock := func(attrs string) string {
		return lockTestProvider(reg) + `
resource "consullock_lock" "test" {
` + attrs + `
}
`
	}
	withPrefix := func(prefix string) string { return lock(`name = "x"` + "\n" + `prefix = ` + prefix) }
	long := strings.Repeat("a", lockmodel.MaxDescriptionLength+1)
	cases := []struct {
		config string
		want   string
	}{
		{lock(`name = "bad name"` + "\n" + `prefix = "jobs/a"`), `name: "bad name" is not allowed; use 1 to 128 letters, digits, '-' or '_'`},
		{lock(`name = ""` + "\n" + `prefix = "jobs/a"`), `name: "" is not allowed; use 1 to 128 letters`},
		{withPrefix(`""`), `prefix: "" is not allowed; it is empty; use 1 to 512 bytes of letters`},
		{withPrefix(`"/"`), `prefix: "/" is not allowed; it is empty`},
		{withPrefix(`"jobs/../etc"`), `prefix: "jobs/../etc" is not allowed; it has a ".." segment`},
		{withPrefix(`"jobs//a"`), `prefix: "jobs//a" is not allowed; it has an empty segment ('//')`},
		{withPrefix(`"jobs/\"a\""`), `prefix: "jobs/\"a\"" is not allowed; it contains the character '"'`},
		{withPrefix(`"jobs/{a}"`), `prefix: "jobs/{a}" is not allowed; it contains the character '{'`},
		{withPrefix(`"jobs/$${a}"`), `it contains the character '$'`},
		{withPrefix(`"jobs/a b"`), `prefix: "jobs/a b" is not allowed; it contains a space`},
		{withPrefix(`"jobs/a\tb"`), `it contains a tab`},
		{withPrefix(`"jobs/a\u0001b"`), `it contains the control character 0x01`},
		{withPrefix(`"jöbs"`), `prefix: "jöbs" is not allowed; it contains the non-ASCII character 'ö'`},
		{withPrefix(`"jobs/a?b=1"`), `it contains the character '?'`},
		{withPrefix(`"jobs/*"`), `it contains the character '*'`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `key = "jobs/../a"`), `key: "jobs/../a" is not allowed; it has a ".." segment`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `key = "other/leader"`), `key: "other/leader" is not allowed; a key equal to the prefix "jobs/a" or under it ("jobs/a/")`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `key = "jobs/a/leader"` + "\n" + `limit = 3`), `key: "jobs/a/leader" is not allowed; for a semaphore (limit > 1) the key must be "jobs/a/.lock"`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `limit = 0`), `Attribute limit value must be between 1 and 1024, got: 0`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `limit = 1025`), `Attribute limit value must be between 1 and 1024, got: 1025`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `max_hold = "500ms"`), `max_hold: "500ms" is not allowed; 0s (no limit) or a duration of at least 1s`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `max_hold = "-1h"`), `max_hold: "-1h" is not allowed`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `description = "` + long + `"`), `valid UTF-8 text of at most 1024 characters (got 1025)`},
		{lock(`name = "x"` + "\n" + `prefix = "jobs/a"` + "\n" + `session_defaults = "fast/slow"`), `session_defaults: "fast/slow" is not allowed; use 1 to 128 letters`},
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

// TestAccLock_consulLockCLIAcquiresProviderLocks runs the real `consul lock`
// on a mutex and a semaphore the provider created.
func TestAccLock_consulLockCLIAcquiresProviderLocks(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	mutexPrefix, semPrefix := p+"/cli-mutex", p+"/cli-sem"
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "mutex" {
  name   = "cli-mutex"
  prefix = %q
}

resource "consullock_lock" "semaphore" {
  name   = "cli-sem"
  prefix = %q
  limit  = 3
}
`, mutexPrefix, semPrefix)
	consulLock := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, agent.Bin, append([]string{"lock", "-timeout=30s", "-child-exit-code"}, args...)...)
		cmd.Env = append(os.Environ(), agent.Env()...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(mutexPrefix+"/.lock", semPrefix+"/.lock"),
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					// While `consul lock` holds the mutex, its child reads the
					// key: the provider's key, with the provider's flags, held.
					out, err := consulLock(mutexPrefix, agent.Bin, "kv", "get", "-detailed", mutexPrefix+"/.lock")
					if err != nil {
						t.Fatalf("consul lock %s: %v\n%s", mutexPrefix, err, out)
					}
					if !regexp.MustCompile(`Flags\s+3304740253564472344`).MatchString(out) ||
						!regexp.MustCompile(`Session\s+[0-9a-f-]{36}`).MatchString(out) {
						t.Fatalf("consul lock did not hold the provider's mutex key:\n%s", out)
					}
					out, err = consulLock("-n=3", semPrefix, agent.Bin, "kv", "get", semPrefix+"/.lock")
					if err != nil {
						t.Fatalf("consul lock -n 3 %s: %v\n%s", semPrefix, err, out)
					}
					if !regexp.MustCompile(`\{"Limit":3,"Holders":\{"[0-9a-f-]{36}":true\}\}`).MatchString(out) {
						t.Fatalf("consul lock -n 3 did not hold a slot of the provider's semaphore:\n%s", out)
					}
				},
				// `consul lock` deletes an unheld lock key when it exits
				// (api.Lock.Destroy, api.Semaphore.Destroy); refresh sees
				// that and the plan recreates both keys.
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("consullock_lock.mutex", plancheck.ResourceActionCreate),
						plancheck.ExpectResourceAction("consullock_lock.semaphore", plancheck.ResourceActionCreate),
					},
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkLockKey(t, mutexPrefix+"/.lock", lockmodel.LockFlagValue, nil),
					checkLockKey(t, semPrefix+"/.lock", lockmodel.SemaphoreFlagValue, nil),
				),
			},
		},
	})
}

// TestAccLock_semaphoreResizeKeepsApiSemaphoreHolders backs the documented
// resize behaviour with real api.Semaphore holders (what `consul lock -n`
// runs): raising and lowering the limit, even below the number of holders,
// loses none of them; a new contender waits while the pool is full, and one
// started with the old limit refuses the table.
func TestAccLock_semaphoreResizeKeepsApiSemaphoreHolders(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	prefix := p + "/pool"
	key := prefix + "/.lock"
	config := func(limit int) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "pool"
  prefix = %q
  limit  = %d
}
`, prefix, limit)
	}
	type holder struct {
		sem  *api.Semaphore
		lost <-chan struct{}
	}
	var holders []holder
	t.Cleanup(func() {
		for _, h := range holders {
			_ = h.sem.Release()
		}
	})
	contender := func(limit int, name string) *api.Semaphore {
		sem, err := agent.Client().SemaphoreOpts(&api.SemaphoreOptions{
			Prefix: prefix, Limit: limit, SessionName: name, SemaphoreTryOnce: true, SemaphoreWaitTime: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return sem
	}
	// noneLost waits a margin for the holders' monitors to see the new
	// table. A slow machine can only make this pass without proving
	// anything, never fail a correct provider.
	noneLost := func(*terraform.State) error {
		time.Sleep(2 * time.Second)
		for i, h := range holders {
			select {
			case <-h.lost:
				return fmt.Errorf("api.Semaphore holder %d lost its slot on a limit change", i)
			default:
			}
		}
		s, err := lockmodel.DecodeSemaphoreState(kvPair(t, key).Value)
		if err != nil || len(s.Holders) != len(holders) {
			return fmt.Errorf("holder table %+v (%v); want all %d holders", s, err, len(holders))
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: config(3),
				Check: func(*terraform.State) error {
					for i := range 3 {
						sem := contender(3, fmt.Sprintf("pool-%d", i))
						lost, err := sem.Acquire(nil)
						if err != nil || lost == nil {
							return fmt.Errorf("holder %d: api.Semaphore did not acquire a free slot: %v", i, err)
						}
						holders = append(holders, holder{sem, lost})
					}
					return nil
				},
			},
			{Config: config(4), Check: noneLost},
			{
				// Below the number of holders: none is removed, and a new
				// contender gets no slot.
				Config: config(2),
				Check: resource.ComposeAggregateTestCheckFunc(noneLost, func(*terraform.State) error {
					full := contender(2, "pool-new")
					if lost, err := full.Acquire(nil); err != nil || lost != nil {
						return fmt.Errorf("a new contender acquired a slot of a pool over its limit (err %v)", err)
					}
					if _, err := contender(3, "pool-old").Acquire(nil); err == nil || !strings.Contains(err.Error(), "semaphore limit conflict") {
						return fmt.Errorf("a contender with the old limit: %v; want semaphore limit conflict", err)
					}
					return nil
				}),
			},
			{
				// Release the holders so that the lock can be destroyed.
				PreConfig: func() {
					for _, h := range holders {
						if err := h.sem.Release(); err != nil {
							t.Fatal(err)
						}
					}
					holders = nil
				},
				Config: config(2),
			},
		},
	})
}

// TestAccLock_alwaysHeldUpdatesOnlyTheRecord: always_held is recorded in
// the declaration; changing it is an in-place update that rewrites the
// record and leaves the key (value, session, LockIndex, ModifyIndex) and
// its holder untouched; import reads it back.
func TestAccLock_alwaysHeldUpdatesOnlyTheRecord(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	cfg := func(alwaysHeld string) string {
		return lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name   = "daemon"
  prefix = "%s/daemon"
  %s
}
`, p, alwaysHeld)
	}
	addr, key, recordKey := "consullock_lock.test", p+"/daemon/.lock", reg+"/locks/daemon"
	want := func(alwaysHeld bool) lockmodel.Lock {
		return lockmodel.Lock{Name: "daemon", Prefix: p + "/daemon", Key: key, Limit: 1, AlwaysHeld: alwaysHeld}
	}
	var holder string
	var heldKey *api.KVPair
	var recordIndex uint64
	keyUntouched := func(*terraform.State) error {
		got := kvPair(t, key)
		if got == nil || got.Session != holder || got.ModifyIndex != heldKey.ModifyIndex || got.LockIndex != heldKey.LockIndex ||
			!bytes.Equal(got.Value, heldKey.Value) || got.Flags != heldKey.Flags {
			return fmt.Errorf("lock key changed by an always_held update: %+v, want %+v", got, heldKey)
		}
		if rec := kvPair(t, recordKey); rec == nil || rec.ModifyIndex <= recordIndex {
			return fmt.Errorf("the record %s was not rewritten", recordKey)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, recordKey),
		Steps: []resource.TestStep{
			{
				Config: cfg(`always_held = true`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("always_held"), knownvalue.Bool(true)),
				},
				Check: checkLockRecord(t, recordKey, want(true)),
			},
			{
				// Unset: the default, false; an update in place.
				PreConfig: func() {
					holder = newHolderSession(t, "daemon-holder")
					acquire(t, key, holder, `{"node":"worker-1"}`, lockmodel.LockFlagValue)
					heldKey = kvPair(t, key)
					recordIndex = kvPair(t, recordKey).ModifyIndex
				},
				Config: cfg(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("always_held"), knownvalue.Bool(false)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: resource.ComposeAggregateTestCheckFunc(checkLockRecord(t, recordKey, want(false)), keyUntouched),
			},
			{
				PreConfig: func() { recordIndex = kvPair(t, recordKey).ModifyIndex },
				Config:    cfg(`always_held = true`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				Check: resource.ComposeAggregateTestCheckFunc(checkLockRecord(t, recordKey, want(true)), keyUntouched),
			},
			{
				PreConfig: func() {
					if _, _, err := agent.Client().KV().Release(&api.KVPair{Key: key, Session: holder, Flags: lockmodel.LockFlagValue}, nil); err != nil {
						t.Fatal(err)
					}
				},
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        "daemon",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
		},
	})
}
