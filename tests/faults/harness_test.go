package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/runner"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The runners' least-privilege token has fixed IDs, so that it can be
// created again, identical, after a dev agent restart has lost it.
var (
	runnerAccessor = testenv.NewUUID()
	runnerSecret   = testenv.NewUUID()
)

const (
	workersPerLock = 3
	supervisorWait = 200 * time.Millisecond // a supervisor's pause before restarting a runner
	runnerGrace    = "2s"
	waitTimeout    = 2 * time.Minute // how long a hand-over may take before the test fails
	// partitionedWorker is the worker run in a network namespace.
	partitionedWorker = "w1"
)

// createRunnerToken creates the runners' policy and token on the dev agent:
// key write under faults/, read on the registry, session write on the
// agent's node.
func createRunnerToken() error {
	return createRunnerTokenOn(agent.Client(), agent.NodeName)
}

// createRunnerTokenOn creates the runners' policy and token with admin,
// with session write on each of nodes.
func createRunnerTokenOn(admin *api.Client, nodes ...string) error {
	rules := fmt.Sprintf(`key_prefix "faults/" { policy = "write" }
key_prefix "%s/" { policy = "read" }
`, lockmodel.DefaultRegistryPrefix)
	for _, node := range nodes {
		rules += fmt.Sprintf("session %q { policy = \"write\" }\n", node)
	}
	acl := admin.ACL()
	policy, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "faults-runner", Rules: rules}, nil)
	if err != nil {
		return fmt.Errorf("creating the runner policy: %w", err)
	}
	_, _, err = acl.TokenCreate(&api.ACLToken{
		AccessorID: runnerAccessor, SecretID: runnerSecret, Description: "faults runner",
		Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}},
	}, nil)
	if err != nil {
		return fmt.Errorf("creating the runner token: %w", err)
	}
	return nil
}

// phase is one fault, injected rounds times into three workers on a lock
// of its own.
type phase struct {
	name   string
	rounds int
	work   time.Duration // how long each child works
	// otherWork, when set, is the work of the workers other than
	// partitionedWorker (so that the one to partition holds often).
	otherWork time.Duration
	maxHold   time.Duration // declared max_hold (enforce phase)
	// controller runs `consullock controller -mode enforce` during the phase.
	controller bool
	// partitioned cuts worker w1 off from its agent: in a network namespace
	// where the test may make one (see partition), else through a link the
	// test controls (testenv.Link).
	partitioned bool
	// cluster runs the phase on the shared Consul cluster: workers on two
	// client nodes, w1 and w3 on client-1, w2 on client-2.
	cluster bool
	// repairController runs `consullock controller` (repair mode, with
	// leader election) against a client agent during the phase, and
	// declares a canary lock for it to restore.
	repairController bool
	// limit above 1 makes the lock a semaphore: checked by checkSemaphore.
	limit int
	// profile replaces the phase's session profile (zero: ttl 10s,
	// lock_delay 1s).
	profile lockmodel.SessionProfile
	// inject injects one fault into the holder whose start is holder, and
	// returns the start of the next holder (or fails the test).
	inject func(h *harness, holder Write) Write
	// env, when set, is where the phase runs (the nemesis's own cluster).
	env *consulEnv
	// workers is the number of workers (zero: workersPerLock).
	workers int
	// runnerArgs are more `consullock run` flags (after -grace, so they
	// may replace it), e.g. -node for agentless runners.
	runnerArgs []string
	// waiters is the lock's declared waiters (lockmodel.WaitersQueue; ""
	// races).
	waiters string
	// ownGroup starts each runner as the leader of a process group of its
	// own, so that a group kill (the nemesis's group-kill) takes the
	// runner's group and not the test's.
	ownGroup bool
	// pidNamespace runs the runners with -tree-protection pid-namespace
	// (root only); the store translates the PIDs their children report
	// (their namespace's) into the host's (hostPIDs).
	pidNamespace bool
}

