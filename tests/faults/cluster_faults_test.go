package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// consulEnv is where a phase's workers, controller and set-up calls go:
// the single dev agent, or the shared cluster.
type consulEnv struct {
	// admin is a management client for set-up and injected faults.
	admin func() *api.Client
	// workerAddr is the agent address of worker i (0-based).
	workerAddr func(i int) string
	// workerNode is the cluster node of worker i (nil on the dev agent).
	workerNode func(i int) *testenv.Node
	// controller is the controller's CONSUL_* environment.
	controller func() []string
}

func agentEnv() consulEnv {
	return consulEnv{
		admin:      agent.Client,
		workerAddr: func(int) string { return agent.Addr },
		workerNode: func(int) *testenv.Node { return nil },
		controller: agent.Env,
	}
}

// The cluster is started on first use and shared by the cluster tests of
// this process (three servers and two clients take a few seconds).
var shared struct {
	sync.Mutex
	cluster *testenv.Cluster
	err     error
}

func sharedCluster(t *testing.T) *testenv.Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		c, err := testenv.StartCluster(ctx, testenv.ClusterOptions{DNS: true})
		if err == nil {
			var nodes []string
			for _, n := range c.Clients {
				nodes = append(nodes, n.Name)
			}
			if err = createRunnerTokenOn(clusterAdmin(c), nodes...); err != nil {
				c.Stop(true)
				c = nil
			}
		}
		shared.cluster, shared.err = c, err
		if err == nil {
			t.Logf("Consul cluster (3 servers, 2 clients) started in %s", time.Since(start).Round(time.Millisecond))
		}
	}
	if shared.err != nil {
		t.Fatalf("starting the Consul cluster: %v", shared.err)
	}
	return shared.cluster
}

// stopSharedCluster ends the shared cluster, keeping its logs when the run
// failed.
func stopSharedCluster(keepLogs bool) {
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster == nil {
		return
	}
	if keepLogs {
		fmt.Fprintf(os.Stderr, "faults tests: Consul cluster logs kept in %s\n", shared.cluster.Dir)
	}
	shared.cluster.Stop(keepLogs)
	shared.cluster = nil
}

// clusterAdmin talks to a running server: the faults hit client nodes and
// the leader, and set-up must not wait on them.
func clusterAdmin(c *testenv.Cluster) *api.Client {
	for _, s := range c.Servers {
		if s.Running() {
			return s.Client()
		}
	}
	return c.Servers[0].Client()
}

// clusterEnv puts workers w1 and w3 on client-1 and w2 on client-2, and the
// controller on the last client.
func clusterEnv(t *testing.T) consulEnv {
	c := sharedCluster(t)
	node := func(i int) *testenv.Node { return c.Clients[i%len(c.Clients)] }
	return consulEnv{
		admin:      func() *api.Client { return clusterAdmin(c) },
		workerAddr: func(i int) string { return node(i).Addr },
		workerNode: node,
		controller: func() []string { return c.Clients[len(c.Clients)-1].Env() },
	}
}

// TestClusterFaults runs the fault harness on a real cluster (3 servers,
// 2 client agents, default-deny ACLs): runners on both client nodes
// contend for one lock while a Raft leader is killed, a client node is
// frozen, killed or cut off, and, for a semaphore, a holder is killed and
// a client agent restarted. The table is logged and written to
// <repo>/tmp/faults-cluster-report.md.
//
// FAULTS_FULL=1 runs more rounds of each.
func TestClusterFaults(t *testing.T) {
	full := os.Getenv("FAULTS_FULL") != ""
	sharedCluster(t)
	var reports []Report
	var figures []nodeFaultFigure
	var kills []leaderKillFigure
	for _, ph := range clusterPhases(full) {
		t.Run(ph.name, func(t *testing.T) {
			h := newHarness(t, ph)
			reports = append(reports, h.run())
			figures = append(figures, h.nodeFaults...)
			kills = append(kills, h.leaderKills...)
		})
	}
	variant := "CI"
	if full {
		variant = "full (FAULTS_FULL=1)"
	}
	table := Table(reports) + "\n" + leaderKillTable(kills) + "\n" + nodeFaultTable(figures)
	t.Logf("cluster fault table, %s variant:\n%s", variant, table)
	if root, err := testenv.RepoRoot(); err == nil {
		_ = os.WriteFile(filepath.Join(root, "tmp", "faults-cluster-report.md"), []byte("Variant: "+variant+"\n\n"+table), 0o644)
	}
}

