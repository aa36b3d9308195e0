package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// TestRepair_removesAgentlessHoldersInstancesNobodyTookOver: agentless
// holders of a lock with holder_service registered their instances in the
// catalog, on two runners' nodes; one holder's session ended (destroyed,
// as a killed holder's expires) and nobody waits to take over, so no next
// holder removes its instance, which stays passing in DNS.
//   - A repair controller with the shipped repair rules lacks the grant: it
//     says so once, naming the permission, and the instance stays.
//   - With holder-services.hcl added (service write on the name, node read
//     on the runners' nodes) its first look removes the ended session's
//     instance, on the other node too, and keeps the live holder's.
//   - The live holder's session then ends as well: the controller sees the
//     holder leave and removes that instance.
func TestRepair_removesAgentlessHoldersInstancesNobodyTookOver(t *testing.T) {
	h := newHarness(t, agent)
	ctx := context.Background()
	id := testenv.NewUUID()[:8]
	service, nodeA, nodeB := "hs-"+id, "worker-"+id+"-a", "worker-"+id+"-b"
	for _, n := range []string{nodeA, nodeB} {
		if _, err := h.api.Catalog().Register(&api.CatalogRegistration{Node: n, Address: "127.0.0.1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	l := h.declareLock(lockmodel.Lock{Name: h.name("hs"), Prefix: h.prefix + "/hs", HolderService: &holdersvc.Service{Name: service}})
	mgmt := h.clientAt(h.a.Addr, h.a.ManagementToken, 1)
	session := func(node string) string {
		s, _, err := h.api.Session().CreateNoChecks(&api.SessionEntry{Node: node, TTL: "30s", LockDelay: time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = h.api.Session().Destroy(s, nil) })
		return s
	}
	register := func(node, s string) string {
		in := holdersvc.Service{Name: service}.Instance(holdersvc.Identity{Lock: l.Name, Session: s, Node: node}, lockmodel.NewHolderCheck(lockmodel.SessionProfile{}.Resolve()), "", 0)
		if err := store.New(mgmt).RegisterHolderServiceCatalog(ctx, node, in); err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	present := func() map[string]bool {
		entries, _, err := h.api.Health().Service(service, "", true, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, e := range entries {
			ids[e.Service.ID] = true
		}
		return ids
	}
	former, holder := session(nodeA), session(nodeB)
	h.acquire(l.Key, former)
	idFormer, idHolder := register(nodeA, former), ""
	if _, err := h.api.Session().Destroy(former, nil); err != nil { // the key is released
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error { // lock_delay 1ms
		ok, _, err := h.api.KV().Acquire(&api.KVPair{Key: l.Key, Session: holder, Flags: lockmodel.LockFlagValue}, nil)
		if err != nil || !ok {
			return fmt.Errorf("acquire: %v %v", ok, err)
		}
		return nil
	})
	idHolder = register(nodeB, holder)

	rules := strings.ReplaceAll(shippedRules(t, "repair.hcl"), `"consul-lock/`, `"`+h.registry+`/`)
	tok, err := agent.MintToken(h.name("repair"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := h.start(compliance.ModeRepair, tok.SecretID)
	eventually(t, 10*time.Second, func() error {
		if len(c.logs.lines(`cannot remove former holders' instances`, l.Name, `:read`)) == 0 {
			return fmt.Errorf("no log line naming the missing grant")
		}
		return nil
	})
	c.stop()
	if ids := present(); !ids[idFormer] || !ids[idHolder] {
		t.Fatalf("without the grant: instances %v, want both left", ids)
	}

	grant := strings.NewReplacer(`"nightly-report"`, `"`+service+`"`, `"worker-"`, `"worker-`+id+`-"`).Replace(shippedRules(t, "holder-services.hcl"))
	tok, err = agent.MintToken(h.name("repair-hs"), rules+grant, 0)
	if err != nil {
		t.Fatal(err)
	}
	c = h.start(compliance.ModeRepair, tok.SecretID)
	eventually(t, 10*time.Second, func() error {
		if ids := present(); ids[idFormer] || !ids[idHolder] {
			return fmt.Errorf("instances %v, want only the holder's %s", ids, idHolder)
		}
		return nil
	})
	if _, err := h.api.Session().Destroy(holder, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if ids := present(); len(ids) != 0 {
			return fmt.Errorf("instances %v after the last holder's session ended", ids)
		}
		return nil
	})
	if n := len(c.logs.lines(`former holder's instance deregistered`)); n != 2 {
		t.Fatalf("%d deregistrations logged, want 2:\n%s", n, c.logs.String())
	}
	t.Log(strings.Join(c.logs.lines(`former holder's instance deregistered`), "\n"))
}
