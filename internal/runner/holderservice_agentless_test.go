package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Agentless holder service on the dev agent: runners name a catalog node of
// their own (-node, no agent runs it) with a TTL-only profile, as the
// agentless guide sets them up; the holder's instance is registered in the
// catalog on that node (holdersvc.ViaCatalog), where nobody runs its
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
		HolderService: &holdersvc.Service{Name: service}}, p)
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{node}, HolderServices: []string{service}})
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
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{node}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\nservice %q { policy = \"write\" }\n", lockmodel.DefaultRegistryPrefix+"/", service)
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	former := holdersvc.Identity{Lock: l.Name, Session: "00000000-0000-4000-8000-000000000001", Node: node}
	in := holdersvc.Service{Name: service}.Instance(former, lockmodel.NewHolderCheck(lockmodel.SessionProfile{}.Resolve()), "", 20021)
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
	if !strings.Contains(out, "cannot list every former holder's instance") || !strings.Contains(out, `lacks \"node:read\" on \"a node with an instance of lock `+l.Name+`\"`) {
		t.Fatalf("A did not name the missing node read:\n%s", out)
	}
	if len(readRuns(t, record)) != 1 {
		t.Fatalf("the command did not run under the lock:\n%s", out)
	}
}

// TestHolderService_agentlessFormerHolderOnAnotherNodeLeavesDNS: agentless
// runners on two catalog nodes of their own (-node runners-<n>-a and -b,
// one worker policy whose session node prefix covers both, as one
// consullock_acl_policy renders it). A holds on node a; its runner is
// frozen (SIGSTOP: it cannot deregister, as if killed or cut off) and its
// session destroyed, so its instance stays passing in the catalog; B, on
// node b, acquires lock_delay later and deregisters A's instance on node
// a (a consistent health query by the lock's meta, then a catalog
// deregistration that needs service write only) before its command
// starts: no DNS answer to a query sent after that names A, and no
// instance is left once B exits.
func TestHolderService_agentlessFormerHolderOnAnotherNodeLeavesDNS(t *testing.T) {
	l, service, _, _ := agentlessHolder(t)
	pfx := fmt.Sprintf("runners-%d-", nameCounter.Add(1))
	nodeA, nodeB := pfx+"a", pfx+"b"
	for _, n := range []string{nodeA, nodeB} {
		if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: n, Address: "127.0.0.1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{pfx}, HolderServices: []string{service}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", tok.SecretID, append(holderArgs(l, 20031), "-node", nodeA), childArgs(record, "A", "-sleep", "2m")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	runA := readRuns(t, record)[0]
	b := startRun(t, "B", tok.SecretID, append(holderArgs(l, 20032), "-node", nodeB), childArgs(record, "B", "-sleep", "1s")...)
	waitOutput(t, b, "waiting for the lock")
	stop := sampleDNS(t, service)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, a.cmd.Process.Pid)
	killed := time.Now()
	if _, err := agent.Client().Session().Destroy(runA.session, nil); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(60 * time.Second); code != 0 { // A stays frozen while B holds
		t.Fatalf("B exit code %d", code)
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = syscall.Kill(runA.pid, syscall.SIGKILL) // the orphaned command
	a.wait(10 * time.Second)
	samples := stop()
	runB := lastRun(t, record, "B")
	lastA := samples.LastWith(20031)
	if lastA.IsZero() {
		t.Fatalf("DNS never answered A in %d samples", len(samples))
	}
	out := b.out.String()
	reaped, started := strings.Index(out, "former holder's instance deregistered"), strings.Index(out, "command started")
	if reaped < 0 || reaped > started || !strings.Contains(out[reaped:started], "node="+nodeA) {
		t.Fatalf("B did not deregister A's instance on node %s before its command started:\n%s", nodeA, out)
	}
	if !lastA.Before(runB.start) {
		t.Fatalf("DNS answered killed holder A (node %s) to a query sent %s after B's command started", nodeA, lastA.Sub(runB.start))
	}
	left, _, err := agent.Client().Health().Service(service, "", false, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("instances left after B exited: %d (%s on %s)", len(left), left[0].Service.ID, left[0].Node.Node)
	}
	t.Logf("agentless runner on node a frozen, its session destroyed: DNS named A until %s after the destroy; B (node b) started its command %s after the destroy, %s after the last answer naming A; %d samples",
		lastA.Sub(killed).Round(time.Millisecond), runB.start.Sub(killed).Round(time.Millisecond), runB.start.Sub(lastA).Round(time.Millisecond), len(samples))
}

// waitStopped waits until process pid is stopped, every thread of it
// (state T in /proc/<pid>/task/*/stat): a loaded machine may deliver
// SIGSTOP late, and a runner still running acts on what the test does next
// (withdraws its own instance, judges a loss), which is not what the test
// is about.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		running := ""
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command name in parentheses.
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] != 'T' && b[i+2] != 't' {
				running = string(b)
			}
		}
		if running == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not stopped 5s after SIGSTOP: %s", pid, running)
		}
		time.Sleep(time.Millisecond)
	}
}
