package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Agentless runners (docs/guides/agentless.md), driven through `consullock
// run` itself on the shared cluster: no client agent, each runner's
// CONSUL_HTTP_ADDR is a server (worker wN talks to server-N), the guide's
// TTL-only profile (ttl 15s, lock_delay 15s, node_checks = []), -grace 5s,
// and sessions on a node of their own registered in the catalog (-node
// consul-lock-runners). The stop rule the guide states: the runner sends
// SIGTERM a ttl (15s) after its last answered renewal and the command is
// dead by 20s, while the servers let another runner acquire only 2 x ttl +
// lock_delay (45s) after it.

// agentlessRunnersNode is the runners' catalog node (no agent runs for it).
const agentlessRunnersNode = "consul-lock-runners"

// agentlessClusterProfile is the guide's profile.
var agentlessClusterProfile = lockmodel.SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second, NodeChecks: []string{}}

var agentlessRunnerArgs = []string{"-grace", "5s", "-node", agentlessRunnersNode}

var agentlessSetUp struct {
	sync.Mutex
	done bool
}

// setUpAgentless registers the runners' node in the shared cluster's
// catalog, as the guide's operator does once, and grants the runners'
// token session write on it (the guide's session_node_prefixes).
func setUpAgentless(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	agentlessSetUp.Lock()
	defer agentlessSetUp.Unlock()
	if agentlessSetUp.done {
		return
	}
	admin := clusterAdmin(c)
	if _, err := admin.Catalog().Register(&api.CatalogRegistration{Node: agentlessRunnersNode, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatalf("registering the runners' node: %v", err)
	}
	acl := admin.ACL()
	policy, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "faults-agentless-runners",
		Rules: fmt.Sprintf("session %q { policy = \"write\" }\n", agentlessRunnersNode)}, nil)
	if err != nil {
		t.Fatalf("creating the agentless runners' policy: %v", err)
	}
	tok, _, err := acl.TokenRead(runnerAccessor, nil)
	if err != nil {
		t.Fatalf("reading the runners' token: %v", err)
	}
	tok.Policies = append(tok.Policies, &api.ACLTokenPolicyLink{ID: policy.ID})
	if _, _, err := acl.TokenUpdate(tok, nil); err != nil {
		t.Fatalf("granting the runners' token session write on %s: %v", agentlessRunnersNode, err)
	}
	agentlessSetUp.done = true
}

// agentlessFault is what happens to the holder's path to the servers.
type agentlessFault string

const (
	// agentlessCut: the holder runner's link to its server is cut
	// (requests hang, as on a dropped network).
	agentlessCut agentlessFault = "link to the servers cut"
	// agentlessServerKill: the server the holder talks to is killed
	// (SIGKILL); the runner's address then refuses connections.
	agentlessServerKill agentlessFault = "its server killed"
)

