package consul

import (
	"context"
	"errors"
	"net/http"
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
