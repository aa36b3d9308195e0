package deploycheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agentlessProfile is the session profile docs/guides/agentless.md
// recommends: the defaults, without node checks.
var agentlessProfile = lockmodel.SessionProfile{
	Name: "agentless", TTL: lockmodel.DefaultSessionTTL, LockDelay: lockmodel.DefaultLockDelay, NodeChecks: []string{},
}

// TestAgentlessProfile_stopRule pins the numbers the agentless guide
// states: with no checks only the TTL ends a silent holder's session, so a
// take-over waits 2 x ttl + lock_delay, and the runner stops its command a
// ttl after its last confirmed contact.
func TestAgentlessProfile_stopRule(t *testing.T) {
	cases := []struct {
		name                           string
		profile                        lockmodel.SessionProfile
		takeOver, lossAfter, deadBy    time.Duration
		healthChecks, feasible, warned bool
	}{
		{name: "agentless: node_checks = [], ttl 15s, lock_delay 15s", profile: agentlessProfile,
			takeOver: 45 * time.Second, lossAfter: 15 * time.Second, deadBy: 20 * time.Second, feasible: true},
		{name: "default serfHealth, for comparison", profile: lockmodel.SessionProfile{Name: "default", TTL: 15 * time.Second, LockDelay: 15 * time.Second},
			takeOver: 15 * time.Second, lossAfter: 9 * time.Second, deadBy: 14 * time.Second, healthChecks: true, feasible: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := lockmodel.NewStopRule(tc.profile.Resolve(), lockmodel.DefaultRunnerGrace)
			if r.HealthChecks != tc.healthChecks {
				t.Errorf("HealthChecks %v, want %v", r.HealthChecks, tc.healthChecks)
			}
			if got := r.TakeOverAfter(); got != tc.takeOver {
				t.Errorf("TakeOverAfter %s, want %s", got, tc.takeOver)
			}
			if got := r.LossAfter(); got != tc.lossAfter {
				t.Errorf("LossAfter %s, want %s", got, tc.lossAfter)
			}
			if got := r.DeadBy(); got != tc.deadBy {
				t.Errorf("DeadBy %s, want %s", got, tc.deadBy)
			}
			if r.Feasible() != tc.feasible || (tc.profile.Resolve().StopWarning() != nil) != tc.warned {
				t.Errorf("Feasible %v (warning %v), want %v", r.Feasible(), tc.profile.Resolve().StopWarning(), tc.feasible)
			}
			if r.DeadBy()+r.Margin > r.TakeOverAfter() {
				t.Errorf("the command is dead at %s, after the take-over at %s", r.DeadBy(), r.TakeOverAfter())
			}
		})
	}
}