// harness runs one phase: the store, the declared lock, the supervised
// workers.
type harness struct {
	t       *testing.T
	ph      phase
	ctx     context.Context
	cancel  context.CancelFunc
	store   *Store
	profile lockmodel.SessionProfile
	lock    lockmodel.Lock // normalised
	dir     string
	workers []*worker
	part    *partition    // when ph.partitioned and namespaces are available
	link    *testenv.Link // when ph.partitioned otherwise
	env     consulEnv
	canary  lockmodel.Lock // when ph.repairController
	// storeURL is where children write: the store, or for a semaphore its
	// front (semaphoreFront).
	storeURL string
	// nodeFaults are the figures of node faults (cluster phases).
	nodeFaults []nodeFaultFigure
	// leaderKills are the figures of Raft leader kills.
	leaderKills []leaderKillFigure

	mu    sync.Mutex
	exits map[int]int
	// spawns: when each runner was started (SemaphoreTokenInversions).
	spawns []RunnerSpawn
}

// worker is one `consullock run` worker and the supervisor that restarts it
// whenever it exits.
type worker struct {
	id    string
	index int
	h     *harness
	log   string
	done  chan struct{}

	mu  sync.Mutex
	cmd *exec.Cmd
}

func newHarness(t *testing.T, ph phase) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, ph: ph, ctx: ctx, cancel: cancel, dir: logDir(t, ph.name), exits: map[int]int{}}
	h.env = agentEnv()
	if ph.cluster {
		h.env = clusterEnv(t)
	}
	if ph.env != nil {
		h.env = *ph.env
	}
	listen := "127.0.0.1:0"
	if ph.partitioned {
		// The real partition where this machine lets the test make
		// network namespaces (root), else a link the test cuts: the same
		// fault for the runner (requests that hang), no privileges needed.
		// FAULTS_PARTITION=link forces the link (to check it as root).
		err := netnsAvailable()
		if os.Getenv("FAULTS_PARTITION") == "link" {
			err = errors.New("FAULTS_PARTITION=link")
		}
		if err == nil {
			h.part = newPartition(t, agent.Addr)
			listen = "0.0.0.0:0" // also reached from the namespace
		} else {
			t.Logf("no network namespace (%v): partitioning through a link the test controls", err)
			link, err := testenv.NewLink("127.0.0.1:0", agent.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(link.Close)
			h.link = link
		}
	}
	var err error
	if h.store, err = NewStore(listen); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.store.Close)
	h.storeURL = h.store.URL()
	if ph.pidNamespace {
		h.store.SetResolve(h.hostPIDs)
	}
	if ph.limit > 1 {
		h.storeURL = newSemaphoreFront(t, h.store)
	}
	name := fmt.Sprintf("faults-%s-%d", ph.name, os.Getpid())
	h.profile = ph.profile
	if h.profile.TTL == 0 {
		h.profile = lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: time.Second}
	}
	h.profile.Name = name
	l := lockmodel.Lock{Name: name, Prefix: "faults/" + name, SessionDefaults: name, MaxHold: ph.maxHold, Limit: ph.limit, Waiters: ph.waiters}
	if h.lock, err = l.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := h.declare(h.lock); err != nil {
		t.Fatal(err)
	}
	if ph.controller {
		h.startController(agent.Env(), "-mode", "enforce", "-listen", "", "-apply-grace", "0", "-no-leader-election")
	}
	if ph.repairController {
		c := lockmodel.Lock{Name: name + "-canary", Prefix: "faults/" + name + "-canary", SessionDefaults: name}
		if h.canary, err = c.Normalize(); err != nil {
			t.Fatal(err)
		}
		if err := h.declare(h.canary); err != nil {
			t.Fatal(err)
		}
		h.startController(h.env.controller(), "-mode", "repair", "-listen", "")
	}
	for i := range cmp.Or(ph.workers, workersPerLock) {
		w := &worker{id: fmt.Sprintf("w%d", i+1), index: i, h: h, done: make(chan struct{})}
		w.log = filepath.Join(h.dir, w.id+".log")
		h.workers = append(h.workers, w)
		go w.supervise()
	}
	t.Cleanup(h.stop)
	return h
}

// declare writes the profile and lock records and creates the lock key as
// the provider does (create-only, with the protocol's flags).
func (h *harness) declare(lock lockmodel.Lock) error {
	kv := h.env.admin().KV()
	prof, err := record.EncodeSessionProfileRecord(h.profile)
	if err != nil {
		return err
	}
	rec, err := record.EncodeLockRecord(lock)
	if err != nil {
		return err
	}
	if _, err := kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, h.profile.Name), Value: prof}, nil); err != nil {
		return err
	}
	if _, err := kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, lock.Name), Value: rec}, nil); err != nil {
		return err
	}
	value := []byte(nil)
	if lock.Limit > 1 {
		value = lockmodel.NewSemaphoreValue(lock.Limit)
	}
	ok, _, err := kv.CAS(&api.KVPair{Key: lock.Key, Flags: lock.Flags(), Value: value}, nil)
	if err != nil || !ok {
		return fmt.Errorf("creating %s: ok=%v err=%v", lock.Key, ok, err)
	}
	return nil
}

