package runner

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Agentless holder service on the dev agent: runners name a catalog node of
// their own (-node, no agent runs it) with a TTL-only profile, as the
// agentless guide sets them up; the holder's instance is registered in the
// catalog on that node (lockmodel.HolderViaCatalog), where nobody runs its
// check. A killed holder's case runs beside the agent's, in one table:
// TestHolderService_killedHolderOutOfDNSBeforeTheNextStarts/catalog.

// agentlessHolder registers a runners' node, declares a lock with
// holder_service and a TTL-only profile (ttl 10s, lock_delay 1s), and mints
// the worker rules for it: session write on the node, service write on the
// name (no node write: consul.TestHolderServiceCatalog_needsServiceWriteOnly)
// and node read on the node (to find former holders' instances there).
func agentlessHolder(t *testing.T) (l lockmodel.Lock, service, node, token string) {
	t.Helper()
	node = fmt.Sprintf("runners-%d", nameCounter.Add(1)) // a DNS label: SRV answers name the node
	if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	service = fmt.Sprintf("hs%d-%d", nameCounter.Add(1), time.Now().UnixNano()%1e6)
	prefix := "t/" + uniqueName(t, "lock")
	p := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: time.Second, NodeChecks: []string{}}
	l = declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix,
		HolderService: &lockmodel.HolderService{Name: service}}, p)
	rules := lockmodel.RenderRules(lockmodel.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{node}, HolderServices: []string{service}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/") // node read: rendered with holder_services
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l, service, node, tok.SecretID
}

// TestHolderService_catalogRegistrationNeedsANode: -service-registration
// catalog without -node is a usage error naming the flag, the value and
// what is allowed (exit 2 before any request).
func TestHolderService_catalogRegistrationNeedsANode(t *testing.T) {
	p := startRun(t, "A", agent.ManagementToken, []string{"-lock", "x", "-service-registration", "catalog"}, "-sleep", "1s")
	if code := p.wait(10 * time.Second); code != ExitUsage {
		t.Fatalf("exit code %d, want %d", code, ExitUsage)
	}
	if out := p.out.String(); !strings.Contains(out, `-service-registration: "catalog" is not allowed; catalog only with -node NAME`) {
		t.Fatalf("output:\n%s", out)
	}
}

// TestHolderService_agentlessWithoutNodeReadSaysSoAndRuns: a worker token
// without node read on the runners' node cannot see a former holder's
// instance there (Consul leaves it out of the answer): the runner logs the
// missing permission instead of taking the node for empty, and runs its
// command under the lock.
func TestHolderService_agentlessWithoutNodeReadSaysSoAndRuns(t *testing.T) {
	l, service, node, _ := agentlessHolder(t)
	// The worker rules without holder_services (which render node read on
	// the session node prefixes) and the service write by hand.
	rules := lockmodel.RenderRules(lockmodel.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{node}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\nservice %q { policy = \"write\" }\n", lockmodel.DefaultRegistryPrefix+"/", service)
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	former := lockmodel.Holder{Lock: l.Name, Session: "00000000-0000-4000-8000-000000000001", Node: node}
	in := lockmodel.HolderService{Name: service}.Instance(former, lockmodel.NewHolderCheck(lockmodel.SessionProfile{}), "", 20021)
	if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: node, SkipNodeUpdate: true,
		Service: &api.AgentService{ID: in.ID, Service: in.Name, Port: in.Port, Meta: in.Meta}}, nil); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", tok.SecretID, []string{"-lock", l.Name, "-node", node, "-service-port", "20022"}, childArgs(record, "A")...)
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("A exit code %d:\n%s", code, a.out.String())
	}
	out := a.out.String()
	if !strings.Contains(out, "cannot list former holders' instances") || !strings.Contains(out, `lacks \"node:read\" on \"`+node+`\"`) {
		t.Fatalf("A did not name the missing node read:\n%s", out)
	}
	if len(readRuns(t, record)) != 1 {
		t.Fatalf("the command did not run under the lock:\n%s", out)
	}
}