// TestAgentless_sessionOnTheServersNode: a runner pointed at a server (no
// local client agent) that names no node gets its session on the server's
// node, so the workers' session_node_prefixes must name the servers; the
// agentless profile's session carries no checks.
func TestAgentless_sessionOnTheServersNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const serverNode = "consul-server-0"
	agent, err := testenv.Start(ctx, testenv.Options{NodeName: serverNode})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	self, err := agent.Client().Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	if self["Config"]["Server"] != true {
		t.Fatalf("the test agent is not a server: %v", self["Config"])
	}
	const key = "agentless/job/.lock"
	client := func(rules string) *consul.Client {
		t.Helper()
		tok, err := agent.MintToken("agentless-"+testenv.NewUUID()[:8], rules, 0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	servers := client(`key "` + key + `" { policy = "write" }
session_prefix "consul-server-" { policy = "write" }`)
	s, err := lockproto.CreateSession(ctx, servers, "agentless", "", agentlessProfile.Resolve())
	if err != nil {
		t.Fatalf("session with session_prefix naming the servers: %v", err)
	}
	if s.Node != serverNode {
		t.Errorf("session on node %q, want the server's node %q", s.Node, serverNode)
	}
	info, _, err := agent.Client().Session().Info(s.ID, &api.QueryOptions{RequireConsistent: true})
	if err != nil || info == nil {
		t.Fatalf("session info: %v %v", info, err)
	}
	if len(info.NodeChecks) != 0 || len(info.Checks) != 0 || info.TTL != "15s" {
		t.Errorf("session NodeChecks %v Checks %v TTL %s: want no checks, TTL 15s", info.NodeChecks, info.Checks, info.TTL)
	}
	ok, _, err := servers.KV().Acquire(&api.KVPair{Key: key, Session: s.ID}, nil)
	if err != nil || !ok {
		t.Errorf("acquire with the server-node session: %v %v", ok, err)
	}
	if err := lockproto.DestroySession(ctx, servers, s.ID); err != nil {
		t.Error(err)
	}

	// -node names another node: Consul accepts only a node in its catalog.
	if s, err := lockproto.CreateSession(ctx, agentClient(t, agent), "agentless", "pod-not-in-catalog", agentlessProfile.Resolve()); err == nil {
		t.Errorf("session %s created on a node missing from the catalog", s.ID)
	} else if consul.KindOf(err) != consul.KindValidation || !strings.Contains(err.Error(), "Missing node registration") {
		t.Errorf("on a node missing from the catalog: %v (kind %s), want invalid input (never retried), HTTP 500 Missing node registration", err, consul.KindOf(err))
	} else {
		t.Logf("on a node missing from the catalog: %v", err)
	}

	// A node registered in the catalog has no serfHealth: a session bound to
	// it is refused, the agentless profile's is accepted.
	// Registering it needs node write on it, which the workers' rules
	// lack.
	mgmt := agentClient(t, agent)
	runnersNode := &api.CatalogRegistration{Node: "consul-lock-runners", Address: "127.0.0.1"}
	workersRules := `key "` + key + `" { policy = "write" }
session_prefix "consul-lock-runners" { policy = "write" }`
	if _, err := client(workersRules).Catalog().Register(runnersNode, nil); consul.KindOf(err) != consul.KindPermissionDenied {
		t.Errorf("registering the runners' node with the workers' rules: %v, want permission denied", err)
	}
	if _, err := client(`node "consul-lock-runners" { policy = "write" }`).Catalog().Register(runnersNode, nil); err != nil {
		t.Fatalf("registering the runners' node with node \"consul-lock-runners\" write: %v", err)
	}
	defaults := lockmodel.SessionProfile{Name: "default", TTL: 15 * time.Second, LockDelay: 15 * time.Second}.Resolve()
	if s, err := lockproto.CreateSession(ctx, mgmt, "agentless", "consul-lock-runners", defaults); err == nil {
		t.Errorf("session %s bound to serfHealth on a catalog node without it was created", s.ID)
	} else if !strings.Contains(err.Error(), "Missing check 'serfHealth' registration") {
		t.Errorf("serfHealth on the catalog node: %v, want HTTP 500 Missing check 'serfHealth' registration", err)
	} else {
		t.Logf("serfHealth on the catalog node: %v", err)
	}
	if s, err := lockproto.CreateSession(ctx, mgmt, "agentless", "consul-lock-runners", agentlessProfile.Resolve()); err != nil {
		t.Errorf("TTL-only session on the catalog node: %v", err)
	} else if s.Node != "consul-lock-runners" {
		t.Errorf("session on %q, want consul-lock-runners", s.Node)
	}

	workers := client(`key "` + key + `" { policy = "write" }
session_prefix "worker-" { policy = "write" }`)
	if s, err := lockproto.CreateSession(ctx, workers, "agentless", "", agentlessProfile.Resolve()); err == nil {
		t.Errorf("session %s on %s created with session_prefix \"worker-\" only, want permission denied", s.ID, s.Node)
	} else if consul.KindOf(err) != consul.KindPermissionDenied {
		t.Errorf("with session_prefix \"worker-\" only: %v (kind %s), want permission denied", err, consul.KindOf(err))
	} else {
		t.Logf("with session_prefix \"worker-\" only: %v", err)
	}
}

// agentClient is a consullock client with the management token.
func agentClient(t *testing.T, agent *testenv.Agent) *consul.Client {
	t.Helper()
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentless_serverKilled: on a cluster of three servers, sessions
// created through one server (no client agent) and that server is killed.
// Autopilot removes the dead server and its node leaves the catalog, which
// ends every session on that node, with or without checks: the TTL-only
// session on the server's node ends like the serfHealth one. A TTL-only
// session on a node registered in the catalog for the runners (-node)
// outlives the kill while its renewals reach another server, and keeps its
// lock.
func TestAgentless_serverKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := testenv.StartClusterT(t, testenv.ClusterOptions{Servers: 3, Clients: 1})
	leader, err := cluster.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim, survivor *testenv.Node
	for _, s := range cluster.Servers {
		switch {
		case s == leader:
		case victim == nil:
			victim = s
		default:
			survivor = s
		}
	}
	newClient := func(n *testenv.Node) *consul.Client {
		t.Helper()
		c, err := consul.New(consul.Settings{Address: n.Addr, Token: cluster.ManagementToken})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	through, other := newClient(victim), newClient(survivor)
	const runnersNode = "consul-lock-runners"
	if _, err := through.Catalog().Register(&api.CatalogRegistration{Node: runnersNode, Address: "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}

	type session struct {
		what, node, key string
		profile         lockmodel.SessionProfile
		survives        bool
		s               *lockproto.Session
		endedAfter      time.Duration
	}
	sessions := []*session{
		{what: "TTL-only on the server's node", key: "agentless/server-ttl/.lock", profile: agentlessProfile},
		{what: "serfHealth on the server's node", key: "agentless/server-serf/.lock",
			profile: lockmodel.SessionProfile{Name: "default", TTL: 15 * time.Second, LockDelay: 15 * time.Second}},
		{what: "TTL-only on the runners' catalog node", node: runnersNode, key: "agentless/runners-ttl/.lock", profile: agentlessProfile, survives: true},
	}
	for _, x := range sessions {
		if x.s, err = lockproto.CreateSession(ctx, through, "agentless", x.node, x.profile.Resolve()); err != nil {
			t.Fatalf("%s: %v", x.what, err)
		}
		want := x.node
		if want == "" {
			want = victim.Name
		}
		if x.s.Node != want {
			t.Fatalf("%s: session on node %q, want %q", x.what, x.s.Node, want)
		}
		if ok, _, err := through.KV().Acquire(&api.KVPair{Key: x.key, Session: x.s.ID}, nil); err != nil || !ok {
			t.Fatalf("%s: acquire %s: %v %v", x.what, x.key, ok, err)
		}
	}

	victim.Kill()
	killed := time.Now()
	t.Logf("killed server %s, through which every session was created", victim.Name)
	// Renew every live session through the survivor, as a runner whose
	// requests now reach another server would, for longer than 2 x ttl.
	for time.Since(killed) < 2*lockmodel.DefaultSessionTTL+5*time.Second {
		for _, x := range sessions {
			if x.endedAfter > 0 {
				continue
			}
			entry, _, err := other.Session().Renew(x.s.ID, nil)
			if err != nil {
				t.Fatalf("%s: renewing through %s: %v", x.what, survivor.Name, err)
			}
			if entry == nil {
				x.endedAfter = time.Since(killed)
				t.Logf("%s: the session ended %s after the kill", x.what, x.endedAfter.Round(100*time.Millisecond))
			}
		}
		time.Sleep(time.Second)
	}
	for _, x := range sessions {
		if ended := x.endedAfter > 0; ended == x.survives {
			t.Errorf("%s: session ended %v, want %v", x.what, ended, !x.survives)
		}
		kv, _, err := other.KV().Get(x.key, &api.QueryOptions{RequireConsistent: true})
		if err != nil || kv == nil {
			t.Fatalf("read %s: %v %v", x.key, kv, err)
		}
		if held := kv.Session == x.s.ID; held != x.survives {
			t.Errorf("%s: %s held by its session %v, want %v", x.what, x.key, held, x.survives)
		}
	}
}
