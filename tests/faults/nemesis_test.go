package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/runner"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// nemesisAllowedExits are the runner exit codes the nemesis may see: the
// runner's own (docs/guides/runner.md "Exit codes": 123 lock lost, 125
// setup error, e.g. its agent down), the command's own passed through (0,
// childFenced, childNoStore, 143 after the SIGTERM of a lock loss), and
// 128+9 for a runner the nemesis killed. 2 (usage), 124 (no -timeout is
// given), 126 and 127 (the command exists) and anything else are not.
var nemesisAllowedExits = []int{0, childFenced, childNoStore, 123, 125, 128 + int(syscall.SIGKILL), childTermed}

// The nemesis's profiles: variant 1 is the start, a profile change
// switches to the other. The mutex's are fast (its safety is the guarded
// store's fencing); the semaphore's keep the stop rule's margin (runner
// renewal + grace < lock_delay), since no store fences its slots, and
// differ widely in lock_delay: after a change back to 8s, a waiter must
// still count 14s for a holder of the older profile whose node froze
// (issue 22, hole 2).
var (
	nemesisMutexProfiles = []lockmodel.SessionProfile{
		{TTL: 10 * time.Second, LockDelay: time.Second},
		{TTL: 12 * time.Second, LockDelay: 2 * time.Second},
	}
	nemesisSemaphoreProfiles = []lockmodel.SessionProfile{
		{TTL: 15 * time.Second, LockDelay: 8 * time.Second, RenewEvery: 2 * time.Second},
		{TTL: 10 * time.Second, LockDelay: 14 * time.Second, RenewEvery: 2 * time.Second},
	}
	nemesisLimits = NemesisConfig(0).Limits
)

// nemesisMaxHold is the mutex's max_hold: its jobs last 50ms, so only a
// holder the nemesis froze (or cut off) exceeds it, and the enforcing
// controller then ends its session: a controller write under faults.
const nemesisMaxHold = 5 * time.Second

// limitGrace: how long after a shrink a start may still count against the
// older, larger limit (the contender was admitted before it).
const limitGrace = 5 * time.Second

// waiterKillMargin is what a stall after a waiter kill may take beyond the
// killed session's 2 x ttl + lock_delay: the holder's job and release,
// the next waiter's wake-up and its lock-delay retry, a loaded machine.
const waiterKillMargin = 5 * time.Second

// TestNemesis runs a randomized fault schedule (a pure function of its
// seed: NEMESIS_SEED, else the clock) on its own cluster of 3 servers and
// 3 client agents, under two mutex workloads (a lock declared with waiters
// = "queue" and one declared with waiters = "handoff", whose releasing
// holders hand the lock to the first in line: each 3 `consullock run`
// workers, one per client node, short jobs, waiting in its waiter queue,
// and OpenTofu applies holding the same locks with the ephemeral
// consullock_lock, every other one by its key, which races: queued waiters
// and racers on one key), a semaphore workload (4
// workers, limit 2 or 3) and a run-once workload (a runner per client node
// for each of a sequence of run IDs, racing), with two `consullock controller -mode
// enforce` replicas, and checks the whole history: mutual exclusion (at
// most the limit in the guarded store's log), fencing tokens strictly
// increasing per lock, no stale write accepted, exactly one success per
// run ID, every runner exit code one the runner guide documents, and no
// controller write by a process that does not lead (each process of a
// replica is judged on its own log), no mutex runner racing for want of
// the queue grant, hand-offs seen on the hand-off mutex and none on the
// queue mutex, and the stall after the first waiter in line is killed
// (waiter-kill) within 2 x ttl + lock_delay + waiterKillMargin. The
// summary adds the hand-over gaps (p50, p99, max), the hand-offs and the
// queue entries left at the end, per queued mutex.
//
// The short variant (make test) runs 90s of schedule; FAULTS_FULL=1 runs
// 30 minutes (make test-faults); NEMESIS_LENGTH (a duration) overrides
// both. The summary is logged and written to <repo>/tmp/nemesis-report.md.
func TestNemesis(t *testing.T) {
	full := os.Getenv("FAULTS_FULL") != ""
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NEMESIS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("NEMESIS_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	length := 90 * time.Second
	if full {
		length = 30 * time.Minute
	}
	if v := os.Getenv("NEMESIS_LENGTH"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NEMESIS_LENGTH=%q: want a duration", v)
		}
		length = d
	}
	replay := fmt.Sprintf("NEMESIS_SEED=%d NEMESIS_LENGTH=%s go -C tests test -count=1 -timeout 60m -run TestNemesis ./faults/", seed, length)
	if full {
		replay = "FAULTS_FULL=1 " + replay
	}
	t.Logf("nemesis seed %d; replay: %s", seed, replay)
	t.Cleanup(func() {
		if t.Failed() { // also after a failure raised by the harness
			t.Logf("nemesis seed %d failed; replay: %s", seed, replay)
		}
	})
	cfg := NemesisConfig(length)
	if why := pidNamespacesUnavailable(); why != "" {
		t.Logf("nemesis: no %s faults: %s (the %s runners cannot run with -tree-protection %s)", FaultTreeKill, why, cfg.TreeKill, runner.ProtectionPIDNamespace)
		cfg.TreeKill = ""
	}
	steps := Schedule(seed, cfg)
	t.Log(FormatSchedule(seed, steps))

	n := newNemesis(t, seed, replay, cfg)
	n.run(steps)
	n.check(steps)
}