// reseed re-creates, after a dev agent restart lost everything, what the
// provider and the operator had created: the lock key, the Raft index
// advanced past every token the store has accepted (a restarted index
// would hand out tokens the store rejects for ever), the declarations, and
// last the runners' token, so that no runner acquires before the index is
// advanced.
func (h *harness) reseed() error {
	kv := agent.Client().KV()
	ok, _, err := kv.CAS(&api.KVPair{Key: h.lock.Key, Flags: h.lock.Flags()}, nil)
	if err != nil || !ok {
		return fmt.Errorf("creating %s: ok=%v err=%v", h.lock.Key, ok, err)
	}
	// The fencing tokens are Raft indexes, which restart low on a dev
	// agent: advance the index past the highest token accepted.
	if err := advanceRaftIndex(h.store.Highest()); err != nil {
		return err
	}
	prof, err := record.EncodeSessionProfileRecord(h.profile)
	if err != nil {
		return err
	}
	rec, err := record.EncodeLockRecord(h.lock)
	if err != nil {
		return err
	}
	if _, err := kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, h.profile.Name), Value: prof}, nil); err != nil {
		return err
	}
	if _, err := kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, h.lock.Name), Value: rec}, nil); err != nil {
		return err
	}
	return createRunnerToken()
}

// advanceRaftIndex writes a scratch key until the Raft index is above
// floor: every later acquisition's fencing token is then above it. Each
// write changes the value: Consul leaves the ModifyIndex of a key written
// with the value it already has.
func advanceRaftIndex(floor uint64) error {
	kv := agent.Client().KV()
	for i := 0; ; i++ {
		ok, resp, _, err := kv.Txn(api.KVTxnOps{{Verb: api.KVSet, Key: "faults/reseed-raft-index", Value: strconv.AppendInt(nil, int64(i), 10)}}, nil)
		if err != nil || !ok || len(resp.Results) != 1 {
			return fmt.Errorf("advancing the Raft index: ok=%v err=%v", ok, err)
		}
		if resp.Results[0].ModifyIndex > floor {
			return nil
		}
	}
}

func (h *harness) startController(consulEnv []string, args ...string) {
	cmd := exec.Command(runnerBin, append([]string{"controller"}, args...)...)
	cmd.Env = append(cleanEnv(), consulEnv...)
	logPath := filepath.Join(h.dir, "controller.log")
	f, err := os.Create(logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = f.Close()
		if h.t.Failed() {
			h.t.Logf("--- controller log:\n%s", tail(logPath, 40))
		}
	})
}

// cleanEnv is the test's environment without CONSUL_*.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			env = append(env, kv)
		}
	}
	return env
}

func (w *worker) supervise() {
	defer close(w.done)
	h := w.h
	f, err := os.Create(w.log)
	if err != nil {
		h.t.Error(err)
		return
	}
	defer func() { _ = f.Close() }()
	consulAddr, storeURL := h.env.workerAddr(w.index), h.storeURL
	var argv []string
	if h.part != nil && w.id == partitionedWorker {
		_, port, _ := net.SplitHostPort(h.store.ln.Addr().String())
		consulAddr, storeURL = h.part.consulAddr, "http://"+net.JoinHostPort(h.part.storeHost, port)
		argv = h.part.wrap()
	}
	if h.link != nil && w.id == partitionedWorker {
		consulAddr = h.link.Addr()
	}
	work := h.ph.work
	if h.ph.otherWork != 0 && w.id != partitionedWorker {
		work = h.ph.otherWork
	}
	argv = append(argv, runnerBin, "run", "-lock", h.lock.Name, "-grace", runnerGrace)
	argv = append(argv, h.ph.runnerArgs...)
	if h.ph.pidNamespace {
		argv = append(argv, "-tree-protection", runner.ProtectionPIDNamespace)
	}
	argv = append(argv, "--", childBin, "-work", work.String())
	env := append(cleanEnv(),
		"CONSUL_HTTP_ADDR="+consulAddr, "CONSUL_HTTP_TOKEN="+runnerSecret,
		childEnv+"=1", storeEnv+"="+storeURL, workerEnv+"="+w.id)
	for h.ctx.Err() == nil {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: h.ph.ownGroup}
		spawned := time.Now() // before the process exists
		if err := cmd.Start(); err != nil {
			h.t.Errorf("worker %s: %v", w.id, err)
			return
		}
		h.mu.Lock()
		h.spawns = append(h.spawns, RunnerSpawn{Worker: w.id, PID: cmd.Process.Pid, At: spawned})
		h.mu.Unlock()
		w.mu.Lock()
		w.cmd = cmd
		w.mu.Unlock()
		if h.ctx.Err() != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		w.mu.Lock()
		w.cmd = nil
		w.mu.Unlock()
		_, _ = fmt.Fprintf(f, "=== supervisor: runner pid %d exited %d\n", cmd.Process.Pid, code)
		h.mu.Lock()
		h.exits[code]++
		h.mu.Unlock()
		select {
		case <-h.ctx.Done():
		case <-time.After(supervisorWait):
		}
	}
}

