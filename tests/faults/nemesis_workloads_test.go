package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The nemesis's workloads beyond the supervised `consullock run` workers
// of nemesis_test.go: run once (runners started per run ID), the
// ephemeral lock held by real OpenTofu applies, and the runners a clock
// skew starts.

// nemesisOnceAllowedExits are the run-once runners' allowed exits: the
// mutex workers' (nemesisAllowedExits), plus 121 (the run used up its
// attempts) and 122 (-exit-code-if-done: the run had already succeeded,
// the command was not started), from the runner guide's "Exit codes".
// 120 is the runner's ExitOutcomeNotRecorded: the command exited, its
// outcome could not be recorded (a fault struck as it ended).
var nemesisOnceAllowedExits = append([]int{ledger.ExitRunExhausted, ledger.ExitRunAlreadySucceededDistinct, 120}, nemesisAllowedExits...)

const (
	// onceWork is how long a run-once command works.
	onceWork = 100 * time.Millisecond
	// onceMaxWaves: a run whose runners all exited without deciding it
	// (none ran it to success, found it done or exhausted: killed, lost,
	// their agent down) is started again, as a scheduler's retry would,
	// up to this many times.
	onceMaxWaves = 4
	// onceMaxAttempts is the run-once lock's run_once.max_attempts.
	onceMaxAttempts = 5
)

// onceWorkload runs IDs once-0001, once-0002, ... one after the other: for
// each, one `consullock run -lock L -run-id ID -exit-code-if-done 122` per
// client node, started together, whose command writes to the workload's
// guarded store through its front (the job's own guard: a run's effect
// applied once, see OnceEffects). After its runners exit, the run's
// ledger entry is read.
type onceWorkload struct {
	n       *nemesis
	ctx     context.Context
	cancel  context.CancelFunc
	store   *Store
	url     string // the front
	lock    lockmodel.Lock
	profile lockmodel.SessionProfile
	secret  string // the runners' token: never logged
	dir     string
	done    chan struct{}

	mu    sync.Mutex
	procs map[int]*os.Process // running runners by pid
	runs  map[string]*OnceRun
	order []string
	exits map[int]int
	// exitOf is each runner's exit code by its worker name (OnceWorker).
	exitOf map[string]int
}

func newOnceWorkload(n *nemesis) *onceWorkload {
	t := n.t
	ctx, cancel := context.WithCancel(context.Background())
	o := &onceWorkload{n: n, ctx: ctx, cancel: cancel, dir: logDir(t, "nemesis-once"), done: make(chan struct{}),
		procs: map[int]*os.Process{}, runs: map[string]*OnceRun{}, exits: map[int]int{}, exitOf: map[string]int{}}
	var err error
	if o.store, err = NewStore("127.0.0.1:0"); err != nil {
		n.fatalf("%v", err)
	}
	t.Cleanup(o.store.Close)
	o.url = newOnceFront(t, o.store, n.fireOnceExit)
	name := fmt.Sprintf("faults-nemesis-once-%d", os.Getpid())
	o.profile = NemesisOnceProfile
	o.profile.Name = name
	// The run-once lock's waiters race (no waiters declared), while the
	// mutex workload's queue: the nemesis covers both modes.
	l := lockmodel.Lock{Name: name, Prefix: "faults/" + name, SessionDefaults: name,
		RunOnce: &ledger.RunOnce{Period: time.Hour, MaxAttempts: onceMaxAttempts}}
	if o.lock, err = l.Normalize(); err != nil {
		n.fatalf("%v", err)
	}
	admin := clusterAdmin(n.cluster)
	prof, err := record.EncodeSessionProfileRecord(o.profile)
	if err != nil {
		n.fatalf("%v", err)
	}
	rec, err := record.EncodeLockRecord(o.lock)
	if err != nil {
		n.fatalf("%v", err)
	}
	kv := admin.KV()
	for key, value := range map[string][]byte{
		lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, name): prof,
		lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, name):            rec,
	} {
		if _, err := kv.Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
			n.fatalf("declaring the run-once lock: %v", err)
		}
	}
	if ok, _, err := kv.CAS(&api.KVPair{Key: o.lock.Key, Flags: o.lock.Flags()}, nil); err != nil || !ok {
		n.fatalf("creating %s: ok=%v err=%v", o.lock.Key, ok, err)
	}
	// The worker token of a run-once lock (runner guide, ACL rules): the
	// lock key, the declarations, the lock's run ledger, sessions on the
	// client nodes.
	rules := fmt.Sprintf("key %q { policy = \"write\" }\nkey_prefix \"%s/\" { policy = \"read\" }\nkey %q { policy = \"write\" }\n",
		o.lock.Key, lockmodel.DefaultRegistryPrefix, record.RunLedgerKey(lockmodel.DefaultRegistryPrefix, name))
	for _, c := range n.cluster.Clients {
		rules += fmt.Sprintf("session %q { policy = \"write\" }\n", c.Name)
	}
	policy, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "faults-nemesis-once", Rules: rules}, nil)
	if err != nil {
		n.fatalf("creating the run-once runners' policy: %v", err)
	}
	o.secret = testenv.NewUUID()
	if _, _, err := admin.ACL().TokenCreate(&api.ACLToken{SecretID: o.secret, Description: "nemesis run-once runners",
		Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil); err != nil {
		n.fatalf("creating the run-once runners' token: %v", err)
	}
	go o.drive()
	t.Cleanup(o.stop)
	return o
}