// nemesis is one run: the cluster, the two workloads, the controller
// replicas, and what the faults did.
type nemesis struct {
	t        *testing.T
	seed     uint64
	replay   string
	cluster  *testenv.Cluster
	mutex    *harness // waiters = "queue"
	handoff  *harness // waiters = "handoff"
	sem      *harness
	once     *onceWorkload
	eph      *ephemeralWorkload
	replicas []*replica
	steps    []Step // the schedule (what a pending undo undoes)
	cfg      ScheduleConfig

	mu       sync.Mutex
	injected map[FaultKind]int
	skipped  map[FaultKind]int
	undos    map[int]func() // pending undos by step index
	limits   []LimitChange
	profiles map[string]int // target -> profile variant in force (1-based)
	events   []ControllerEvent
	skews    map[string]time.Duration // client node -> clock offset of the runners started there
	// skewWindows are the clock skews' spans (to: zero while in force);
	// skewExits the exits of the extra runners they started.
	skewWindows []skewWindow
	skewExits   map[int]int
	// armed is the armed AtExit fault (nil: none).
	armed *armedExit
	// treeKills are the group kills and kills of runner and guard;
	// stopStrikes the stops at a run-once command's exit.
	treeKills   []treeKill
	stopStrikes []stopStrike
}

// errorf fails the test with the seed and the replay command.
func (n *nemesis) errorf(format string, args ...any) {
	n.t.Helper()
	n.t.Errorf("nemesis seed %d: %s\nreplay: %s", n.seed, fmt.Sprintf(format, args...), n.replay)
}

func (n *nemesis) fatalf(format string, args ...any) {
	n.t.Helper()
	n.t.Fatalf("nemesis seed %d: %s\nreplay: %s", n.seed, fmt.Sprintf(format, args...), n.replay)
}

func newNemesis(t *testing.T, seed uint64, replay string, cfg ScheduleConfig) *nemesis {
	n := &nemesis{
		t: t, seed: seed, replay: replay, cfg: cfg,
		injected: map[FaultKind]int{}, skipped: map[FaultKind]int{}, undos: map[int]func(){},
		profiles: map[string]int{"mutex": 1, "handoff": 1, "semaphore": 1}, skews: map[string]time.Duration{}, skewExits: map[int]int{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Clients: 3})
	if err != nil {
		n.fatalf("starting the Consul cluster: %v", err)
	}
	n.cluster = c
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nemesis: Consul cluster logs kept in %s", c.Dir)
		}
		c.Stop(t.Failed())
	})
	var nodes []string
	for _, cl := range c.Clients {
		nodes = append(nodes, cl.Name)
	}
	// The lock names are the harness's (newHarness): the runners' token
	// names them, and exists before the first runner starts.
	// Every runner leads a process group of its own (group-kill); the
	// hand-off mutex's run with -tree-protection pid-namespace when
	// runner-and-guard-kill targets it.
	if cfg.TreeKill != "" && cfg.TreeKill != "handoff" {
		n.fatalf("runner-and-guard-kill targets %q: only the hand-off mutex's runners run in PID namespaces", cfg.TreeKill)
	}
	mutexPhase := phase{name: "nemesis-mutex", work: 50 * time.Millisecond, maxHold: nemesisMaxHold, workers: 3,
		profile: nemesisMutexProfiles[0], waiters: lockmodel.WaitersQueue, ownGroup: true}
	handoffPhase := mutexPhase
	handoffPhase.name, handoffPhase.waiters = "nemesis-handoff", lockmodel.WaitersHandOff
	handoffPhase.pidNamespace = cfg.TreeKill == "handoff"
	semPhase := phase{name: "nemesis-semaphore", work: 150 * time.Millisecond, workers: 4, limit: nemesisLimits[0], profile: nemesisSemaphoreProfiles[0], ownGroup: true}
	mutexPrefix, handoffPrefix, semPrefix := "faults/"+harnessLockName(mutexPhase), "faults/"+harnessLockName(handoffPhase), "faults/"+harnessLockName(semPhase)
	if err := createNemesisRunnerToken(clusterAdmin(c), nodes, []string{mutexPrefix, handoffPrefix}, semPrefix); err != nil {
		n.fatalf("%v", err)
	}
	node := func(i int) *testenv.Node { return c.Clients[i%len(c.Clients)] }
	env := &consulEnv{
		admin:      func() *api.Client { return clusterAdmin(c) },
		workerAddr: func(i int) string { return node(i).Addr },
		workerNode: node,
		controller: func() []string { return c.Clients[0].Env() },
	}
	// Controller replicas first: they are part of the system under test
	// from the first acquisition.
	dir := logDir(t, "nemesis-controllers")
	for i := range 2 {
		r := &replica{name: fmt.Sprintf("controller-%d", i+1), node: c.Clients[i], dir: dir}
		if err := r.start(); err != nil {
			n.fatalf("starting %s: %v", r.name, err)
		}
		t.Cleanup(r.stop)
		n.replicas = append(n.replicas, r)
	}
	n.limits = []LimitChange{{At: time.Now(), Limit: nemesisLimits[0]}}
	mutexPhase.env, handoffPhase.env, semPhase.env = env, env, env
	n.mutex = newHarness(t, mutexPhase)
	n.handoff = newHarness(t, handoffPhase)
	n.sem = newHarness(t, semPhase)
	if n.mutex.lock.Prefix != mutexPrefix || n.handoff.lock.Prefix != handoffPrefix || n.sem.lock.Prefix != semPrefix {
		n.fatalf("the runners' token grants %s, %s and %s, the harness declared %s, %s and %s", mutexPrefix, handoffPrefix, semPrefix,
			n.mutex.lock.Prefix, n.handoff.lock.Prefix, n.sem.lock.Prefix)
	}
	n.once = newOnceWorkload(n)
	n.eph = newEphemeralWorkload(n)
	return n
}

// harnessLockName is the name newHarness gives the lock of ph.
func harnessLockName(ph phase) string { return fmt.Sprintf("faults-%s-%d", ph.name, os.Getpid()) }