// stop ends the workers (SIGTERM: a holder's child aborts and the lock is
// released) and waits for the supervisors.
func (h *harness) stop() {
	if h.ctx.Err() != nil {
		return
	}
	h.cancel()
	for _, w := range h.workers {
		w.mu.Lock()
		if w.cmd != nil {
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
		w.mu.Unlock()
	}
	for _, w := range h.workers {
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			w.mu.Lock()
			if w.cmd != nil {
				_ = w.cmd.Process.Kill()
			}
			w.mu.Unlock()
			<-w.done
		}
	}
	if h.t.Failed() {
		for _, w := range h.workers {
			h.t.Logf("--- log of worker %s:\n%s", w.id, tail(w.log, 30))
		}
	}
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitStart waits for an accepted start logged after seq with a token above
// minToken, and returns it.
func (h *harness) waitStart(seq int, minToken uint64) Write {
	h.t.Helper()
	var found Write
	ctx, cancel := context.WithTimeout(h.ctx, waitTimeout)
	defer cancel()
	_, err := h.store.WaitFor(ctx, func(log []Write) bool {
		for _, w := range log[min(seq+1, len(log)):] {
			if w.Kind == KindStart && w.Accepted && w.Token > minToken {
				found = w
				return true
			}
		}
		return false
	})
	if err != nil {
		h.t.Fatalf("%s: no new holder started within %s after write %d (token above %d)", h.ph.name, waitTimeout, seq, minToken)
	}
	return found
}

// holderRunner returns the running runner process of the holder that
// logged start, or nil when it has exited already.
func (h *harness) holderRunner(start Write) *os.Process {
	for _, w := range h.workers {
		if w.id != start.Worker {
			continue
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.cmd != nil && w.cmd.Process.Pid == start.RunnerPID {
			return w.cmd.Process
		}
	}
	return nil
}

// hostPIDs translates the PIDs a child in a PID namespace reports into
// the host's, as w is logged. Such a child is PID 2 of its namespace and
// its parent, the guard, is PID 1 with no parent there: it reports
// RunnerPID 0 (runnerPID). Its worker's current runner, that runner's
// guard and the guard's child whose innermost PID (NSpid) is w.PID give
// the host's PIDs. A write the translation misses (its runner gone) keeps
// RunnerPID 0, which names no runner: no fault on a holder strikes it.
func (h *harness) hostPIDs(w *Write) {
	if w.RunnerPID != 0 || w.PID == 0 || w.Kind == KindFault {
		return
	}
	for _, wk := range h.workers {
		if wk.id != w.Worker {
			continue
		}
		wk.mu.Lock()
		runnerPID := 0
		if wk.cmd != nil {
			runnerPID = wk.cmd.Process.Pid
		}
		wk.mu.Unlock()
		guard := guardOf(runnerPID)
		for _, c := range childPIDs(guard) {
			if nsPID(c) == w.PID {
				w.PID, w.RunnerPID = c, runnerPID
				return
			}
		}
	}
}

// childPIDs lists pid's children (none for pid 0).
func childPIDs(pid int) []int {
	if pid <= 0 {
		return nil
	}
	var out []int
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(field); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// guardOf is the PID of runner's guard: its child whose command line is
// the guard's (runner.GuardCommand); 0 when it has none.
func guardOf(runnerPID int) int {
	for _, c := range childPIDs(runnerPID) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(c) + "/cmdline")
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == runner.GuardCommand {
			return c
		}
	}
	return 0
}

// nsPID is pid's PID in its innermost PID namespace (the last field of
// NSpid in its status); 0 when unread.
func nsPID(pid int) int {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[len(f)-1])
				return n
			}
		}
	}
	return 0
}