// newOnceFront serves the run-once store's writes with the job's own
// guard (examples/run-once): the end of a run ID whose effect is applied
// already is logged with OnceRepeatNote instead of applying it again.
// ended is called with each end applied, as logged, before the answer
// lets its command exit.
func newOnceFront(t *testing.T, store *Store, ended func(end Write)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := map[string]bool{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(rw http.ResponseWriter, r *http.Request) {
		var in Write
		if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 1<<16)).Decode(&in); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		id := OnceRunID(in.Worker)
		if in.Kind == KindEnd && id != "" {
			in.Note = OnceEffectNote
			if done[id] {
				in.Note = OnceRepeatNote
			}
		}
		out := store.Apply(in)
		applied := out.Accepted && out.Kind == KindEnd && id != ""
		if applied {
			done[id] = true
		}
		mu.Unlock()
		if applied {
			ended(out)
		}
		rw.Header().Set("Content-Type", "application/json")
		if !out.Accepted {
			rw.WriteHeader(http.StatusConflict)
		}
		_ = json.NewEncoder(rw).Encode(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// drive runs one run ID after the other until stopped.
func (o *onceWorkload) drive() {
	defer close(o.done)
	for i := 1; o.ctx.Err() == nil; i++ {
		id := fmt.Sprintf("once-%04d", i)
		run := &OnceRun{ID: id, Exits: map[int]int{}}
		o.mu.Lock()
		o.runs[id], o.order = run, append(o.order, id)
		o.mu.Unlock()
		for wave := 1; wave <= onceMaxWaves && o.ctx.Err() == nil; wave++ {
			o.mu.Lock()
			run.Waves = wave
			o.mu.Unlock()
			decided := false
			for _, code := range o.wave(id, wave) {
				o.mu.Lock()
				run.Exits[code]++
				o.exits[code]++
				o.mu.Unlock()
				decided = decided || code == 0 || code == ledger.ExitRunExhausted || code == ledger.ExitRunAlreadySucceededDistinct
			}
			if decided {
				break
			}
			select {
			case <-o.ctx.Done():
			case <-time.After(time.Second):
			}
		}
		o.mu.Lock()
		run.Stopped = o.ctx.Err() != nil
		o.mu.Unlock()
		o.readLedger(run)
	}
}

// wave starts one runner of run id per client node and returns their
// exit codes.
func (o *onceWorkload) wave(id string, wave int) []int {
	var wg sync.WaitGroup
	codes := make([]int, len(o.n.cluster.Clients))
	for j, node := range o.n.cluster.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[j] = o.runner(id, fmt.Sprintf("%s.%d", node.Name, wave), node)
		}()
	}
	wg.Wait()
	return codes
}