// agentlessEnv points worker i at server i%3 through a link of its own
// that the test can cut.
func agentlessEnv(t *testing.T, c *testenv.Cluster) (consulEnv, []*testenv.Link) {
	t.Helper()
	links := make([]*testenv.Link, workersPerLock)
	for i := range links {
		l, err := testenv.NewLink("127.0.0.1:0", c.Servers[i%len(c.Servers)].Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		links[i] = l
	}
	return consulEnv{
		admin:      func() *api.Client { return clusterAdmin(c) },
		workerAddr: func(i int) string { return links[i].Addr() },
		workerNode: func(i int) *testenv.Node { return c.Servers[i%len(c.Servers)] },
		controller: func() []string { return nil },
	}, links
}

// TestClusterAgentless_runnerCutOff: the holder's link to the servers is
// cut; its runner stops the command by the stop rule before a runner
// pointed at another server acquires; the guarded store sees no overlap
// and accepts no stale token.
func TestClusterAgentless_runnerCutOff(t *testing.T) {
	runAgentlessFault(t, agentlessCut)
}

// TestClusterAgentless_serverKilled: the server the holder talks to is
// killed; the same checks.
func TestClusterAgentless_serverKilled(t *testing.T) {
	runAgentlessFault(t, agentlessServerKill)
}

func runAgentlessFault(t *testing.T, fault agentlessFault) {
	c := sharedCluster(t)
	setUpAgentless(t, c)
	env, links := agentlessEnv(t, c)
	ph := phase{name: "agentless-" + map[agentlessFault]string{agentlessCut: "cut", agentlessServerKill: "server-kill"}[fault],
		rounds: 1, work: 2 * time.Minute, profile: agentlessClusterProfile, env: &env, runnerArgs: agentlessRunnerArgs,
		inject: injectAgentless(fault, c, links)}
	h := newHarness(t, ph)
	rep := h.run()
	t.Logf("%s: %d executions, overlaps %d, stale writes accepted %d, runner exits %v",
		ph.name, rep.Executions, rep.Overlaps, rep.StaleAccepted, rep.Exits)
}

// injectAgentless checks that the holder's session is the guide's (on the
// runners' node, no checks), injects the fault into its path, and checks
// that its command was dead before the next holder, on another server,
// started.
func injectAgentless(fault agentlessFault, c *testenv.Cluster, links []*testenv.Link) func(*harness, Write) Write {
	return func(h *harness, holder Write) Write {
		t := h.t
		i := workerIndex(holder.Worker)
		server := c.Servers[i%len(c.Servers)]
		info, _, err := clusterAdmin(c).Session().Info(holder.Session, &api.QueryOptions{RequireConsistent: true})
		if err != nil || info == nil {
			t.Fatalf("the holder's session %s: %v %v", holder.Session, info, err)
		}
		if info.Node != agentlessRunnersNode || len(info.NodeChecks) != 0 || len(info.ServiceChecks) != 0 || info.TTL != "15s" {
			t.Fatalf("the holder's session is on node %q with node checks %v, service checks %v, TTL %s; want %s, none, none, 15s",
				info.Node, info.NodeChecks, info.ServiceChecks, info.TTL, agentlessRunnersNode)
		}
		checkAgentlessHolderValue(t, c, h.lock.Key)
		exit := watchExit(t, holder.PID)
		mark := h.store.Mark(holder.Worker, fmt.Sprintf("%s (%s)", fault, server.Name))
		var undo func()
		switch fault {
		case agentlessCut:
			links[i].Cut()
			undo = links[i].Heal
		case agentlessServerKill:
			server.Kill()
			undo = func() {
				if err := server.Start(context.Background()); err != nil {
					t.Errorf("restarting %s: %v", server.Name, err)
				}
			}
		}
		undone := false
		t.Cleanup(func() {
			if !undone {
				undo()
			}
		})
		next := h.waitStart(mark.Seq, holder.Token)
		fig := nodeFaultFigure{fault: "agentless: " + string(fault), node: server.Name, childDead: -1,
			nextStart: next.At.Sub(mark.At), lockDelay: h.profile.LockDelay}
		if at, ok := exit.at(); ok {
			fig.childDead = at.Sub(mark.At)
		}
		undone = true
		undo()
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
		defer cancel()
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("the cluster did not recover: %v", err)
		}
		if next.Worker == holder.Worker {
			t.Errorf("the next holder is %s again, want a runner pointed at another server", next.Worker)
		}
		switch {
		case fig.childDead < 0:
			t.Errorf("%s: the old holder's command (%s, pid %d, token %d) was still running when the next holder's command (%s, token %d) started %s after the fault",
				fault, holder.Worker, holder.PID, holder.Token, next.Worker, next.Token, fig.nextStart.Round(time.Millisecond))
		case fig.childDead > fig.nextStart:
			t.Errorf("%s: the old holder's command (%s, token %d) died %s after the fault, %s after the next holder's command (%s) started",
				fault, holder.Worker, holder.Token, fig.childDead.Round(time.Millisecond), (fig.childDead - fig.nextStart).Round(time.Millisecond), next.Worker)
		default:
			t.Logf("%s: the old holder's command (%s via %s) was dead %s after the fault; the next holder (%s, via %s) started %s after it (margin %s)",
				fault, holder.Worker, server.Name, fig.childDead.Round(time.Millisecond), next.Worker,
				c.Servers[workerIndex(next.Worker)%len(c.Servers)].Name, fig.nextStart.Round(time.Millisecond),
				(fig.nextStart - fig.childDead).Round(time.Millisecond))
		}
		h.nodeFaults = append(h.nodeFaults, fig)
		t.Logf("figures:\n%s", nodeFaultTable(h.nodeFaults))
		return next
	}
}

// checkAgentlessHolderValue: the holder value names the runners' node
// (every holder's), as the guide says: holders are told apart by session.
func checkAgentlessHolderValue(t *testing.T, c *testenv.Cluster, key string) {
	t.Helper()
	kv, _, err := clusterAdmin(c).KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || kv == nil {
		t.Fatalf("reading %s: %v %v", key, kv, err)
	}
	var v lockmodel.HolderValue
	if err := json.Unmarshal(kv.Value, &v); err != nil || v.Node != agentlessRunnersNode || v.PID == 0 {
		t.Errorf("holder value %q (%v): want node %q and the runner's pid", kv.Value, err, agentlessRunnersNode)
	}
}