// createNemesisRunnerToken creates the token of the nemesis's `consullock
// run` workers and OpenTofu applies (runnerSecret) with the rules
// consullock_acl_policy renders for them (aclrules.RenderRules): key write
// on the mutexes' keys, the waiter queue grant on their prefixes
// (queue_prefixes: their waiters queue), key_prefix write on the
// semaphore's prefix, sessions
// on the client nodes, and read on the registry. Nothing else under
// faults/: a runner that could not write its queue entry would warn and
// race, and the nemesis counts those warnings.
func createNemesisRunnerToken(admin *api.Client, nodes, mutexPrefixes []string, semPrefix string) error {
	in := aclrules.RulesInput{QueuePrefixes: mutexPrefixes, SemaphorePrefixes: []string{semPrefix}, SessionNodePrefixes: nodes}
	for _, prefix := range mutexPrefixes {
		mutex, err := lockmodel.Lock{Name: "mutex", Prefix: prefix, Waiters: lockmodel.WaitersQueue}.Normalize()
		if err != nil {
			return err
		}
		in.LockKeys = append(in.LockKeys, mutex.Key)
	}
	if err := in.Validate(); err != nil {
		return fmt.Errorf("the nemesis runners' rules: %w", err)
	}
	rules := aclrules.RenderRules(in) + fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	policy, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "faults-nemesis-runner", Rules: rules}, nil)
	if err != nil {
		return fmt.Errorf("creating the nemesis runners' policy: %w", err)
	}
	if _, _, err := admin.ACL().TokenCreate(&api.ACLToken{AccessorID: runnerAccessor, SecretID: runnerSecret,
		Description: "nemesis runners", Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil); err != nil {
		return fmt.Errorf("creating the nemesis runners' token: %w", err)
	}
	return nil
}

// replica is one `consullock controller -mode enforce` replica: one
// process at a time, started again after the nemesis kills it. Each
// process logs (JSON) to a file of its own, so that the checker reads one
// process's history as that process's: leadership is a process's.
type replica struct {
	name string
	node *testenv.Node
	dir  string
	env  []string // added to its environment at its next start (a clock skew)
	// command, when set, is run instead of `consullock controller -mode
	// enforce` (the harness's own test).
	command []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	f      *os.File
	starts int      // processes started so far
	logs   []string // one log per process, in start order
}

// process names the replica's k-th process (from 1), as its events do.
func (r *replica) process(k int) string { return fmt.Sprintf("%s#%d", r.name, k) }

// start starts a process unless one runs: the undo of a kill whose
// injection came late can come after the next kill of the replica found it
// down, and two starts must not leave two processes (the first would run
// on, never killed again, as an extra contender).
func (r *replica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	path := filepath.Join(r.dir, fmt.Sprintf("%s.%d.log", r.name, r.starts+1))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	argv := r.command
	if argv == nil {
		argv = []string{runnerBin, "controller", "-mode", "enforce", "-listen", ""}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	if r.node != nil {
		cmd.Env = append(cmd.Env, r.node.Env()...)
	}
	cmd.Env = append(cmd.Env, r.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return err
	}
	r.starts++
	r.logs = append(r.logs, path)
	r.cmd, r.f = cmd, f
	return nil
}

// kill SIGKILLs the running process and returns when it is gone, with its
// name ("" when none ran).
func (r *replica) kill() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return ""
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	_ = r.f.Close()
	r.cmd = nil
	return r.process(r.starts)
}

// killed records the kill of process (none when "").
func (n *nemesis) killed(r *replica, process string) {
	if process == "" {
		return
	}
	n.mu.Lock()
	n.events = append(n.events, ControllerEvent{At: time.Now(), Replica: r.name, Process: process, Kind: CtlKilled})
	n.mu.Unlock()
}

// stop ends the replica as an operator would (SIGTERM: it releases its
// leader lock).
func (r *replica) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	_ = r.f.Close()
	r.cmd = nil
}