// clusterProfile lets a runner stop its command before a take-over when
// its node is cut off: with serfHealth the servers may invalidate the
// session right after the runner's last contact, and another node may
// acquire lock_delay (8s) later; the runner renews every 2s, gives a
// renewal 2s, the command 2s of grace (-grace), and keeps 1s of margin.
// The TTL (15s) is longer than lock_delay on purpose: a runner that waits
// for a TTL without renewal before stopping its command is too late.
var clusterProfile = lockmodel.SessionProfile{TTL: 15 * time.Second, LockDelay: 8 * time.Second, RenewEvery: 2 * time.Second}

// leaderKillProfile is the product's default profile (ttl 15s, lock_delay
// 15s, renewal every ttl/3): the runner then goes up to 12s (lock_delay -
// grace - margin) without a confirmed renewal before it stops its command,
// which an election must fit in. With clusterProfile that budget is 5s,
// and an election on a loaded machine can take longer (5.4s was measured):
// the holder then stops its command, a false loss (not an overlap).
var leaderKillProfile = lockmodel.SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second}

// semaphoreProfile: a killed holder's slot comes back when its session
// expires (about 2 x ttl); a shorter TTL keeps the rounds short.
var semaphoreProfile = lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 8 * time.Second, RenewEvery: 2 * time.Second}

func clusterPhases(full bool) []phase {
	// One round of each in CI, more in the full variant.
	n := func(fullRounds int) int {
		if full {
			return fullRounds
		}
		return 1
	}
	phases := []phase{
		{name: "cluster-leader-kill", rounds: n(5), work: 12 * time.Second, cluster: true, repairController: true, profile: leaderKillProfile, inject: injectLeaderKill},
		{name: "cluster-client-freeze", rounds: n(4), work: time.Minute, cluster: true, profile: clusterProfile, inject: injectNodeFault(nodeFreeze)},
		{name: "cluster-client-kill", rounds: n(3), work: time.Minute, cluster: true, profile: clusterProfile, inject: injectNodeFault(nodeKill)},
		{name: "cluster-client-cut", rounds: n(3), work: time.Minute, cluster: true, profile: clusterProfile, inject: injectNodeFault(nodeCut)},
		{name: "cluster-semaphore-holder-kill", rounds: n(3), work: time.Minute, cluster: true, limit: 2, profile: semaphoreProfile, inject: whenFull(injectKill)},
		{name: "cluster-semaphore-agent-restart", rounds: n(3), work: 8 * time.Second, cluster: true, limit: 2, profile: semaphoreProfile, inject: whenFull(injectAgentRestart)},
		// Consul puts no lock-delay on a semaphore slot: when the servers
		// invalidate a frozen node's session, the waiting runner must
		// wait out lock_delay itself before it takes the slot.
		{name: "cluster-semaphore-client-freeze", rounds: n(2), work: time.Minute, cluster: true, limit: 2, profile: clusterProfile, inject: whenFullAwayFromWaiter(injectNodeFault(nodeFreeze))},
	}
	return phases
}

func workerIndex(id string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(id, "w"))
	return i - 1
}

