package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// TestStatusShowsTheHoldersService: for a lock with holder_service, each
// holder shows the instance it registered (ID, address, port, health) in
// -json and -lock NAME, also with the read-only rules -print-rules gives
// (which then grant service read on the name and node read); a lock
// without holder_service costs no request more.
func TestStatusShowsTheHoldersService(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.profile(strict)
	name := strings.NewReplacer("/", "-", "_", "-").Replace(policyName("hs"))
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	name = strings.Trim(strings.ToLower(name), "-")
	l := f.lock(lockmodel.Lock{Name: "web", SessionDefaults: "strict", HolderService: &holdersvc.Service{Name: name, Port: 8080}}, false)
	session := f.session("15s", "15s", "release")
	token := f.acquire(l, session, time.Now())

	client, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	inst := l.HolderService.Instance(holdersvc.Identity{Lock: "web", Session: session, FencingToken: token, Node: agent.NodeName, PID: 42},
		lockmodel.NewHolderCheck(strict.Resolve()), "", 0)
	if err := store.New(client).RegisterHolderService(ctx, inst); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.New(client).DeregisterHolderService(ctx, inst.ID) })
	if err := store.New(client).PassHolderCheck(ctx, inst.CheckID); err != nil {
		t.Fatal(err)
	}
	waitPassing(t, name)

	_, rep := f.report()
	h := lockByName(t, rep, "web").Holders
	want := holderInstance{ID: inst.ID, Name: name, Address: "127.0.0.1", Port: 8080, Status: api.HealthPassing}
	if len(h) != 1 || h[0].Service == nil || *h[0].Service != want {
		t.Fatalf("holders %+v, want one with service %+v", h, want)
	}
	if _, out, _ := f.run("-lock", "web"); !strings.Contains(out, "Service:") || !strings.Contains(out, inst.ID+" (127.0.0.1:8080, passing; "+name+".service.consul)") {
		t.Fatalf("status -lock web:\n%s", out)
	}

	_, rules, _ := f.run("-print-rules")
	if !strings.Contains(rules, `service "`+name+`" {`) || !strings.Contains(rules, `node_prefix "" {`) {
		t.Fatalf("-print-rules lacks service and node read:\n%s", rules)
	}
	ro, err := agent.MintToken(policyName("hs-ro"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", ro.SecretID)
	if _, rep := f.report(); lockByName(t, rep, "web").Holders[0].Service == nil {
		t.Fatalf("with -print-rules' token the holder's service is not shown")
	}
}

func waitPassing(t *testing.T, service string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		entries, _, err := agent.Client().Health().Service(service, "", true, &api.QueryOptions{RequireConsistent: true})
		if err == nil && len(entries) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not passing in the catalog: %v", service, err)
		}
	}
}