// serviceAddr is a runner's address when the servers sit behind a
// Kubernetes Service or a load balancer: each connection goes to the
// runner's usual server, or to the next one that accepts when it refuses.
type serviceAddr struct {
	ln      net.Listener
	targets []string
	wg      sync.WaitGroup
}

func newServiceAddr(t *testing.T, targets []string) *serviceAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &serviceAddr{ln: ln, targets: targets}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *serviceAddr) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			var up net.Conn
			for _, target := range s.targets {
				if up, err = net.DialTimeout("tcp", target, time.Second); err == nil {
					break
				}
			}
			if up == nil {
				return
			}
			defer func() { _ = up.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// TestClusterAgentless_serverKilledBehindAService: as the guide's
// Kubernetes set-up, every runner reaches the servers through one address
// that spreads connections (here: its usual server, else the next that
// accepts). The server the holder talks to is killed: its renewals reach
// another server, its TTL-only session on the runners' node is not tied
// to the dead server, and it keeps the lock: its command completes and
// nobody else starts meanwhile, although the command outlives the kill by
// more than 2 x ttl.
func TestClusterAgentless_serverKilledBehindAService(t *testing.T) {
	c := sharedCluster(t)
	setUpAgentless(t, c)
	addrs := make([]*serviceAddr, workersPerLock)
	for i := range addrs {
		var targets []string
		for j := range c.Servers {
			targets = append(targets, c.Servers[(i+j)%len(c.Servers)].Addr)
		}
		addrs[i] = newServiceAddr(t, targets)
	}
	env := consulEnv{
		admin:      func() *api.Client { return clusterAdmin(c) },
		workerAddr: func(i int) string { return addrs[i].ln.Addr().String() },
		workerNode: func(i int) *testenv.Node { return c.Servers[i%len(c.Servers)] },
		controller: func() []string { return nil },
	}
	const work = 50 * time.Second // more than 2 x ttl after the kill
	ph := phase{name: "agentless-server-kill-service", rounds: 1, work: work, profile: agentlessClusterProfile, env: &env,
		runnerArgs: agentlessRunnerArgs}
	ph.inject = func(h *harness, holder Write) Write {
		server := c.Servers[workerIndex(holder.Worker)%len(c.Servers)]
		checkAgentlessHolderValue(t, c, h.lock.Key)
		mark := h.store.Mark(holder.Worker, "kill "+server.Name+" behind the service address")
		server.Kill()
		t.Cleanup(func() {
			if !server.Running() {
				_ = server.Start(context.Background())
			}
		})
		next := h.waitStart(mark.Seq, holder.Token)
		var end *Write
		for _, w := range h.store.Log()[mark.Seq:] {
			if w.Run == holder.Run && w.Kind == KindEnd && w.Accepted {
				end = &w
				break
			}
		}
		switch {
		case end == nil || end.At.After(next.At):
			t.Errorf("the holder %s (token %d) lost the lock when %s, the server it talked to, was killed: its command did not complete before %s started %s after the kill",
				holder.Worker, holder.Token, server.Name, next.Worker, next.At.Sub(mark.At).Round(time.Millisecond))
		case end.At.Sub(mark.At) <= 2*agentlessClusterProfile.TTL:
			t.Errorf("the holder's command ended %s after the kill: not long enough to show that its session outlives 2 x ttl", end.At.Sub(mark.At).Round(time.Millisecond))
		default:
			t.Logf("%s killed; the holder %s kept the lock and completed its command %s after the kill; %s started %s after the kill",
				server.Name, holder.Worker, end.At.Sub(mark.At).Round(time.Millisecond), next.Worker, next.At.Sub(mark.At).Round(time.Millisecond))
		}
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
		defer cancel()
		if err := server.Start(ctx); err != nil {
			t.Fatalf("restarting %s: %v", server.Name, err)
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("the cluster did not recover: %v", err)
		}
		return next
	}
	h := newHarness(t, ph)
	rep := h.run()
	t.Logf("%s: %d executions, overlaps %d, stale writes accepted %d, runner exits %v",
		ph.name, rep.Executions, rep.Overlaps, rep.StaleAccepted, rep.Exits)
}