// injectLeaderKill kills the Raft leader while a runner holds the lock.
// A few seconds without a leader is not a loss: the holder must keep its
// lock and finish its job, and the controller must act again afterwards
// (it restores the canary lock key, deleted after the election).
func injectLeaderKill(h *harness, holder Write) Write {
	t := h.t
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	// Three voters first: a server restarted in the round before may not
	// have been promoted yet, and then this kill would leave no quorum.
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mark := h.store.Mark(holder.Worker, "kill Raft leader "+leader.Name)
	leader.Kill()
	t.Cleanup(func() {
		if !leader.Running() {
			_ = leader.Start(context.Background())
		}
	})
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Since(mark.At)
	restored := time.Duration(-1)
	if h.canary.Key != "" {
		kv := h.env.admin().KV()
		if _, err := testenv.RetryWhile(ctx, consul.IsTransientText, func() error {
			_, err := kv.Delete(h.canary.Key, nil)
			return err
		}); err != nil {
			t.Fatalf("deleting the canary key: %v", err)
		}
		deleted := time.Now()
		for restored < 0 && ctx.Err() == nil {
			if p, _, err := kv.Get(h.canary.Key, &api.QueryOptions{RequireConsistent: true}); err == nil && p != nil {
				restored = time.Since(deleted)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if restored < 0 {
			t.Errorf("the controller did not restore the deleted canary key %s after the leader kill: it stopped acting", h.canary.Key)
		}
	}
	if err := leader.Start(ctx); err != nil {
		t.Fatalf("restarting %s: %v", leader.Name, err)
	}
	nextStart := h.waitStart(mark.Seq, holder.Token)
	var end *Write
	for _, w := range h.store.Log()[mark.Seq:] {
		if w.Run == holder.Run && w.Kind == KindEnd && w.Accepted {
			end = &w
			break
		}
	}
	if end == nil || end.At.After(nextStart.At) {
		t.Errorf("the holder %s (token %d) lost its lock across the Raft leader kill: its job did not complete before %s started",
			holder.Worker, holder.Token, nextStart.Worker)
	}
	h.leaderKills = append(h.leaderKills, leaderKillFigure{killed: leader.Name, elected: elected, restored: restored, kept: end != nil && !end.At.After(nextStart.At)})
	t.Logf("leader %s killed; %s elected %s later; controller restored the deleted canary key in %s; holder %s completed its job: %v",
		leader.Name, next.Name, elected.Round(time.Millisecond), restored.Round(time.Millisecond), holder.Worker, end != nil)
	return nextStart
}

// leaderKillFigure is one Raft leader kill's outcome.
type leaderKillFigure struct {
	killed            string
	elected, restored time.Duration // from the kill; from the canary's deletion
	kept              bool          // the holder finished its job
}

func leaderKillTable(figs []leaderKillFigure) string {
	var b strings.Builder
	b.WriteString("| leader killed | new leader after | controller restored a deleted key after | holder kept its lock |\n")
	b.WriteString("|---|---:|---:|---|\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %s | %s | %s | %v |\n", f.killed, f.elected.Round(10*time.Millisecond), f.restored.Round(10*time.Millisecond), f.kept)
	}
	return b.String()
}

type nodeFault string

const (
	nodeFreeze nodeFault = "freeze" // SIGSTOP of the client agent
	nodeKill   nodeFault = "kill"   // SIGKILL of the client agent
	nodeCut    nodeFault = "cut"    // the client node cut off from the other members
)

// nodeFaultFigure is one node fault's timing, from the injection.
type nodeFaultFigure struct {
	fault, node string
	// childDead: when the old holder's command was gone (-1: it was
	// still running long after the take-over).
	childDead time.Duration
	// nextStart: when the next holder's command wrote its start.
	nextStart time.Duration
	lockDelay time.Duration
}

func nodeFaultTable(figs []nodeFaultFigure) string {
	var b strings.Builder
	b.WriteString("| node fault | node | old holder's command dead after | next holder started after | margin | lock_delay |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|\n")
	for _, f := range figs {
		dead, margin := "still running", "**overlap**"
		if f.childDead >= 0 {
			dead = f.childDead.Round(10 * time.Millisecond).String()
			margin = (f.nextStart - f.childDead).Round(10 * time.Millisecond).String()
			if f.childDead > f.nextStart {
				margin = "**overlap " + (f.childDead - f.nextStart).Round(10*time.Millisecond).String() + "**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", f.fault, f.node, dead, f.nextStart.Round(10*time.Millisecond), margin, f.lockDelay)
	}
	return b.String()
}

// injectNodeFault freezes, kills or cuts off the holder's client node while
// its runner and command keep running. The servers declare the node
// failed, serfHealth invalidates the session, and the waiter on the other
// node acquires lock_delay later. The old holder's command must be dead
// before the new holder's command starts (no overlap even without
// fencing), and stale writes accepted stay 0 (checked by run).
func injectNodeFault(kind nodeFault) func(*harness, Write) Write {
	return func(h *harness, holder Write) Write {
		t := h.t
		node := h.env.workerNode(workerIndex(holder.Worker))
		exit := watchExit(t, holder.PID)
		mark := h.store.Mark(holder.Worker, fmt.Sprintf("%s %s", kind, node.Name))
		var undo func() error
		switch kind {
		case nodeFreeze:
			if err := node.Freeze(); err != nil {
				t.Fatal(err)
			}
			undo = node.Thaw
		case nodeKill:
			node.Kill()
			undo = func() error { return node.Start(h.ctx) }
		case nodeCut:
			if err := node.Cut(); err != nil {
				t.Fatal(err)
			}
			undo = node.Heal
		}
		// A failing round must not leave the node down for the next phases.
		undone := false
		t.Cleanup(func() {
			if !undone {
				_ = undo()
			}
		})
		next := h.waitStart(mark.Seq, holder.Token)
		name := string(kind)
		if h.ph.limit > 1 {
			name = "semaphore " + name
		}
		fig := nodeFaultFigure{fault: name, node: node.Name, childDead: -1, nextStart: next.At.Sub(mark.At), lockDelay: h.profile.LockDelay}
		if at, ok := exit.at(); ok {
			fig.childDead = at.Sub(mark.At)
		}
		undone = true
		if err := undo(); err != nil {
			t.Fatalf("ending the %s of %s: %v", kind, node.Name, err)
		}
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
		defer cancel()
		if err := sharedCluster(t).WaitHealthy(ctx); err != nil {
			t.Fatalf("the cluster did not recover from the %s of %s: %v", kind, node.Name, err)
		}
		if fig.childDead < 0 {
			// How long it outlived the take-over, for the figures: its
			// runner stops it at the latest a TTL without renewal later.
			deadline := time.Now().Add(h.profile.TTL + 2*time.Minute)
			for time.Now().Before(deadline) {
				if at, ok := exit.at(); ok {
					fig.childDead = at.Sub(mark.At)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		h.nodeFaults = append(h.nodeFaults, fig)
		switch {
		case fig.childDead < 0:
			t.Errorf("%s of %s: the old holder's command (%s, pid %d, token %d) was still running when the next holder's command (%s, token %d) started %s after the fault, and long after",
				kind, node.Name, holder.Worker, holder.PID, holder.Token, next.Worker, next.Token, fig.nextStart.Round(time.Millisecond))
		case fig.childDead > fig.nextStart:
			t.Errorf("%s of %s: the old holder's command (%s, token %d) died %s after the fault, %s after the next holder's command (%s) started",
				kind, node.Name, holder.Worker, holder.Token, fig.childDead.Round(time.Millisecond), (fig.childDead - fig.nextStart).Round(time.Millisecond), next.Worker)
		default:
			t.Logf("%s of %s: the old holder's command was dead %s after the fault, the next holder (%s, on another node) started %s after it",
				kind, node.Name, fig.childDead.Round(time.Millisecond), next.Worker, fig.nextStart.Round(time.Millisecond))
		}
		return next
	}
}

// whenFull injects a fault into a semaphore only once limit holders work,
// so that the next start is a waiter taking a slot, not a second holder
// joining a free one.
func whenFull(inject func(*harness, Write) Write) func(*harness, Write) Write {
	return func(h *harness, holder Write) Write {
		ctx, cancel := context.WithTimeout(h.ctx, waitTimeout)
		defer cancel()
		if _, err := h.store.WaitFor(ctx, func(log []Write) bool {
			active := map[string]int{}
			for _, w := range log {
				switch w.Kind {
				case KindStart:
					active[w.Run] = w.PID
				case KindEnd, KindAbort:
					delete(active, w.Run)
				}
			}
			n := 0
			for _, pid := range active {
				if running(pid) {
					n++
				}
			}
			return n >= h.ph.limit
		}); err != nil {
			h.t.Fatalf("%s: %d holders never worked at once", h.ph.name, h.ph.limit)
		}
		if h.holderRunner(holder) == nil {
			return h.waitStart(holder.Seq, holder.Token)
		}
		return inject(h, holder)
	}
}

// whenFullAwayFromWaiter is whenFull, but hits a holder on a node that
// does not host the waiting worker: a node fault there would also cut off
// the waiter, and the slot would go to whoever finishes first (a minute
// later), not to a waiter taking a dead holder's slot.
func whenFullAwayFromWaiter(inject func(*harness, Write) Write) func(*harness, Write) Write {
	return whenFull(func(h *harness, holder Write) Write {
		active := map[string]Write{} // worker -> its running execution's start
		for _, w := range h.store.Log() {
			switch w.Kind {
			case KindStart:
				active[w.Worker] = w
			case KindEnd, KindAbort:
				if a, ok := active[w.Worker]; ok && a.Run == w.Run {
					delete(active, w.Worker)
				}
			}
		}
		var waiterNodes []string
		for _, wk := range h.workers {
			if _, ok := active[wk.id]; !ok {
				waiterNodes = append(waiterNodes, h.env.workerNode(wk.index).Name)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(active)) {
			w := active[id]
			if !slices.Contains(waiterNodes, h.env.workerNode(workerIndex(id)).Name) && running(w.PID) && h.holderRunner(w) != nil {
				return inject(h, w)
			}
		}
		return inject(h, holder)
	})
}

// injectAgentRestart kills the holder's client agent and starts it again
// at once, as a crash and a supervisor restart would; the servers keep
// their state.
func injectAgentRestart(h *harness, holder Write) Write {
	t := h.t
	node := h.env.workerNode(workerIndex(holder.Worker))
	mark := h.store.Mark(holder.Worker, "restart agent "+node.Name)
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	if err := node.Restart(ctx); err != nil {
		t.Fatalf("restarting %s: %v", node.Name, err)
	}
	t.Logf("agent %s restarted in %s", node.Name, time.Since(mark.At).Round(time.Millisecond))
	return h.waitStart(mark.Seq, holder.Token)
}

// processExit records when a process was gone (or a zombie: it no longer
// runs), polling /proc: the process is the runner's child, not ours.
type processExit struct {
	mu   sync.Mutex
	when time.Time
}

func watchExit(t *testing.T, pid int) *processExit {
	e := &processExit{}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if !running(pid) {
				e.mu.Lock()
				e.when = time.Now()
				e.mu.Unlock()
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return e
}

func (e *processExit) at() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.when, !e.when.IsZero()
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the command name in parentheses.
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// newSemaphoreFront serves the children of a semaphore phase: up to limit
// of them hold at once, each with its own token, so the store's single
// fencing rule does not apply. The front passes every write to the store
// with a token that only grows (so it is logged as accepted), keeping the
// child's own token in the note for checkSemaphore.
func newSemaphoreFront(t *testing.T, store *Store) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seq uint64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(rw http.ResponseWriter, r *http.Request) {
		var in Write
		if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 1<<16)).Decode(&in); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seq++
		in.Note = fmt.Sprintf("token=%d", in.Token)
		in.Token = seq
		out := store.Apply(in)
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// checkSemaphore reads a semaphore phase's log: Overlaps counts executions
// that started while limit others were still writing (more holders than
// the limit); Duplicated counts fencing tokens used by two executions.
// Executions, Completed and Interrupted are as for a mutex; HandOvers
// counts every acquisition after the first.
func checkSemaphore(fault string, log []Write, limit int) Report {
	return checkSemaphoreLimits(fault, log, func(time.Time) int { return limit })
}

// checkSemaphoreLimits is checkSemaphore for a limit that changes: an
// execution that starts at t is held to limitAt(t).
func checkSemaphoreLimits(fault string, log []Write, limitAt func(time.Time) int) Report {
	rep := Report{Fault: fault}
	execs := semaphoreExecutions(log)
	tokens := map[string]int{} // the children's own tokens (see newSemaphoreFront)
	for _, e := range execs {
		tokens[e.note]++
	}
	slices.SortFunc(execs, func(a, b *semaphoreExecution) int { return a.start.Compare(b.start) })
	rep.Executions = len(execs)
	rep.HandOvers = max(0, len(execs)-1)
	for i, e := range execs {
		if !e.end.IsZero() {
			rep.Completed++
		} else {
			rep.Interrupted++
		}
		active := 0
		for _, other := range execs[:i] {
			if e.start.Before(other.last) {
				active++
			}
		}
		if active >= limitAt(e.start) {
			rep.Overlaps++
		}
	}
	for _, n := range tokens {
		if n > 1 {
			rep.Duplicated += n - 1
		}
	}
	return rep
}

// The provider's basics through a client agent while one of the three
// servers is down (the leader, so an election happens first): a profile
// and a lock apply, the plan after them is empty, and destroy works.
func TestClusterFaults_providerWithOneServerDown(t *testing.T) {
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	t.Cleanup(func() {
		if err := leader.Start(context.Background()); err != nil {
			t.Errorf("restarting %s: %v", leader.Name, err)
		}
	})
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	client := c.Clients[0]
	name := fmt.Sprintf("faults-cluster-provider-%d", os.Getpid())
	ws := newTofuWorkspace(t)
	ws.vars = []string{"-var", "token=" + c.ManagementToken}
	ws.write(fmt.Sprintf(`terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}
variable "token" {
  type      = string
  sensitive = true
}
provider "consullock" {
  address = %q
  token   = var.token
}
resource "consullock_session_defaults" "profile" {
  name       = %q
  ttl        = "10s"
  lock_delay = "8s"
}
resource "consullock_lock" "job" {
  name             = %q
  prefix           = "faults/%s"
  session_defaults = consullock_session_defaults.profile.name
}
`, client.Addr, name, name, name))
	ws.mustSucceed("apply", "-auto-approve")
	if empty, out := ws.planIsEmpty(); !empty {
		t.Errorf("the plan after the apply through %s with %s down is not empty:\n%s", client.Name, leader.Name, out)
	}
	pair, _, err := client.Client().KV().Get("faults/"+name+"/.lock", &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Flags != lockmodel.LockFlagValue {
		t.Errorf("the lock key is missing or has the wrong flags after the apply (err %v)", err)
	}
	ws.mustSucceed("destroy", "-auto-approve", "-input=false", "-no-color", "-var", "token="+c.ManagementToken)
	if pair, _, err := client.Client().KV().Get("faults/"+name+"/.lock", &api.QueryOptions{RequireConsistent: true}); err != nil || pair != nil {
		t.Errorf("the lock key is still there after destroy (err %v)", err)
	}
	t.Logf("apply, empty plan and destroy through %s with server %s down", client.Name, leader.Name)
}