// run injects the schedule's steps at their offsets, then undoes whatever
// is still in force and waits for the cluster to recover.
func (n *nemesis) run(steps []Step) {
	n.steps = steps
	start := time.Now()
	var wg sync.WaitGroup
	for i, s := range steps {
		select {
		case <-time.After(time.Until(start.Add(s.At))):
		case <-n.mutex.ctx.Done():
			return
		}
		n.inject(i, s, &wg)
	}
	// The end of the schedule: a fault timed to a command's exit that has
	// not struck is skipped; every fault still in force is undone.
	n.mu.Lock()
	if n.armed != nil {
		n.skipped[n.armed.s.Kind]++
		n.armed = nil
	}
	pending := n.undos
	n.undos = map[int]func(){}
	n.mu.Unlock()
	for _, undo := range pending {
		undo()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.cluster.WaitHealthy(ctx); err != nil {
		n.errorf("the cluster did not recover after the schedule: %v", err)
	}
	// Liveness: every workload of `consullock run` hands over again once
	// every fault is undone.
	for _, h := range []struct {
		name  string
		ctx   context.Context
		store *Store
	}{{n.mutex.ph.name, n.mutex.ctx, n.mutex.store}, {n.handoff.ph.name, n.handoff.ctx, n.handoff.store}, {n.sem.ph.name, n.sem.ctx, n.sem.store}, {"nemesis-once", n.once.ctx, n.once.store}} {
		mark := h.store.Mark("", "nemesis: schedule over, every fault undone")
		wctx, wcancel := context.WithTimeout(h.ctx, 2*time.Minute)
		_, err := h.store.WaitFor(wctx, func(log []Write) bool {
			for _, w := range log[mark.Seq:] {
				if w.Kind == KindStart && w.Accepted {
					return true
				}
			}
			return false
		})
		wcancel()
		if err != nil {
			n.errorf("%s: no holder started within 2 minutes after every fault was undone", h.name)
		}
	}
}

// inject applies one step with its fault's Inject (an AtExit fault is
// armed instead: fireOnceExit injects it); a fault that is undone
// registers its undo, run after s.For (or at the end of the schedule).
func (n *nemesis) inject(i int, s Step, wg *sync.WaitGroup) {
	f := faultNamed(s.Kind)
	if f.Spec().AtExit {
		n.armOnceExit(i, s, wg)
		n.t.Logf("nemesis step %d: %s (armed for %s)", i, s, OnceExitArmed)
		return
	}
	undo, ok := f.Inject(n, shot{i: i, s: s, wg: wg})
	n.count(s.Kind, ok)
	n.t.Logf("nemesis step %d: %s (injected: %v)", i, s, ok)
	n.undoAfter(i, s, undo, wg)
}

// count counts a step of kind injected (ok) or skipped.
func (n *nemesis) count(kind FaultKind, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ok {
		n.injected[kind]++
	} else {
		n.skipped[kind]++
	}
}

// undoAfter runs undo (nil: none) s.For from now, or at the end of the
// schedule.
func (n *nemesis) undoAfter(i int, s Step, undo func(), wg *sync.WaitGroup) {
	if undo == nil {
		return
	}
	once := sync.OnceFunc(undo)
	wg.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	timer := time.AfterFunc(s.For, func() {
		defer wg.Done()
		n.mu.Lock()
		delete(n.undos, i)
		n.mu.Unlock()
		once()
	})
	// At the end of the schedule: undone at once, the timer stopped.
	n.undos[i] = func() {
		if timer.Stop() {
			wg.Done()
		}
		once()
	}
}

// armedExit is an armed AtExit fault (FaultSpec.AtExit): step i,
// waiting for a run-once command to end.
type armedExit struct {
	i  int
	s  Step
	wg *sync.WaitGroup
}

// armOnceExit arms step i: the next run-once command to end within
// OnceExitArmed fires it (fireOnceExit); else it is skipped.
func (n *nemesis) armOnceExit(i int, s Step, wg *sync.WaitGroup) {
	a := &armedExit{i: i, s: s, wg: wg}
	n.mu.Lock()
	n.armed = a
	n.mu.Unlock()
	time.AfterFunc(OnceExitArmed, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.armed == a {
			n.armed = nil
			n.skipped[s.Kind]++
		}
	})
}

// fireOnceExit injects the armed AtExit fault, if any, as the command of
// a run-once worker ends (the once front calls it with the end it
// applied, before it answers the command).
func (n *nemesis) fireOnceExit(end Write) {
	n.mu.Lock()
	a := n.armed
	n.armed = nil
	if a != nil {
		// Taken before the end of the schedule disarms: its undo is
		// registered before run's Wait can return.
		a.wg.Add(1)
		defer a.wg.Done()
	}
	n.mu.Unlock()
	if a == nil {
		return
	}
	undo, ok := faultNamed(a.s.Kind).Inject(n, shot{i: a.i, s: a.s, wg: a.wg, end: end})
	n.count(a.s.Kind, ok)
	n.t.Logf("nemesis step %d: %s struck as the command of %s ended (injected: %v)", a.i, a.s, end.Worker, ok)
	n.undoAfter(a.i, a.s, undo, a.wg)
}

func replicaIndex(target string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(target, "controller-"))
	return i - 1
}

func (n *nemesis) target(s Step) *harness {
	switch s.Target {
	case "semaphore":
		return n.sem
	case "handoff":
		return n.handoff
	}
	return n.mutex
}

// lockTarget is what the faults on one holder need of a workload: its
// store, its lock key and the runner of a start it logged.
type lockTarget struct {
	ctx      context.Context
	store    *Store
	key      string
	runnerOf func(start Write) *os.Process
}

func (n *nemesis) lockTarget(s Step) lockTarget {
	if s.Target == "once" {
		return lockTarget{n.once.ctx, n.once.store, n.once.lock.Key, n.once.runnerOf}
	}
	h := n.target(s)
	return lockTarget{h.ctx, h.store, h.lock.Key, h.holderRunner}
}

// admin runs a management write on a running server, retrying Consul's
// transient errors (a leader just killed) for up to 30s.
func (n *nemesis) admin(op func(*api.Client) error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := testenv.RetryWhile(ctx, consul.IsTransientText, func() error { return op(clusterAdmin(n.cluster)) })
	if err != nil {
		n.t.Logf("nemesis: admin write failed: %v", err)
	}
	return err == nil
}

// holder returns a current holder of h's lock whose runner still runs
// (the latest accepted start with no end or abort after it), waiting up to
// 3s for one: jobs are short, and a lock may be between holders.
func (n *nemesis) holder(h lockTarget) (Write, *os.Process) {
	var found Write
	var p *os.Process
	ctx, cancel := context.WithTimeout(h.ctx, 3*time.Second)
	defer cancel()
	_, _ = h.store.WaitFor(ctx, func(log []Write) bool {
		ended := map[string]bool{}
		for i := len(log) - 1; i >= 0; i-- {
			w := log[i]
			switch w.Kind {
			case KindEnd, KindAbort:
				ended[w.Run] = true
			case KindStart:
				if w.Accepted && !ended[w.Run] && running(w.PID) {
					if p = h.runnerOf(w); p != nil {
						found = w
						return true
					}
				}
			}
		}
		return false
	})
	return found, p
}

func (n *nemesis) markAll(note string) {
	n.mutex.store.Mark("", note)
	n.handoff.store.Mark("", note)
	n.sem.store.Mark("", note)
	n.once.store.Mark("", note)
}

