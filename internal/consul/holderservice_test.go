package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestHolderService_workerRulesAllowExactlyTheirService: the worker rules
// rendered with holder_services (service "<name>" write and nothing else
// about services) let a worker register its instance on the agent, pass
// its TTL check, see it synced to the catalog and deregister it; the same
// rules without holder_services get HTTP 403, and the worker cannot
// register another service name (403).
func TestHolderService_workerRulesAllowExactlyTheirService(t *testing.T) {
	ctx := context.Background()
	name := "holder-acl-" + testenv.NewUUID()[:8]
	in := lockmodel.RulesInput{LockKeys: []string{"t/holder-acl/.lock"}, SessionNodePrefixes: []string{agent.NodeName}}
	without := lockmodel.RenderRules(in)
	in.HolderServices = []string{name}
	with := lockmodel.RenderRules(in)
	tokWith, err := agent.MintToken("holder-acl-with-"+testenv.NewUUID()[:8], with, 0)
	if err != nil {
		t.Fatal(err)
	}
	tokWithout, err := agent.MintToken("holder-acl-without-"+testenv.NewUUID()[:8], without, 0)
	if err != nil {
		t.Fatal(err)
	}
	worker, denied := newClient(t, tokWith.SecretID), newClient(t, tokWithout.SecretID)

	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, RenewEvery: time.Second})
	h := lockmodel.Holder{Lock: "holder-acl", Session: testenv.NewUUID(), FencingToken: 42, Node: agent.NodeName, PID: 1}
	inst := lockmodel.HolderService{Name: name, Port: 8080}.Instance(h, check, "", 0)

	wantForbidden := func(what string, err error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusForbidden || e.Kind != KindPermissionDenied {
			t.Fatalf("%s: %v, want HTTP 403 permission denied", what, err)
		}
	}
	wantForbidden("register without holder_services", denied.RegisterHolderService(ctx, inst))
	other := lockmodel.HolderService{Name: name + "-other"}.Instance(h, check, "", 0)
	wantForbidden("register another service name", worker.RegisterHolderService(ctx, other))

	if err := worker.RegisterHolderService(ctx, inst); err != nil {
		t.Fatalf("register with service write: %v", err)
	}
	if err := worker.PassHolderCheck(ctx, inst.CheckID); err != nil {
		t.Fatalf("pass the check with service write: %v", err)
	}
	wantForbidden("pass the check without holder_services", denied.PassHolderCheck(ctx, inst.CheckID))

	// The agent syncs the instance, passing, to the catalog.
	mgmt := newClient(t, agent.ManagementToken)
	deadline := time.Now().Add(10 * time.Second)
	for {
		views, err := mgmt.ReadHolderServices(ctx, name, []string{h.Session}, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(views) == 1 && views[0].Status == api.HealthPassing {
			v := views[0]
			if v.ID != inst.ID || v.Port != 8080 || v.FencingToken != 42 || v.Node != agent.NodeName || v.Address == "" {
				t.Fatalf("catalog view %+v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance not passing in the catalog: %+v", views)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantForbidden("deregister without holder_services", denied.DeregisterHolderService(ctx, inst.ID))
	if err := worker.DeregisterHolderService(ctx, inst.ID); err != nil {
		t.Fatalf("deregister with service write: %v", err)
	}
	if err := worker.DeregisterHolderService(ctx, inst.ID); err != nil {
		t.Fatalf("deregistering an instance already gone: %v", err)
	}
}

// TestHolderServiceCatalog_needsServiceWriteOnly: an agentless holder
// registers its instance on the runners' catalog node (no agent runs it)
// without updating the node (SkipNodeUpdate): the worker rules rendered
// with holder_services (service "<name>" write, node_prefix read on the
// session node prefixes) are enough, and no node write is needed: they
// list the node's instances (another holder's reap) and get HTTP 403 for
// writing the node; without them, node "<node>" write alone gets HTTP 403,
// as does another service name. The instance is passing in the catalog
// (nobody runs its check) until deregistered, which needs the same rule
// (403 without it).
func TestHolderServiceCatalog_needsServiceWriteOnly(t *testing.T) {
	ctx := context.Background()
	name, node := "holder-cat-"+testenv.NewUUID()[:8], "runners-"+testenv.NewUUID()[:8]
	mgmt := newClient(t, agent.ManagementToken)
	if _, err := mgmt.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	base := lockmodel.RulesInput{LockKeys: []string{"t/holder-cat/.lock"}, SessionNodePrefixes: []string{node}}
	withService := base
	withService.HolderServices = []string{name}
	nodeWrite := fmt.Sprintf("node %q { policy = \"write\" }\n", node)
	mint := func(what, rules string) *Client {
		tok, err := agent.MintToken("holder-cat-"+what+"-"+testenv.NewUUID()[:8], rules, 0)
		if err != nil {
			t.Fatal(err)
		}
		return newClient(t, tok.SecretID)
	}
	worker := mint("service", lockmodel.RenderRules(withService))
	nodeOnly := mint("node", lockmodel.RenderRules(base)+nodeWrite)

	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, NodeChecks: []string{}})
	h := lockmodel.Holder{Lock: "holder-cat", Session: testenv.NewUUID(), FencingToken: 42, Node: node, PID: 1}
	inst := lockmodel.HolderService{Name: name, Port: 8080}.Instance(h, check, "", 0)
	wantForbidden := func(what string, err error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusForbidden || e.Kind != KindPermissionDenied {
			t.Fatalf("%s: %v, want HTTP 403 permission denied", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	wantForbidden("register with node write alone", nodeOnly.RegisterHolderServiceCatalog(ctx, node, inst))
	other := lockmodel.HolderService{Name: name + "-other"}.Instance(h, check, "", 0)
	wantForbidden("register another service name", worker.RegisterHolderServiceCatalog(ctx, node, other))
	if err := worker.RegisterHolderServiceCatalog(ctx, node, inst); err != nil {
		t.Fatalf("register with the worker rules (service write): %v", err)
	}
	// The worker rules read the node (to list former holders' instances)
	// but never write it: updating the node's address is refused.
	if _, err := worker.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.2"}, nil); err == nil ||
		!strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "node:write") {
		t.Fatalf("node write with the worker rules: %v, want HTTP 403 lacking node:write", err)
	}
	if stale, err := worker.StaleHolderInstances(ctx, name, node, "holder-cat", 1, testenv.NewUUID()); err != nil || len(stale) != 1 || stale[0] != inst.ID {
		t.Fatalf("worker lists the node's instances: %v, %v; want [%s]", stale, err, inst.ID)
	}
	views, err := mgmt.ReadHolderServices(ctx, name, []string{h.Session}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 1 || views[0].Status != api.HealthPassing || views[0].Node != node || views[0].Port != 8080 || views[0].FencingToken != 42 {
		t.Fatalf("catalog view %+v, want one passing instance on %s with port 8080 and token 42", views, node)
	}
	// Node write alone may deregister what is on the node (Consul's rule);
	// the worker rules without holder_services may not.
	wantForbidden("deregister without holder_services", mint("none", lockmodel.RenderRules(base)).DeregisterHolderServiceCatalog(ctx, node, inst.ID))
	if err := worker.DeregisterHolderServiceCatalog(ctx, node, inst.ID); err != nil {
		t.Fatalf("deregister with the worker rules: %v", err)
	}
	if err := worker.DeregisterHolderServiceCatalog(ctx, node, inst.ID); err != nil {
		t.Fatalf("deregistering an instance already gone: %v", err)
	}
	if views, err := mgmt.ReadHolderServices(ctx, name, []string{h.Session}, true); err != nil || len(views) != 0 {
		t.Fatalf("after the deregistration: %+v, %v", views, err)
	}
}

// TestStaleHolderInstances_reapsFormerHoldersOnly: on the runners' node,
// a mutex holder finds every other session's instance of its lock stale;
// a semaphore holder only those whose session has ended. Another lock's
// instance of the same service, and the holder's own, are never stale.
func TestStaleHolderInstances_reapsFormerHoldersOnly(t *testing.T) {
	ctx := context.Background()
	name, node := "holder-stale-"+testenv.NewUUID()[:8], "runners-"+testenv.NewUUID()[:8]
	mgmt := newClient(t, agent.ManagementToken)
	if _, err := mgmt.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	live, _, err := mgmt.Session().CreateNoChecks(&api.SessionEntry{Node: node, TTL: "30s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = mgmt.Session().Destroy(live, nil) })
	mine, dead := testenv.NewUUID(), testenv.NewUUID()
	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{})
	spec := lockmodel.HolderService{Name: name}
	register := func(lock, session string) string {
		in := spec.Instance(lockmodel.Holder{Lock: lock, Session: session, Node: node}, check, "", 0)
		if lock == "other" {
			in.ID += "-other" // another lock declaring the same service name
		}
		if err := mgmt.RegisterHolderServiceCatalog(ctx, node, in); err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	idMine, idLive, idDead := register("job", mine), register("job", live), register("job", dead)
	register("other", dead)

	// Service write without node read on the node: Consul leaves the node's
	// instances out of the answer; that is refused, not taken for an empty
	// node. The worker rules rendered with holder_services grant node read
	// on the session node prefixes (the runners' -node), and the worker sees
	// them.
	base := lockmodel.RulesInput{LockKeys: []string{"t/holder-stale/.lock"}, SessionNodePrefixes: []string{node}}
	serviceOnly := lockmodel.RenderRules(base) + fmt.Sprintf("service %q { policy = \"write\" }\n", name)
	withHolder := base
	withHolder.HolderServices = []string{name}
	for _, c := range []struct {
		what, rules string
		denied      bool
	}{
		{"service write without node read", serviceOnly, true},
		{"the worker rules rendered with holder_services", lockmodel.RenderRules(withHolder), false},
	} {
		tok, err := agent.MintToken("holder-stale-"+testenv.NewUUID()[:8], c.rules, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := newClient(t, tok.SecretID).StaleHolderInstances(ctx, name, node, "job", 1, mine)
		var e *Error
		switch {
		case c.denied && (!errors.As(err, &e) || e.Kind != KindPermissionDenied || e.Permission != "node:read" || e.Resource != node):
			t.Fatalf("%s: %v, %v; want permission denied naming node:read on %s", c.what, got, err, node)
		case c.denied:
			t.Logf("%s: %v", c.what, err)
		case err != nil || len(got) != 2:
			t.Fatalf("%s: %v, %v; want the two stale instances", c.what, got, err)
		}
	}
	for _, c := range []struct {
		limit int
		want  []string
	}{
		{1, sortedIDs(idLive, idDead)},
		{3, []string{idDead}},
	} {
		got, err := mgmt.StaleHolderInstances(ctx, name, node, "job", c.limit, mine)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("limit %d: stale %v, want %v (mine %s)", c.limit, got, c.want, idMine)
		}
	}
}

func sortedIDs(ids ...string) []string {
	sort.Strings(ids)
	return ids
}