// signalHolder sends sig to the holder's whole tree, as a crash or a
// paused VM takes it: its child (the child's process group: the runner
// starts it as a group leader), the runner's guard and the runner.
func signalHolder(runner *os.Process, start Write, sig syscall.Signal) {
	if err := syscall.Kill(-start.PID, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(start.PID, sig)
	}
	signalRunner(runner, sig)
}

// signalRunner sends sig to the runner and to its own children: the guard
// that runs its command (or one standing by while it waits). A guard left
// running beside a stopped runner keeps the stop rule itself (it kills the
// command at the runner's last kill-by), which is not the fault of a
// frozen holder.
func signalRunner(runner *os.Process, sig syscall.Signal) {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(runner.Pid) + "/task/*/children")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
	_ = runner.Signal(sig)
}

// run drives the phase and returns the checkers' report.
func (h *harness) run() Report {
	t := h.t
	if h.ph.inject == nil {
		// Clean hand-overs: short jobs, each followed by a release.
		ctx, cancel := context.WithTimeout(h.ctx, waitTimeout+time.Duration(h.ph.rounds)*5*time.Second)
		defer cancel()
		if _, err := h.store.WaitFor(ctx, func(log []Write) bool {
			n := 0
			for _, w := range log {
				if w.Kind == KindEnd && w.Accepted {
					n++
				}
			}
			return n >= h.ph.rounds
		}); err != nil {
			t.Fatalf("%s: %d completed runs not reached", h.ph.name, h.ph.rounds)
		}
	} else {
		seq, token := -1, uint64(0)
		var holder Write
		have := false
		for round := 0; round < h.ph.rounds; {
			if !have {
				holder = h.waitStart(seq, token)
			}
			have = false
			seq, token = holder.Seq, holder.Token
			if h.holderRunner(holder) == nil || (h.ph.partitioned && holder.Worker != partitionedWorker) {
				continue // finished before it could be hit, or not the one to hit; take the next
			}
			holder, have = h.ph.inject(h, holder), true
			round++
		}
	}
	h.stop()
	var rep Report
	if h.ph.limit > 1 {
		rep = checkSemaphore(h.ph.name, h.store.Log(), h.ph.limit)
	} else {
		rep = Check(h.ph.name, h.store.Log(), h.profile.Resolve().WorstCaseGap())
	}
	switch {
	case h.part != nil:
		rep.Fault += " (ip netns)"
	case h.link != nil:
		rep.Fault += " (link cut)"
	}
	rep.Rounds = h.ph.rounds
	rep.Exits = h.exits
	if h.ph.controller && rep.Exits[123] > rep.Executions {
		t.Errorf("%s: %d runners lost the lock (exit 123) but only %d executions started: the controller ended holders before max_hold",
			h.ph.name, rep.Exits[123], rep.Executions)
	}
	if rep.Overlaps != 0 || rep.StaleAccepted != 0 || rep.Duplicated != 0 {
		t.Errorf("%s: overlaps among accepted writes %d, stale writes accepted %d, duplicated runs %d; all must be 0\n%s",
			h.ph.name, rep.Overlaps, rep.StaleAccepted, rep.Duplicated, dumpLog(h.store.Log()))
	}
	return rep
}

func dumpLog(log []Write) string {
	var b strings.Builder
	for _, w := range log {
		fmt.Fprintf(&b, "%4d %s %-5s %-3s token=%d accepted=%v highest=%d run=%s %s\n",
			w.Seq, w.At.Format("15:04:05.000"), w.Kind, w.Worker, w.Token, w.Accepted, w.Highest, w.Run, w.Note)
	}
	return b.String()
}

// logDir is where a phase's worker and controller logs go: under
// <repo>/tmp/faults-logs/<phase>, kept after the run for reading.
func logDir(t *testing.T, name string) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		return t.TempDir()
	}
	dir := filepath.Join(root, "tmp", "faults-logs", name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