// clientNode is the client node s targets (client-N, by name or else by
// number), marked in every store as faulted by s.
func (n *nemesis) clientNode(s Step) *testenv.Node {
	var node *testenv.Node
	for _, c := range n.cluster.Clients {
		if c.Name == s.Target {
			node = c
		}
	}
	if node == nil {
		i, _ := strconv.Atoi(strings.TrimPrefix(s.Target, "client-"))
		node = n.cluster.Clients[(i-1)%len(n.cluster.Clients)]
	}
	n.markAll(fmt.Sprintf("nemesis: %s %s", s.Kind, node.Name))
	return node
}

// clusterFaultsInForce names the faults on the cluster (FaultSpec.OnCluster:
// leader kill, client node faults) not yet undone, other than step i ("none").
func (n *nemesis) clusterFaultsInForce(i int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var in []string
	for j := range n.undos {
		if s := n.steps[j]; j != i && faultNamed(s.Kind).Spec().OnCluster {
			in = append(in, fmt.Sprintf("%s %s", s.Kind, s.Target))
		}
	}
	if len(in) == 0 {
		return "none"
	}
	slices.Sort(in)
	return strings.Join(in, ", ")
}

// check stops everything and runs the checkers on the whole history.
func (n *nemesis) check(steps []Step) {
	t := n.t
	n.eph.stop()
	n.once.stop()
	n.mutex.stop()
	n.handoff.stop()
	n.sem.stop()
	for _, r := range n.replicas {
		r.stop()
	}
	mutexRep := Check("nemesis mutex", n.mutex.store.Log(), nemesisMutexProfiles[1].Resolve().WorstCaseGap())
	handoffLog := n.handoff.store.Log()
	handoffRep := Check("nemesis handoff", handoffLog, nemesisMutexProfiles[1].Resolve().WorstCaseGap())
	n.mu.Lock()
	limits := append([]LimitChange(nil), n.limits...)
	events := append([]ControllerEvent(nil), n.events...)
	n.mu.Unlock()
	semLog := n.sem.store.Log()
	semRep := checkSemaphoreLimits("nemesis semaphore", semLog, func(at time.Time) int { return LimitAt(limits, at, limitGrace) })
	n.sem.mu.Lock()
	spawns := slices.Clone(n.sem.spawns)
	n.sem.mu.Unlock()
	inversions, judged, inversionExamples := SemaphoreTokenInversions(semLog, spawns)
	exits := map[int]int{}
	for _, h := range []*harness{n.mutex, n.handoff, n.sem} {
		h.mu.Lock()
		for code, k := range h.exits {
			exits[code] += k
		}
		h.mu.Unlock()
	}
	unexpected, codes := UnexpectedExits(exits, nemesisAllowedExits)
	n.once.mu.Lock()
	onceExits := maps.Clone(n.once.exits)
	n.once.mu.Unlock()
	onceUnexpected, onceCodes := UnexpectedExits(onceExits, nemesisOnceAllowedExits)
	onceLog := n.once.store.Log()
	onceRep := Check("nemesis once", onceLog, n.once.profile.Resolve().WorstCaseGap())
	runs := n.once.results()
	onceViolations, onceEvidence := RunOnceViolations(runs)
	unrecorded, unrecordedEvidence := SuccessExitsNotRecorded(runs)
	strikes := n.stopAtExitStrikes(onceLog)
	stopViolations, stopJudged, stopEvidence := StopAtExitViolations(strikes, runs)
	n.mu.Lock()
	treeKills := slices.Clone(n.treeKills)
	n.mu.Unlock()
	var survivors []string
	for _, k := range treeKills {
		if k.gone < 0 {
			survivors = append(survivors, fmt.Sprintf("%s of %s: the command's process group %d (running at the kill: %v) still had a live process %s after", k.kind, k.worker, k.pid, k.alive, treeGoneBound))
		}
	}
	mutexLog := n.mutex.store.Log()
	type ephFigures struct{ executions, completed, racing int }
	eph := map[*harness]*ephFigures{n.mutex: {}, n.handoff: {}}
	for h, f := range eph {
		for _, w := range h.store.Log() {
			if strings.HasPrefix(w.Worker, ephemeralWorker) && w.Accepted {
				switch w.Kind {
				case KindStart:
					f.executions++
					if w.Worker == ephemeralKeyWorker {
						f.racing++
					}
				case KindEnd:
					f.completed++
				}
			}
		}
	}
	queue, handoffQueue := n.queueFigures(n.mutex), n.queueFigures(n.handoff)
	// The stalls after a waiter kill, judged against the longest profile's
	// bound (a session keeps the ttl it was created with).
	stallBound := waiterKillMargin
	for _, p := range nemesisMutexProfiles {
		stallBound = max(stallBound, p.Resolve().WorstCaseGap()+waiterKillMargin)
	}
	stalls := map[*harness][]WaiterKillStall{n.mutex: WaiterKillStalls(mutexLog), n.handoff: WaiterKillStalls(handoffLog)}
	var stallsOver []string
	for _, h := range []*harness{n.mutex, n.handoff} {
		for _, k := range stalls[h] {
			if k.Judged && k.Stall > stallBound {
				stallsOver = append(stallsOver, fmt.Sprintf("%s: a waiter killed at %s stalled the lock %s (bound %s)", h.lock.Name, k.At.Format("15:04:05.000"), k.Stall.Round(time.Millisecond), stallBound))
			}
		}
	}
	applies, applyMedian, applyFailures := n.eph.figures()
	for _, r := range n.replicas {
		r.mu.Lock()
		logs := slices.Clone(r.logs)
		r.mu.Unlock()
		for k, path := range logs {
			f, err := os.Open(path)
			if err != nil {
				n.fatalf("%v", err)
			}
			ev, err := ParseControllerLog(r.name, r.process(k+1), f)
			_ = f.Close()
			if err != nil {
				n.fatalf("reading %s: %v", path, err)
			}
			events = append(events, ev...)
		}
	}
	ctlWrites, writeEvidence := ControllerWritesAfterLoss(events)
	// A max_hold end is the skew's when it ended a skewed runner's
	// hold, or was decided by a replica running skewed.
	sessionWorker := map[string]string{}
	for _, w := range slices.Concat(mutexLog, handoffLog) {
		if w.Session != "" {
			sessionWorker[w.Session] = w.Worker
		}
	}
	n.mu.Lock()
	windows := slices.Clone(n.skewWindows)
	skewExits := maps.Clone(n.skewExits)
	n.mu.Unlock()
	leaderships, repairs, maxHoldEnds := 0, 0, 0
	var skewedEnds []string
	for _, e := range events {
		switch e.Kind {
		case CtlBecameLeader:
			leaderships++
		case CtlRepaired:
			repairs++
			if !strings.Contains(e.Detail, compliance.ReasonMaxHoldExceeded) {
				continue
			}
			maxHoldEnds++
			session := sessionIn.FindString(e.Detail)
			skewed := strings.HasPrefix(sessionWorker[session], "skew-")
			for _, w := range windows {
				skewed = skewed || w.target == e.Replica && !e.At.Before(w.from) && (w.to.IsZero() || !e.At.After(w.to))
			}
			if skewed {
				skewedEnds = append(skewedEnds, fmt.Sprintf("%s by %s, holder %s: %s", e.At.Format("15:04:05.000"), e.Replica, cmp.Or(sessionWorker[session], "?"), e.Detail))
			}
		}
	}

	checkers := []struct {
		name  string
		count int
		what  func() string // the evidence, rendered only for a violation
	}{
		{"mutual exclusion: mutex overlaps among accepted writes (runners and ephemeral lock)", mutexRep.Overlaps, func() string { return dumpLog(mutexLog) }},
		{"mutual exclusion: hand-off mutex overlaps among accepted writes (runners and ephemeral lock)", handoffRep.Overlaps, func() string { return dumpLog(handoffLog) }},
		{"mutual exclusion: semaphore holders above the limit", semRep.Overlaps, func() string { return dumpLog(semLog) }},
		{"mutual exclusion: run-once overlaps among accepted writes", onceRep.Overlaps, func() string { return dumpLog(onceLog) }},
		{"fencing: mutex stale tokens accepted", mutexRep.StaleAccepted, func() string { return dumpLog(mutexLog) }},
		{"fencing: hand-off mutex stale tokens accepted", handoffRep.StaleAccepted, func() string { return dumpLog(handoffLog) }},
		{"fencing: run-once stale tokens accepted", onceRep.StaleAccepted, func() string { return dumpLog(onceLog) }},
		{"fencing: tokens used by two executions (mutexes + semaphore + run once)", mutexRep.Duplicated + handoffRep.Duplicated + semRep.Duplicated + onceRep.Duplicated, func() string {
			return dumpLog(mutexLog) + dumpLog(handoffLog) + dumpLog(semLog) + dumpLog(onceLog)
		}},
		{"fencing: semaphore holder whose token is not above one admitted before its runner started", inversions, func() string { return strings.Join(inversionExamples, "\n") }},
		{"run once: run IDs not succeeded exactly once (effect applied twice, two succeeded attempts, a success without its effect, or more runners exiting 0 than commands completed)", onceViolations, func() string { return strings.Join(onceEvidence, "\n") + "\n" + dumpLog(onceLog) }},
		{"run once: runners that exited 0 for a success the ledger does not record (their attempt read crashed)", unrecorded, func() string {
			return strings.Join(unrecordedEvidence, "\n") + "\nsee the logs in " + n.once.dir
		}},
		{"kills of runner and guard, group kills: job trees with a live process " + treeGoneBound.String() + " after the kill", len(survivors), func() string {
			return strings.Join(survivors, "\n")
		}},
		{"stop at a run-once command's exit: runs not recorded succeeded once, with the stopped runner exiting 0 (judged strikes)", stopViolations, func() string {
			return strings.Join(stopEvidence, "\n") + "\nsee the logs in " + n.once.dir
		}},
		{"runner exits the guide does not allow", unexpected + onceUnexpected, func() string {
			return fmt.Sprintf("codes %v in %s; run-once runners: codes %v in %s", codes, exitsText(exits), onceCodes, exitsText(onceExits))
		}},
		{"controller writes without leadership", ctlWrites, func() string { return strings.Join(writeEvidence, "\n") }},
		{"queued waiters: mutex runners that raced for want of the queue grant", queue.counts.NoGrant + handoffQueue.counts.NoGrant, func() string {
			return "see the logs in " + n.mutex.dir + " and " + n.handoff.dir
		}},
		{`queued waiters: hand-offs on the mutex declared waiters = "queue" (only "handoff" hands the lock over)`, queue.counts.HandedIn + queue.counts.HandedOut, func() string {
			return "see the logs in " + n.mutex.dir
		}},
		{"queued waiters: stalls after a first waiter in line was killed above 2 x ttl + lock_delay + " + waiterKillMargin.String(), len(stallsOver), func() string {
			return strings.Join(stallsOver, "\n") + "\nsee the logs in " + n.mutex.dir + " and " + n.handoff.dir
		}},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis summary, seed %d, schedule %d steps\n\n", n.seed, len(steps))
	b.WriteString("| fault | scheduled | injected | skipped (no holder, cluster not healthy, or controller replica down already) |\n|---|---:|---:|---:|\n")
	scheduled := map[FaultKind]int{}
	for _, s := range steps {
		scheduled[s.Kind]++
	}
	totalInjected := 0
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", k, scheduled[k], n.injected[k], n.skipped[k])
		totalInjected += n.injected[k]
	}
	fmt.Fprintf(&b, "| **total** | %d | %d | |\n\n", len(steps), totalInjected)
	b.WriteString("| workload | executions | hand-overs | completed | interrupted | stale writes rejected | longest fenced overlap |\n|---|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| mutex | %d | %d | %d | %d | %d | %s |\n", mutexRep.Executions, mutexRep.HandOvers, mutexRep.Completed, mutexRep.Interrupted, mutexRep.StaleRejected, mutexRep.MaxFencedOverlap.Round(time.Millisecond))
	fmt.Fprintf(&b, "| of which ephemeral lock (tofu apply; %d by its key, racing) | %d | | %d | %d | | |\n", eph[n.mutex].racing, eph[n.mutex].executions, eph[n.mutex].completed, eph[n.mutex].executions-eph[n.mutex].completed)
	fmt.Fprintf(&b, "| hand-off mutex | %d | %d | %d | %d | %d | %s |\n", handoffRep.Executions, handoffRep.HandOvers, handoffRep.Completed, handoffRep.Interrupted, handoffRep.StaleRejected, handoffRep.MaxFencedOverlap.Round(time.Millisecond))
	fmt.Fprintf(&b, "| of which ephemeral lock (tofu apply; %d by its key, racing) | %d | | %d | %d | | |\n", eph[n.handoff].racing, eph[n.handoff].executions, eph[n.handoff].completed, eph[n.handoff].executions-eph[n.handoff].completed)
	fmt.Fprintf(&b, "| semaphore (limit %v) | %d | %d | %d | %d | | |\n", nemesisLimits, semRep.Executions, semRep.HandOvers, semRep.Completed, semRep.Interrupted)
	fmt.Fprintf(&b, "| run once (%d run IDs) | %d | %d | %d | %d | %d | %s |\n", len(runs), onceRep.Executions, onceRep.HandOvers, onceRep.Completed, onceRep.Interrupted, onceRep.StaleRejected, onceRep.MaxFencedOverlap.Round(time.Millisecond))
	handOvers := mutexRep.HandOvers + handoffRep.HandOvers + semRep.HandOvers + onceRep.HandOvers
	fmt.Fprintf(&b, "| **total** | %d | %d | | | | |\n\n", mutexRep.Executions+handoffRep.Executions+semRep.Executions+onceRep.Executions, handOvers)
	for _, g := range []struct {
		name string
		gaps []time.Duration
	}{{"mutex (queued runners and applies, racing applies)", mutexRep.Gaps}, {"hand-off mutex (queued runners and applies handed the lock, racing applies)", handoffRep.Gaps}, {"run once (racing)", onceRep.Gaps}} {
		p50, p99, longest := GapFigures(g.gaps)
		fmt.Fprintf(&b, "hand-over gaps, %s: one execution's end to the next's start, %d gaps: p50 %s, p99 %s, max %s\n",
			g.name, len(g.gaps), p50.Round(time.Millisecond), p99.Round(time.Millisecond), longest.Round(time.Millisecond))
	}
	b.WriteString("\n")
	for _, q := range []struct {
		h       *harness
		name    string
		figures queueFigures
	}{{n.mutex, "mutex", queue}, {n.handoff, "hand-off mutex", handoffQueue}} {
		fmt.Fprintf(&b, "waiter queue (%s, waiters = %q): runners' waits begun first in line %d, behind another %d; raced for want of the grant %d, entry refused %d; "+
			"hand-offs: %d runners handed the lock, %d releases handing it over; entries left at the end: %d of a session gone, %d of a session alive%s\n",
			q.name, q.h.lock.Waiters, q.figures.counts.First, q.figures.counts.Behind, q.figures.counts.NoGrant, q.figures.counts.Refused,
			q.figures.counts.HandedIn, q.figures.counts.HandedOut, q.figures.gone, q.figures.alive, q.figures.err)
		judged, longest, longestUnjudged := 0, time.Duration(0), time.Duration(0)
		for _, k := range stalls[q.h] {
			if k.Judged {
				judged++
				longest = max(longest, k.Stall)
			} else {
				longestUnjudged = max(longestUnjudged, k.Stall)
			}
		}
		fmt.Fprintf(&b, "  waiter kills (first in line SIGKILLed): %d; stalls judged (no cluster fault meanwhile) %d, longest %s (bound %s); not judged %d, longest %s\n",
			len(stalls[q.h]), judged, longest.Round(time.Millisecond), stallBound, len(stalls[q.h])-judged, longestUnjudged.Round(time.Millisecond))
	}
	b.WriteString("\n")
	b.WriteString(onceSummary(runs) + "\n")
	b.WriteString(treeKillSummary(treeKills) + "\n")
	fmt.Fprintf(&b, "stop at a run-once command's exit (runner alone stopped %s to %s, past its guard's kill-by): %d strikes, %d judged; stopped runners' exits: %s\n\n",
		n.cfg.MinStop.Round(time.Millisecond), n.cfg.MaxStop.Round(time.Millisecond), len(strikes), stopJudged, strikeExits(strikes))
	fmt.Fprintf(&b, "clock skew: %d skews; the extra runners they started exited %s; the controllers ended %d holders for max_hold_exceeded, %d of them a skewed runner's hold or by a skewed replica%s\n\n",
		len(windows), exitsText(skewExits), maxHoldEnds, len(skewedEnds), strings.Join(append([]string{""}, skewedEnds...), "\n  - "))
	if n.eph.unsupported != "" {
		fmt.Fprintf(&b, "ephemeral lock: not run (%s)\n\n", n.eph.unsupported)
	} else {
		fmt.Fprintf(&b, "ephemeral lock: %d %s applies succeeded (median %s each, plan and apply each opening the lock); failed: %s\n\n",
			applies, n.eph.cli, applyMedian.Round(10*time.Millisecond), failuresText(applyFailures))
	}
	fmt.Fprintf(&b, "semaphore tokens: %d of %d executions judged against every execution that had started before their runner was spawned\n\n", judged, semRep.Executions)
	b.WriteString("| checker | violations |\n|---|---:|\n")
	for _, c := range checkers {
		fmt.Fprintf(&b, "| %s | %d |\n", c.name, c.count)
	}
	fmt.Fprintf(&b, "\nrunner exits: %s; run-once runner exits: %s; controller: %d leaderships, %d repairs\nreplay: %s\n", exitsText(exits), exitsText(onceExits), leaderships, repairs, n.replay)
	t.Log(b.String())
	if root, err := testenv.RepoRoot(); err == nil {
		_ = os.WriteFile(filepath.Join(root, "tmp", "nemesis-report.md"), []byte(b.String()), 0o644)
	}
	for _, c := range checkers {
		if c.count != 0 {
			n.errorf("%s: %d (must be 0)\n%s", c.name, c.count, c.what())
		}
	}
	for _, q := range []struct {
		h      *harness
		counts QueueCounts
	}{{n.mutex, queue.counts}, {n.handoff, handoffQueue.counts}} {
		if q.counts.Queued() == 0 {
			n.errorf("the runners of %s never queued (waiters = %q): see the logs in %s", q.h.lock.Name, q.h.lock.Waiters, q.h.dir)
		}
	}
	if handoffQueue.counts.HandedIn == 0 {
		n.errorf("no runner of %s was handed the lock (waiters = %q; %d releases logged handing it over): see the logs in %s",
			n.handoff.lock.Name, n.handoff.lock.Waiters, handoffQueue.counts.HandedOut, n.handoff.dir)
	}
	if n.eph.unsupported == "" && applies == 0 {
		n.errorf("ephemeral lock: no OpenTofu apply succeeded (see %s)", n.eph.log)
	}
	// The hand-overs are a figure, not a bound: how many fit in the
	// schedule's 30 minutes depends on the machine's load (5,409 at load
	// 26 to 29, over 15,000 at 9 to 11), and a verdict must not. What the
	// schedule injects is its own.
	if os.Getenv("FAULTS_FULL") != "" && os.Getenv("NEMESIS_LENGTH") == "" {
		if totalInjected < 500 {
			n.errorf("%d faults injected; the long schedule must reach 500", totalInjected)
		}
	}
}