// runner runs one run-once runner to its end and returns its exit code
// (128+N when a signal ended it).
func (o *onceWorkload) runner(id, name string, node *testenv.Node) int {
	f, err := os.OpenFile(filepath.Join(o.dir, node.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		o.n.errorf("%v", err)
		return -1
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(runnerBin, "run", "-lock", o.lock.Name, "-run-id", id,
		"-exit-code-if-done", fmt.Sprint(ledger.ExitRunAlreadySucceededDistinct), "-grace", NemesisOnceGrace.String(), "--",
		childBin, "-work", onceWork.String())
	cmd.Env = append(cleanEnv(), "CONSUL_HTTP_ADDR="+node.Addr, "CONSUL_HTTP_TOKEN="+o.secret,
		childEnv+"=1", storeEnv+"="+o.url, workerEnv+"="+OnceWorker(id, name))
	cmd.Env = append(cmd.Env, o.n.skewEnv(node.Name)...)
	cmd.Stdout, cmd.Stderr = f, f
	// A group of its own: group-kill kills the runner's group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	o.mu.Lock()
	if o.ctx.Err() != nil {
		o.mu.Unlock()
		return childTermed
	}
	if err := cmd.Start(); err != nil {
		o.mu.Unlock()
		o.n.errorf("run-once runner %s: %v", name, err)
		return -1
	}
	o.procs[cmd.Process.Pid] = cmd.Process
	o.mu.Unlock()
	_ = cmd.Wait()
	code := exitCode(cmd)
	o.mu.Lock()
	delete(o.procs, cmd.Process.Pid)
	o.exitOf[OnceWorker(id, name)] = code
	o.mu.Unlock()
	_, _ = fmt.Fprintf(f, "=== nemesis: run %s runner %s pid %d exited %d\n", id, name, cmd.Process.Pid, code)
	return code
}

// exitCode is a finished command's exit code, 128+N when signal N ended
// it.
func exitCode(cmd *exec.Cmd) int {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// readLedger records what the run ledger says of run (a consistent read,
// riding out an election).
func (o *onceWorkload) readLedger(run *OnceRun) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pair *api.KVPair
	_, err := testenv.RetryWhile(ctx, consul.IsTransientText, func() error {
		var err error
		pair, _, err = clusterAdmin(o.n.cluster).KV().Get(record.RunLedgerKey(lockmodel.DefaultRegistryPrefix, o.lock.Name),
			(&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		return err
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err != nil:
		run.LedgerError = err.Error()
		return
	case pair == nil:
		run.LedgerError = "no ledger"
		return
	}
	stopped := ""
	if o.ctx.Err() != nil {
		stopped = ", stopped by the end of the schedule"
	}
	led, err := record.DecodeLedger(pair.Value)
	if err != nil {
		run.LedgerError = err.Error()
		return
	}
	i := led.Find(run.ID)
	if i < 0 {
		run.LedgerError = "not in the ledger" + stopped
		return
	}
	r := led.Runs[i]
	run.Outcome, run.Attempts = string(r.Outcome), len(r.Attempts)
	for _, a := range r.Attempts {
		run.AttemptOutcomes = append(run.AttemptOutcomes, string(a.Outcome))
		if a.Outcome == ledger.RunSucceeded {
			run.SucceededAttempts++
		}
	}
}

// runnerOf returns the running runner of the execution that logged start.
func (o *onceWorkload) runnerOf(start Write) *os.Process {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.procs[start.RunnerPID]
}

// stop ends the driver: the runners get SIGTERM (a waiter exits 143, a
// holder's command aborts), and the run being driven is read.
func (o *onceWorkload) stop() {
	if o.ctx.Err() != nil {
		<-o.done
		return
	}
	o.mu.Lock()
	o.cancel()
	for _, p := range o.procs {
		_ = p.Signal(syscall.SIGCONT)
		_ = p.Signal(syscall.SIGTERM)
	}
	o.mu.Unlock()
	select {
	case <-o.done:
	case <-time.After(time.Minute):
		o.mu.Lock()
		for _, p := range o.procs {
			_ = p.Kill()
		}
		o.mu.Unlock()
		<-o.done
	}
}

// results returns the runs in order, with their effects from the store.
func (o *onceWorkload) results() []OnceRun {
	o.mu.Lock()
	defer o.mu.Unlock()
	byID := map[string]*OnceRun{}
	for id, r := range o.runs {
		c := *r
		byID[id] = &c
	}
	OnceEffects(o.store.Log(), byID)
	var out []OnceRun
	for _, id := range o.order {
		out = append(out, *byID[id])
	}
	return out
}

// ephemeralWorkload applies, one after the other, a small OpenTofu
// configuration that holds a mutex workload's lock with the ephemeral
// consullock_lock while a local-exec provisioner runs the same child as
// the runners, with the ephemeral's fencing token: its writes go to the
// mutex's guarded store, under the same checkers. Each apply opens the
// lock twice (plan and apply). The applies alternate between the two
// mutexes (waiters = "queue", then "handoff") and, on each, between the
// two ways of naming the lock: by its declaration (lock = name: the
// declared waiters apply, the ephemeral queues as the runners do, and on
// the hand-off mutex is handed the lock and hands it on) and by its key
// with inline session settings (key = ...: no declaration, so it races for
// the key as `consul lock` would), so that racers and queued waiters
// contend for the same key.
type ephemeralWorkload struct {
	n      *nemesis
	ctx    context.Context
	cancel context.CancelFunc
	tf     *testenv.Tofu
	log    string
	done   chan struct{}
	// cli names the CLI; unsupported says why the workload did not run
	// (a CLI without ephemeral resources: OpenTofu before 1.11).
	cli, unsupported string

	mu       sync.Mutex
	applies  []time.Duration // succeeded applies' durations
	failures map[string]int  // failed applies by their first error line
}

// The ephemeral workload's worker names in the mutex store: ephemeralWorker
// for the applies that hold the lock by its declaration (queued),
// ephemeralKeyWorker for those that hold its key (racing). Both begin
// with ephemeralWorker.
const (
	ephemeralWorker    = "tofu"
	ephemeralKeyWorker = "tofu-key"
)

func newEphemeralWorkload(n *nemesis) *ephemeralWorkload {
	t := n.t
	ctx, cancel := context.WithCancel(context.Background())
	e := &ephemeralWorkload{n: n, ctx: ctx, cancel: cancel, done: make(chan struct{}), failures: map[string]int{},
		log: filepath.Join(logDir(t, "nemesis-ephemeral"), "applies.log")}
	t.Cleanup(e.stop)
	info, err := testenv.DetectCLI()
	if err != nil {
		n.fatalf("the CLI for the ephemeral lock workload: %v", err)
	}
	e.cli = info.Name + " " + info.Version
	if !info.Has(testenv.FeatureEphemeralResources) {
		e.unsupported = e.cli + " has no ephemeral resources"
		close(e.done)
		return e
	}
	// The provider is the consullock binary the runners use.
	plugins := t.TempDir()
	if err := os.Symlink(runnerBin, filepath.Join(plugins, testenv.ProviderFile)); err != nil {
		n.fatalf("%v", err)
	}
	if e.tf, err = testenv.NewTofuWorkspace(plugins, t.TempDir()); err != nil {
		n.fatalf("OpenTofu for the ephemeral lock workload: %v", err)
	}
	go e.drive()
	return e
}

// config is the configuration of an apply that holds h's mutex by its
// declaration (byKey false: it queues) or by its key with the profile's
// first variant inline (byKey true: it races).
func (e *ephemeralWorkload) config(h *harness, byKey bool) string {
	target := fmt.Sprintf("lock = %q", h.lock.Name)
	if byKey {
		p := nemesisMutexProfiles[0]
		target = fmt.Sprintf("key        = %q\n  ttl        = %q\n  lock_delay = %q", h.lock.Key, p.TTL.String(), p.LockDelay.String())
	}
	return ephemeralProviderConfig + fmt.Sprintf(`
ephemeral "consullock_lock" "mutex" {
  %s
  wait = "2m"
}

resource "terraform_data" "work" {
  provisioner "local-exec" {
    command = %q
    environment = {
      CONSUL_LOCK_FENCING_TOKEN = ephemeral.consullock_lock.mutex.fencing_token
      CONSUL_LOCK_SESSION       = ephemeral.consullock_lock.mutex.session
    }
  }
}
`, target, fmt.Sprintf("exec '%s' -work 200ms", childBin))
}

const ephemeralProviderConfig = `terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}

provider "consullock" {}
`

// drive applies the configuration until stopped, through each client
// agent in turn, each apply from an empty state (so that the provisioner
// runs), every other one holding the lock by its key (racing), two on the
// queue mutex then two on the hand-off mutex.
func (e *ephemeralWorkload) drive() {
	defer close(e.done)
	f, err := os.Create(e.log)
	if err != nil {
		e.n.errorf("%v", err)
		return
	}
	defer func() { _ = f.Close() }()
	for i := 0; e.ctx.Err() == nil; i++ {
		node := e.n.cluster.Clients[i%len(e.n.cluster.Clients)]
		_ = os.Remove(filepath.Join(e.tf.Dir, "terraform.tfstate"))
		byKey, worker, h := i%2 == 1, ephemeralWorker, e.n.mutex
		if byKey {
			worker = ephemeralKeyWorker
		}
		if i/2%2 == 1 {
			h = e.n.handoff
		}
		if err := os.WriteFile(filepath.Join(e.tf.Dir, "main.tf"), []byte(e.config(h, byKey)), 0o600); err != nil {
			e.n.errorf("%v", err)
			return
		}
		e.tf.Env = append(cleanEnv(), "CONSUL_HTTP_ADDR="+node.Addr, "CONSUL_HTTP_TOKEN="+runnerSecret,
			childEnv+"=1", storeEnv+"="+h.storeURL, workerEnv+"="+worker)
		actx, cancel := context.WithTimeout(e.ctx, 5*time.Minute)
		cmd := e.tf.Command(actx, "apply", "-auto-approve", "-input=false", "-no-color")
		// Stopped like a cancelled CI job: SIGINT, and the CLI closes the
		// ephemeral lock.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		began := time.Now()
		err := cmd.Run()
		took := time.Since(began)
		cancel()
		_, _ = fmt.Fprintf(f, "=== apply %d (%s on %s) through %s: %v in %s\n%s\n", i, worker, h.lock.Name, node.Name, err, took.Round(time.Millisecond), out.String())
		e.mu.Lock()
		if err == nil {
			e.applies = append(e.applies, took)
		} else if e.ctx.Err() == nil {
			e.failures[applyError(out.String())]++
		}
		e.mu.Unlock()
		if err != nil {
			select {
			case <-e.ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// applyError is the first error of a CLI output, title and message on one
// line, without what varies between runs (addresses, indexes, IDs).
func applyError(out string) string {
	_, after, ok := strings.Cut(out, "Error: ")
	if !ok {
		return "no error line"
	}
	var kept []string
	for line := range strings.SplitSeq(after, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "===") {
			break
		}
		if line == "" || strings.HasPrefix(line, "with ") || strings.HasPrefix(line, "on ") || sourceLine.MatchString(line) {
			continue
		}
		kept = append(kept, line)
	}
	text := varying.ReplaceAllString(strings.Join(kept, " "), "N")
	if len(text) > 320 {
		text = text[:320] + "..."
	}
	return text
}

// varying matches numbers, IDs and addresses in an error text; sourceLine
// the configuration line the CLI quotes.
var (
	varying    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|[0-9.:]*[0-9]+`)
	sourceLine = regexp.MustCompile(`^[0-9]+: `)
)

func (e *ephemeralWorkload) stop() {
	e.cancel()
	<-e.done
}

// figures are the applies that succeeded, their median duration, and the
// failures by reason.
func (e *ephemeralWorkload) figures() (ok int, median time.Duration, failures map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := slices.Clone(e.applies)
	slices.Sort(d)
	if len(d) > 0 {
		median = d[len(d)/2]
	}
	return len(d), median, maps.Clone(e.failures)
}

// skewedRunner is the extra mutex runner a clock skew starts on a client
// node: `consullock run` restarted whenever it exits, with the node's
// skewed clock, until the skew is undone. Its exits count with the mutex
// workers'.
type skewedRunner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *nemesis) startSkewedRunner(node *testenv.Node, offset time.Duration) *skewedRunner {
	ctx, cancel := context.WithCancel(context.Background())
	s := &skewedRunner{cancel: cancel, done: make(chan struct{})}
	h := n.mutex
	worker := "skew-" + node.Name
	go func() {
		defer close(s.done)
		f, err := os.OpenFile(filepath.Join(h.dir, worker+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			n.errorf("%v", err)
			return
		}
		defer func() { _ = f.Close() }()
		for ctx.Err() == nil && h.ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, runnerBin, "run", "-lock", h.lock.Name, "-grace", runnerGrace, "--",
				childBin, "-work", h.ph.work.String())
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			cmd.WaitDelay = 30 * time.Second
			cmd.Env = append(cleanEnv(), "CONSUL_HTTP_ADDR="+node.Addr, "CONSUL_HTTP_TOKEN="+runnerSecret,
				childEnv+"=1", storeEnv+"="+h.storeURL, workerEnv+"="+worker,
				fmt.Sprintf("%s=%s", lockmodel.EnvClockOffset, offset))
			cmd.Stdout, cmd.Stderr = f, f
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				n.errorf("skewed runner on %s: %v", node.Name, err)
				return
			}
			_ = cmd.Wait()
			code := exitCode(cmd)
			_, _ = fmt.Fprintf(f, "=== nemesis: skewed runner (clock %s) pid %d exited %d\n", offset, cmd.Process.Pid, code)
			h.mu.Lock()
			h.exits[code]++
			h.mu.Unlock()
			n.mu.Lock()
			n.skewExits[code]++
			n.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(supervisorWait):
			}
		}
	}()
	return s
}

func (s *skewedRunner) stop() {
	s.cancel()
	<-s.done
}
