package store

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

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
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
	in := aclrules.RulesInput{LockKeys: []string{"t/holder-acl/.lock"}, SessionNodePrefixes: []string{agent.NodeName}}
	without := aclrules.RenderRules(in)
	in.HolderServices = []string{name}
	with := aclrules.RenderRules(in)
	tokWith, err := agent.MintToken("holder-acl-with-"+testenv.NewUUID()[:8], with, 0)
	if err != nil {
		t.Fatal(err)
	}
	tokWithout, err := agent.MintToken("holder-acl-without-"+testenv.NewUUID()[:8], without, 0)
	if err != nil {
		t.Fatal(err)
	}
	worker, denied := newClient(t, tokWith.SecretID), newClient(t, tokWithout.SecretID)

	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, RenewEvery: time.Second}.Resolve())
	h := holdersvc.Identity{Lock: "holder-acl", Session: testenv.NewUUID(), FencingToken: 42, Node: agent.NodeName, PID: 1}
	inst := holdersvc.Service{Name: name, Port: 8080}.Instance(h, check, "", 0)

	wantForbidden := func(what string, err error) {
		t.Helper()
		var e *consul.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusForbidden || e.Kind != consul.KindPermissionDenied {
			t.Fatalf("%s: %v, want HTTP 403 permission denied", what, err)
		}
	}
	wantForbidden("register without holder_services", denied.RegisterHolderService(ctx, inst))
	other := holdersvc.Service{Name: name + "-other"}.Instance(h, check, "", 0)
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
	base := aclrules.RulesInput{LockKeys: []string{"t/holder-cat/.lock"}, SessionNodePrefixes: []string{node}}
	withService := base
	withService.HolderServices = []string{name}
	nodeWrite := fmt.Sprintf("node %q { policy = \"write\" }\n", node)
	mint := func(what, rules string) Store {
		tok, err := agent.MintToken("holder-cat-"+what+"-"+testenv.NewUUID()[:8], rules, 0)
		if err != nil {
			t.Fatal(err)
		}
		return newClient(t, tok.SecretID)
	}
	worker := mint("service", aclrules.RenderRules(withService))
	nodeOnly := mint("node", aclrules.RenderRules(base)+nodeWrite)

	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, NodeChecks: []string{}}.Resolve())
	h := holdersvc.Identity{Lock: "holder-cat", Session: testenv.NewUUID(), FencingToken: 42, Node: node, PID: 1}
	inst := holdersvc.Service{Name: name, Port: 8080}.Instance(h, check, "", 0)
	wantForbidden := func(what string, err error) {
		t.Helper()
		var e *consul.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusForbidden || e.Kind != consul.KindPermissionDenied {
			t.Fatalf("%s: %v, want HTTP 403 permission denied", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	wantForbidden("register with node write alone", nodeOnly.RegisterHolderServiceCatalog(ctx, node, inst))
	other := holdersvc.Service{Name: name + "-other"}.Instance(h, check, "", 0)
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
	if stale, err := worker.StaleHolderInstances(ctx, name, "holder-cat", 1, testenv.NewUUID()); err != nil || len(stale) != 1 || stale[0] != (InstanceRef{node, inst.ID}) {
		t.Fatalf("worker lists the node's instances: %v, %v; want [%s on %s]", stale, err, inst.ID, node)
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
	wantForbidden("deregister without holder_services", mint("none", aclrules.RenderRules(base)).DeregisterHolderServiceCatalog(ctx, node, inst.ID))
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

// TestStaleHolderInstances_reapsFormerHoldersOnly: on every runners' node
// (two catalog nodes, runners-<id>-a and -b), a mutex holder finds every
// other session's instance of its lock stale; a semaphore holder only
// those whose session has ended. Another lock's instance of the same
// service, a critical instance (out of DNS; an agent's to remove) and the
// holder's own are never stale. Then the ACLs, with real requests:
//   - the worker rules rendered with holder_services, session node prefix
//     "runners-<id>-" (both nodes), list both nodes' stale instances and
//     deregister the one on the other node with service write alone
//     (Consul's vetDeregisterWithACL: no node write);
//   - session node prefix runners-<id>-a only: Consul leaves node b's
//     instances out; the listing returns node a's with a permission-denied
//     error naming node:read, not an empty node b;
//   - service write without node read: nothing listed, the same error;
//   - the worker rules without holder_services: deregistration is HTTP 403.
func TestStaleHolderInstances_reapsFormerHoldersOnly(t *testing.T) {
	ctx := context.Background()
	id := testenv.NewUUID()[:8]
	name, nodeA, nodeB := "holder-stale-"+id, "runners-"+id+"-a", "runners-"+id+"-b"
	mgmt := newClient(t, agent.ManagementToken)
	for _, n := range []string{nodeA, nodeB} {
		if _, err := mgmt.Catalog().Register(&api.CatalogRegistration{Node: n, Address: "127.0.0.1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	live, _, err := mgmt.Session().CreateNoChecks(&api.SessionEntry{Node: nodeA, TTL: "30s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = mgmt.Session().Destroy(live, nil) })
	mine, dead, deadB, critical := testenv.NewUUID(), testenv.NewUUID(), testenv.NewUUID(), testenv.NewUUID()
	check := lockmodel.NewHolderCheck(lockmodel.SessionProfile{}.Resolve())
	spec := holdersvc.Service{Name: name}
	register := func(node, lock, session string) InstanceRef {
		in := spec.Instance(holdersvc.Identity{Lock: lock, Session: session, Node: node}, check, "", 0)
		if lock == "other" {
			in.ID += "-other" // another lock declaring the same service name
		}
		if err := mgmt.RegisterHolderServiceCatalog(ctx, node, in); err != nil {
			t.Fatal(err)
		}
		return InstanceRef{node, in.ID}
	}
	idMine, idLive, idDead, idDeadB := register(nodeA, "job", mine), register(nodeA, "job", live), register(nodeA, "job", dead), register(nodeB, "job", deadB)
	register(nodeB, "other", dead)
	crit := register(nodeB, "job", critical)
	if _, err := mgmt.Catalog().Register(&api.CatalogRegistration{Node: nodeB, SkipNodeUpdate: true, Check: &api.AgentCheck{
		Node: nodeB, CheckID: holdersvc.CheckID(crit.ID), Name: "critical", Status: api.HealthCritical, ServiceID: crit.ID}}, nil); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		limit int
		want  []InstanceRef
	}{
		{1, []InstanceRef{idDead, idLive, idDeadB}},
		{3, []InstanceRef{idDead, idDeadB}},
	} {
		sortRefs(c.want)
		got, err := mgmt.StaleHolderInstances(ctx, name, "job", c.limit, mine)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("limit %d: stale %v, want %v (mine %s)", c.limit, got, c.want, idMine)
		}
	}

	mint := func(rules string) Store {
		tok, err := agent.MintToken("holder-stale-"+testenv.NewUUID()[:8], rules, 0)
		if err != nil {
			t.Fatal(err)
		}
		return newClient(t, tok.SecretID)
	}
	rules := func(nodePrefix string, holder bool) string {
		in := aclrules.RulesInput{LockKeys: []string{"t/holder-stale/.lock"}, SessionNodePrefixes: []string{nodePrefix}}
		if holder {
			in.HolderServices = []string{name}
		}
		return aclrules.RenderRules(in)
	}
	wantDenied := func(what string, got []InstanceRef, err error, want []InstanceRef) {
		t.Helper()
		var e *consul.Error
		if !errors.As(err, &e) || e.Kind != consul.KindPermissionDenied || e.Permission != "node:read" || fmt.Sprint(got) != fmt.Sprint(sortRefs(want)) {
			t.Fatalf("%s: %v, %v; want %v and permission denied naming node:read", what, got, err, want)
		}
		t.Logf("%s: %v", what, err)
	}
	got, err := mint(rules(nodeA, true)).StaleHolderInstances(ctx, name, "job", 1, mine)
	wantDenied("node read on node a only", got, err, []InstanceRef{idDead, idLive})
	got, err = mint(rules(nodeA, false)+fmt.Sprintf("service %q { policy = \"write\" }\n", name)).StaleHolderInstances(ctx, name, "job", 1, mine)
	wantDenied("service write without node read", got, err, nil)

	worker := mint(rules("runners-"+id+"-", true))
	got, err = worker.StaleHolderInstances(ctx, name, "job", 1, mine)
	if err != nil || len(got) != 3 {
		t.Fatalf("the worker rules on both nodes: %v, %v; want the three stale instances", got, err)
	}
	var e *consul.Error
	if err := mint(rules("runners-"+id+"-", false)).DeregisterHolderServiceCatalog(ctx, nodeB, idDeadB.ID); !errors.As(err, &e) || e.StatusCode != http.StatusForbidden {
		t.Fatalf("deregister on the other node without holder_services: %v, want HTTP 403", err)
	}
	if err := worker.DeregisterHolderServiceCatalog(ctx, nodeB, idDeadB.ID); err != nil {
		t.Fatalf("deregister on the other node with the worker rules (service write, no node write): %v", err)
	}
	if got, err := mgmt.StaleHolderInstances(ctx, name, "job", 3, mine); err != nil || fmt.Sprint(got) != fmt.Sprint([]InstanceRef{idDead}) {
		t.Fatalf("after the deregistration on node b: %v, %v", got, err)
	}
}

// sortRefs sorts refs as StaleHolderInstances does, by node then ID.
func sortRefs(refs []InstanceRef) []InstanceRef {
	sort.Slice(refs, func(i, j int) bool {
		return refs[i].Node < refs[j].Node || refs[i].Node == refs[j].Node && refs[i].ID < refs[j].ID
	})
	return refs
}