// queueFigures are what a mutex's waiter queue did: the queue events in
// its runners' logs (the workers' and, on the queue mutex, the skewed
// runners'), and the entries left under the queue folder once every runner
// has stopped.
type queueFigures struct {
	counts      QueueCounts
	gone, alive int
	err         string // why the entries could not be read
}

func (n *nemesis) queueFigures(h *harness) queueFigures {
	var q queueFigures
	logs, _ := filepath.Glob(filepath.Join(h.dir, "*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			n.errorf("%v", err)
			continue
		}
		if err := CountQueueLines(f, &q.counts); err != nil {
			n.errorf("reading %s: %v", path, err)
		}
		_ = f.Close()
	}
	var pairs api.KVPairs
	sessions := map[string]bool{}
	if !n.admin(func(c *api.Client) error {
		var err error
		if pairs, _, err = c.KV().List(lockmodel.WaiterQueuePrefix(h.lock), &api.QueryOptions{RequireConsistent: true}); err != nil {
			return err
		}
		all, _, err := c.Session().List(&api.QueryOptions{RequireConsistent: true})
		for _, s := range all {
			sessions[s.ID] = true
		}
		return err
	}) {
		q.err = " (could not be read)"
		return q
	}
	q.gone, q.alive = QueueLeftovers(lockproto.QueueEntries(pairs), func(s string) bool { return sessions[s] })
	return q
}

