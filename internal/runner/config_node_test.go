package runner

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestParseArgs_nodeMustBeADNSLabelForTheCatalog: a -node that will carry
// the holder's instance in the catalog (the lock declares holder_service,
// -service-registration auto or catalog) must be a DNS label, since SRV
// answers for the holder service name it. Only the declaration says
// whether there is a holder service, so the command line takes any -node
// (a plain lock's session may be on any node), and the runner refuses it
// in setup (exit 125) naming the flag, the value and the allowed form,
// before it writes anything to Consul; the same -node with a plain lock
// runs the command.
func TestParseArgs_nodeMustBeADNSLabelForTheCatalog(t *testing.T) {
	long := strings.Repeat("n", 75)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"a DNS label", []string{"-node", "consul-lock-runners"}},
		{"upper case", []string{"-node", "Runners-1"}},
		{"63 characters", []string{"-node", strings.Repeat("n", 63)}},
		{"75 characters", []string{"-node", long}},
		{"a dot", []string{"-node", "runners.example"}},
		{"an underscore", []string{"-node", "lock_runners"}},
		{"catalog named", []string{"-node", long, "-service-registration", "catalog"}},
		{"agent registration", []string{"-node", long, "-service-registration", "agent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-lock", "job"}, tc.args...)
			args = append(args, "--", "true")
			if _, err := parseArgs(args, io.Discard); err != nil {
				t.Fatalf("parseArgs: %v (a plain lock takes any -node)", err)
			}
		})
	}

	// On the agent: a node whose name is no DNS label, in the catalog.
	node := fmt.Sprintf("n%d-", nameCounter.Add(1))
	node += strings.Repeat("x", 75-len(node))
	if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil) })
	prefix := "t/" + uniqueName(t, "lock")
	service := fmt.Sprintf("hn%d", nameCounter.Add(1))
	// TTL only: the catalog node has no serfHealth.
	p := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: time.Second, NodeChecks: []string{}}
	withService := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix + "/holder",
		HolderService: &holdersvc.Service{Name: service}}, p)
	plain := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix + "/plain", SessionDefaults: p.Name}, nil)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{withService.Key, plain.Key}, SessionNodePrefixes: []string{node}, HolderServices: []string{service}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record")

	refused := startRun(t, "holder_service", tok.SecretID, []string{"-lock", withService.Name, "-node", node}, childArgs(record, "holder_service")...)
	if code := refused.wait(time.Minute); code != ExitSetup {
		t.Fatalf("holder_service lock, -node of 75 characters: exit %d, want %d (setup):\n%s", code, ExitSetup, refused.out.String())
	}
	out := refused.out.String()
	for _, want := range []string{`-node: \"` + node + `\" is not allowed`, "1 to 63 letters, digits or '-'", "DNS label", // quoted by the log
		"-service-registration agent puts the instance on the agent's node instead", "declares holder_service"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if runs := readRuns(t, record); len(runs) != 0 {
		t.Fatalf("the command ran %d times under a refused -node", len(runs))
	}
	// Nothing was written: no session on the node, the key not held, no
	// instance in the catalog.
	sessions, _, err := agent.Client().Session().Node(node, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := agent.Client().KV().Get(withService.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	instances, _, err := agent.Client().Catalog().Service(service, "", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 0 || pair == nil || pair.Session != "" || pair.LockIndex != 0 || len(instances) != 0 {
		t.Fatalf("after the refusal: %d sessions on the node, key %+v, %d instances; want none, the key untouched, none", len(sessions), pair, len(instances))
	}

	ran := startRun(t, "plain", tok.SecretID, []string{"-lock", plain.Name, "-node", node}, childArgs(record, "plain")...)
	if code := ran.wait(time.Minute); code != 0 {
		t.Fatalf("plain lock, -node of 75 characters: exit %d, want 0 (the command ran):\n%s", code, ran.out.String())
	}
	if runs := readRuns(t, record); len(runs) != 1 || runs[0].tag != "plain" {
		t.Fatalf("executions %+v; want the plain lock's one", runs)
	}
}

// TestHolderNode_srvAnswersNeedADNSLabelNode shows on the agent's DNS
// interface why -node is checked: an instance registered in the catalog
// on a node of 63 characters (the longest DNS label) is answered by SRV,
// one on a node of 75 characters is not (the query fails), although the
// catalog holds both.
func TestHolderNode_srvAnswersNeedADNSLabelNode(t *testing.T) {
	r := dnsResolver(t)
	for _, tc := range []struct {
		length int
		answer bool
	}{{63, true}, {75, false}} {
		node := fmt.Sprintf("n%d-", nameCounter.Add(1))
		node += strings.Repeat("x", tc.length-len(node))
		service := fmt.Sprintf("hn%d-%d", nameCounter.Add(1), tc.length)
		if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1",
			Service: &api.AgentService{ID: service, Service: service, Port: 20000 + tc.length}}, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = agent.Client().Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil) })
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ports, err := lookupPorts(ctx, r, service)
		cancel()
		t.Logf("node of %d characters: SRV %s.service.consul: ports %v, error %v", tc.length, service, ports, err)
		if got := err == nil && len(ports) == 1 && ports[0] == 20000+tc.length; got != tc.answer {
			t.Errorf("node of %d characters: SRV answered %v (ports %v, error %v), want answered %v", tc.length, got, ports, err, tc.answer)
		}
		if holdersvc.ValidateNode("-node", node) == nil != tc.answer {
			t.Errorf("ValidateHolderNode(%d characters) disagrees with DNS", tc.length)
		}
	}
}
