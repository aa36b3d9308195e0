package runner

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestParseArgs_nodeMustBeADNSLabelForTheCatalog: a -node that will carry
// the holder's instance in the catalog (-service-registration auto or
// catalog) must be a DNS label, since SRV answers for the holder service
// name it: a longer name or one with other characters is a usage error
// (exit 2) naming the flag, the value and the allowed form. With
// -service-registration agent the instance is on the agent's node and
// -node only places the session.
func TestParseArgs_nodeMustBeADNSLabelForTheCatalog(t *testing.T) {
	long := strings.Repeat("n", 75)
	for _, tc := range []struct {
		name string
		args []string
		bad  string // "" when accepted
	}{
		{"a DNS label", []string{"-node", "consul-lock-runners"}, ""},
		{"upper case", []string{"-node", "Runners-1"}, ""},
		{"63 characters", []string{"-node", strings.Repeat("n", 63)}, ""},
		{"75 characters", []string{"-node", long}, long},
		{"a dot", []string{"-node", "runners.example"}, "runners.example"},
		{"an underscore", []string{"-node", "lock_runners"}, "lock_runners"},
		{"a leading dash", []string{"-node", "-runners"}, "-runners"},
		{"catalog named", []string{"-node", long, "-service-registration", "catalog"}, long},
		{"agent registration", []string{"-node", long, "-service-registration", "agent"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-lock", "job"}, tc.args...)
			args = append(args, "--", "true")
			var out bytes.Buffer
			if tc.bad == "" {
				if _, err := parseArgs(args, &out); err != nil {
					t.Fatalf("parseArgs: %v", err)
				}
				return
			}
			if code := mainWith(t.Context(), args, &out); code != ExitUsage {
				t.Fatalf("exit %d, want %d (usage):\n%s", code, ExitUsage, out.String())
			}
			for _, want := range []string{`-node: "` + tc.bad + `" is not allowed`, "1 to 63 letters, digits or '-'", "DNS label"} {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
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
		if lockmodel.ValidateHolderNode("-node", node) == nil != tc.answer {
			t.Errorf("ValidateHolderNode(%d characters) disagrees with DNS", tc.length)
		}
	}
}