// onceSummary is the run-once workload's line: run IDs by ledger outcome,
// the attempt that succeeded, and the commands the job's guard kept from
// applying a run's effect twice.
func onceSummary(runs []OnceRun) string {
	outcomes := map[string]int{}
	firstAttempt, repeats, rewaved := 0, 0, 0
	stopped := ""
	for _, r := range runs {
		o := r.Outcome
		if o == "" {
			o = "unread (" + r.LedgerError + ")"
		}
		if r.Stopped {
			stopped += fmt.Sprintf("; run %s stopped by the end of the test: %s", r.ID, o)
		} else {
			outcomes[o]++
		}
		if r.Outcome == string(ledger.RunSucceeded) && r.Attempts == 1 {
			firstAttempt++
		}
		repeats += r.Repeats
		if r.Waves > 1 {
			rewaved++
		}
	}
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(outcomes)) {
		parts = append(parts, fmt.Sprintf("%s %d", o, outcomes[o]))
	}
	return fmt.Sprintf("run once: %d run IDs, ledger outcomes: %s; succeeded at attempt 1: %d; runners started again (no runner decided the run): %d; "+
		"commands that succeeded after their run's effect was applied (the documented window, kept from applying it twice by the job's guard): %d%s\n",
		len(runs), strings.Join(parts, ", "), firstAttempt, rewaved, repeats, stopped)
}

func failuresText(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d x %q", m[k], k))
	}
	return strings.Join(parts, "; ")
}

// sessionIn finds a session ID in a controller event's detail.
var sessionIn = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func exitsText(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	return exits(m)
}
