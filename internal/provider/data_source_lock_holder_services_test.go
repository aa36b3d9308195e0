package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestAccLockDataSource_holderServicesShowTheHoldersInstance: for a lock
// with holder_service, holder_services lists the instance its holder
// registered (through consul.RegisterHolderService, as the runner does):
// ID, node, address, port, health and fencing token; an empty list while
// the lock is not held; null for a lock without holder_service.
func TestAccLockDataSource_holderServicesShowTheHoldersInstance(t *testing.T) {
	ctx := context.Background()
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	key := p + "/web/.lock"
	service := fmt.Sprintf("ds-web-%d", time.Now().UnixNano()%1e8)
	cfg := lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "test" {
  name           = "web"
  prefix         = "%s/web"
  holder_service = { name = %q, port = 8080 }
}

resource "consullock_lock" "plain" {
  name   = "plain"
  prefix = "%s/plain"
}

data "consullock_lock" "test" {
  key = consullock_lock.test.key
}

data "consullock_lock" "plain" {
  key = consullock_lock.plain.key
}
`, p, service, p)
	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	services := func(check knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.consullock_lock.test", tfjsonpath.New("holder_services"), check)
	}
	var session string
	var inst holdersvc.Instance
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkKeysGone(key, reg+"/locks/web"),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					services(knownvalue.ListExact(nil)),
					statecheck.ExpectKnownValue("data.consullock_lock.plain", tfjsonpath.New("holder_services"), knownvalue.Null()),
				},
			},
			{
				PreConfig: func() {
					session = newHolderSession(t, "web-holder")
					acquire(t, key, session, `{"node":"worker-1"}`, lockmodel.LockFlagValue)
					token := kvPair(t, key).ModifyIndex
					check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{TTL: time.Hour, LockDelay: 15 * time.Second}.Resolve())
					inst = holdersvc.Service{Name: service, Port: 8080}.Instance(
						holdersvc.Identity{Lock: "web", Session: session, FencingToken: token, Node: agent.NodeName, PID: 1}, check, "", 0)
					if err := store.New(client).RegisterHolderService(ctx, inst); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = store.New(client).DeregisterHolderService(ctx, inst.ID) })
					if err := store.New(client).PassHolderCheck(ctx, inst.CheckID); err != nil {
						t.Fatal(err)
					}
					waitCatalogPassing(t, inst.CheckID)
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					services(knownvalue.ListExact([]knownvalue.Check{knownvalue.ObjectExact(map[string]knownvalue.Check{
						"id":            stringIs(func() string { return inst.ID }),
						"name":          knownvalue.StringExact(service),
						"session":       stringIs(func() string { return session }),
						"node":          knownvalue.StringExact(agent.NodeName),
						"address":       knownvalue.StringExact("127.0.0.1"),
						"port":          knownvalue.Int64Exact(8080),
						"status":        knownvalue.StringExact("passing"),
						"fencing_token": knownvalue.NotNull(),
					})})),
				},
			},
			{
				// The holder deregisters, then releases (the runner's order).
				PreConfig: func() {
					if err := store.New(client).DeregisterHolderService(ctx, inst.ID); err != nil {
						t.Fatal(err)
					}
					if _, err := agent.Client().Session().Destroy(session, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config:            cfg,
				ConfigStateChecks: []statecheck.StateCheck{services(knownvalue.ListExact(nil))},
			},
		},
	})
}
