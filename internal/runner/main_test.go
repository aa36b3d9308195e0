package runner

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// helperEnv makes the test binary act as the child command (helperMain)
// instead of running tests; the runner passes its environment on.
const helperEnv = "CONSULLOCK_RUNNER_TEST_CHILD"

var (
	agent     *testenv.Agent
	runnerBin string // the consullock binary, built once
	childBin  string // this test binary, run as the child
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if childBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "runner tests:", err)
		return 1
	}
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runner tests:", err)
		return 1
	}
	runnerBin = filepath.Join(root, "tmp", "consullock")
	if err := testenv.BuildConsullock(ctx, runnerBin); err != nil {
		fmt.Fprintln(os.Stderr, "runner tests: building consullock:", err)
		return 1
	}
	if agent, err = testenv.Start(ctx, testenv.Options{DNS: true}); err != nil {
		fmt.Fprintln(os.Stderr, "runner tests: starting Consul:", err)
		return 1
	}
	defer agent.Stop()
	defer removeTestdataBins()
	return m.Run()
}

// ---------------------------------------------------------------------------
// The child command: this test binary with CONSULLOCK_RUNNER_TEST_CHILD=1.

// helperMain records "start" (with the CONSUL_LOCK_* it was given), waits
// (-sleep, until stdin ends with -wait-stdin, or until the file -until
// exists), records "end" and exits
// with -exit. On SIGTERM it records "term" and exits 143, or with
// -on-term=ignore carries on.
func helperMain(args []string) int {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	record := fs.String("record", "", "file to append events to")
	tag := fs.String("tag", "", "name of this child in the record")
	sleep := fs.Duration("sleep", 0, "how long to run")
	waitStdin := fs.Bool("wait-stdin", false, "run until stdin ends")
	until := fs.String("until", "", "run until this file exists (a gate the test opens)")
	exitCode := fs.Int("exit", 0, "exit code")
	onTerm := fs.String("on-term", "exit", "exit or ignore")
	spawn := fs.String("spawn", "", "start a copy of this child with this tag in the background (same process group), sleeping 5m, and do not wait for it")
	spawnOnTerm := fs.String("spawn-on-term", "exit", "-on-term of the spawned copy")
	heartbeat := fs.String("heartbeat", "", "only append \"<pid> <unix ns>\" to this file every -every, until killed")
	every := fs.Duration("every", 5*time.Millisecond, "the interval of -heartbeat")
	stderrBytes := fs.Int("stderr", 0, "write this many bytes of -stderr-byte to stderr first, then \"END\"")
	stderrByte := fs.String("stderr-byte", "x", "the byte -stderr repeats")
	stdoutBytes := fs.Int("stdout", 0, "write this many bytes of \"o\" to stdout first, then \"OUT\"")
	if err := fs.Parse(args); err != nil {
		return 99
	}
	if *stdoutBytes > 0 {
		_, _ = os.Stdout.WriteString(strings.Repeat("o", *stdoutBytes) + "OUT")
	}
	if *stderrBytes > 0 {
		_, _ = os.Stderr.WriteString(strings.Repeat(*stderrByte, *stderrBytes) + "END")
	}
	if *heartbeat != "" {
		beatForever(*heartbeat, *every)
	}
	if *spawn != "" {
		bg := exec.Command(os.Args[0], "-record", *record, "-tag", *spawn, "-sleep", "5m", "-on-term", *spawnOnTerm)
		bg.Env = os.Environ()
		if err := bg.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "child: spawn:", err)
			return 97
		}
		// Wait until the copy has recorded its start (and set up its
		// signal handling), so that the test sees it.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if data, _ := os.ReadFile(*record); strings.Contains(string(data), "tag="+*spawn+" ") {
				break
			}
		}
	}
	terms := make(chan os.Signal, 4)
	signal.Notify(terms, syscall.SIGTERM)
	write := func(kind string, extra ...string) {
		f, err := os.OpenFile(*record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(98)
		}
		fields := append([]string{kind, "tag=" + *tag, "at=" + strconv.FormatInt(time.Now().UnixNano(), 10)}, extra...)
		_, _ = f.WriteString(strings.Join(fields, " ") + "\n")
		_ = f.Close()
	}
	write("start",
		"index="+os.Getenv(EnvLockIndex), "token="+os.Getenv(EnvFencingToken), "session="+os.Getenv(EnvLockSession),
		"held="+os.Getenv(EnvLockHeld), "key="+os.Getenv(EnvLockKey), "pid="+strconv.Itoa(os.Getpid()),
		"run="+os.Getenv(EnvRunID), "attempt="+os.Getenv(EnvAttempt), "scheduled="+os.Getenv(EnvScheduledTime))
	done := make(chan struct{})
	go func() {
		switch {
		case *waitStdin:
			_, _ = io.Copy(io.Discard, os.Stdin)
		case *until != "":
			for _, err := os.Stat(*until); err != nil; _, err = os.Stat(*until) {
				time.Sleep(10 * time.Millisecond)
			}
		default:
			time.Sleep(*sleep)
		}
		close(done)
	}()
	for {
		select {
		case <-terms:
			write("term")
			if *onTerm != "ignore" {
				write("end")
				return 143
			}
		case <-done:
			write("end")
			return *exitCode
		}
	}
}

// beatForever appends "<pid> <unix ns>" to path every interval until the
// process is killed: the sign that a process of a job still acts.
func beatForever(path string, every time.Duration) {
	pid := strconv.Itoa(os.Getpid())
	for {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: heartbeat:", err)
			os.Exit(96)
		}
		_, _ = f.WriteString(pid + " " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\n")
		_ = f.Close()
		time.Sleep(every)
	}
}

// childRun is one child's life as recorded.
type childRun struct {
	tag           string
	start, end    time.Time
	ended, termed bool
	index, token  uint64
	session, key  string
	held          string
	pid           int
	runID         string // CONSUL_LOCK_RUN_ID
	attempt       string // CONSUL_LOCK_ATTEMPT
	scheduled     string // CONSUL_LOCK_SCHEDULED_TIME
}

// readRuns parses a record file into one childRun per tag, in start order.
func readRuns(t testing.TB, path string) []*childRun {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	byTag := map[string]*childRun{}
	var order []*childRun
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		kv := map[string]string{}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		ns, _ := strconv.ParseInt(kv["at"], 10, 64)
		at := time.Unix(0, ns)
		r := byTag[kv["tag"]]
		if r == nil {
			r = &childRun{tag: kv["tag"]}
			byTag[r.tag] = r
			order = append(order, r)
		}
		switch fields[0] {
		case "start":
			r.start = at
			r.index, _ = strconv.ParseUint(kv["index"], 10, 64)
			r.token, _ = strconv.ParseUint(kv["token"], 10, 64)
			r.session, r.key, r.held = kv["session"], kv["key"], kv["held"]
			r.pid, _ = strconv.Atoi(kv["pid"])
			r.runID, r.attempt, r.scheduled = kv["run"], kv["attempt"], kv["scheduled"]
		case "end":
			r.end, r.ended = at, true
		case "term":
			r.termed = true
		}
	}
	slices.SortFunc(order, func(a, b *childRun) int { return a.start.Compare(b.start) })
	return order
}

// maxConcurrent is the largest number of runs that overlap in time.
func maxConcurrent(runs []*childRun) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		edges = append(edges, edge{r.start, +1}, edge{r.end, -1})
	}
	// Ends sort before starts at the same instant: touching is not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// ---------------------------------------------------------------------------
// Processes.

// proc is a started consullock or consul process.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	stdin  io.WriteCloser
	done   chan struct{}
	code   int
	exited time.Time
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// processEnv is the test's environment without CONSUL_*, plus the Consul
// address, token and the child switch.
func processEnv(addr, token string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			env = append(env, kv)
		}
	}
	return append(env, "CONSUL_HTTP_ADDR="+addr, "CONSUL_HTTP_TOKEN="+token, helperEnv+"=1")
}

func startProc(t testing.TB, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	return startProcWith(t, name, env, &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, bin, args...)
}

// startProcWith is startProc with the process attributes attr (a process
// group of its own, for a test that kills the group).
func startProcWith(t testing.TB, name string, env []string, attr *syscall.SysProcAttr, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = 5 * time.Second
	p.cmd.SysProcAttr = attr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.exited = time.Now()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() || os.Getenv("RUNNER_TEST_VERBOSE") != "" {
			t.Logf("--- output of %s (%s):\n%s", name, strings.Join(p.cmd.Args, " "), p.out.String())
		}
	})
	return p
}

// startRun starts `consullock run <args> -- <child> <childArgs>` against
// the agent.
func startRun(t testing.TB, name, token string, args []string, childArgs ...string) *proc {
	t.Helper()
	return startRunAt(t, name, agent.Addr, token, args, childArgs...)
}

// startRunAt is startRun against the Consul HTTP address addr.
func startRunAt(t testing.TB, name, addr, token string, args []string, childArgs ...string) *proc {
	t.Helper()
	full := append([]string{"run"}, args...)
	full = append(full, "--", childBin)
	full = append(full, childArgs...)
	return startProc(t, name, processEnv(addr, token), runnerBin, full...)
}

// agentProxy serves handle in front of the agent's HTTP API at addr
// (host:port), for the tests that watch, hold or fail a runner's
// requests: forward passes a request on to the agent. It returns the
// proxy's host:port for CONSUL_HTTP_ADDR; the proxy closes when the test
// ends, its connections first.
func agentProxy(t testing.TB, addr string, handle func(w http.ResponseWriter, r *http.Request, forward http.Handler)) string {
	t.Helper()
	target, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(w, r, forward) }))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// startConsulLock starts `consul lock [-n N] -shell=false <prefix> <child> <childArgs>`
// with the management token (consul lock needs agent read).
func startConsulLock(t testing.TB, name string, limit int, prefix string, childArgs ...string) *proc {
	t.Helper()
	args := []string{"lock", "-shell=false", "-child-exit-code"}
	if limit > 1 {
		args = append(args, "-n", strconv.Itoa(limit))
	}
	args = append(args, prefix, childBin)
	args = append(args, childArgs...)
	return startProc(t, name, processEnv(agent.Addr, agent.ManagementToken), agent.Bin, args...)
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s; output:\n%s", p.name, timeout, p.out.String())
		return -1
	}
}

func (p *proc) closeStdin() { _ = p.stdin.Close() }

func childArgs(record, tag string, extra ...string) []string {
	return append([]string{"-record", record, "-tag", tag}, extra...)
}

// ---------------------------------------------------------------------------
// Consul fixtures.

var nameCounter atomic.Uint64

// uniqueName is a lock or profile name no other test uses.
func uniqueName(t testing.TB, what string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, t.Name())
	if len(clean) > 80 {
		clean = clean[:80]
	}
	return fmt.Sprintf("%s-%s-%d", clean, what, nameCounter.Add(1))
}

// declare writes the declarations of l (and of profile p when not nil)
// into the default registry with the management token, and creates the
// lock key as the provider does (create-only, with the protocol's flags).
// It returns the normalised lock.
func declare(t testing.TB, l lockmodel.Lock, p *lockmodel.SessionProfile) lockmodel.Lock {
	t.Helper()
	return declareAt(t, agent.Client(), l, p)
}

// declareAt is declare through the Consul client c (a management token).
func declareAt(t testing.TB, c *api.Client, l lockmodel.Lock, p *lockmodel.SessionProfile) lockmodel.Lock {
	t.Helper()
	kv := c.KV()
	if p != nil {
		l.SessionDefaults = p.Name
		rec, err := record.EncodeSessionProfileRecord(*p)
		if err != nil {
			t.Fatal(err)
		}
		put(t, kv, lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, p.Name), rec, 0)
	}
	rec, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	put(t, kv, lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, l.Name), rec, 0)
	n, err := l.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	var value []byte
	if n.IsSemaphore() {
		value = lockmodel.NewSemaphoreValue(n.Limit)
	}
	put(t, kv, n.Key, value, n.Flags())
	return n
}

func put(t testing.TB, kv *api.KV, key string, value []byte, flags uint64) {
	t.Helper()
	ok, _, err := kv.CAS(&api.KVPair{Key: key, Value: value, Flags: flags}, nil)
	if err != nil || !ok {
		t.Fatalf("create %s: ok=%v err=%v", key, ok, err)
	}
}

// runnerToken mints a least-privilege token for runners of locks under
// prefix: key write on the prefix, read on the registry, and session write
// on this agent's node only. No agent read: the runner needs none.
func runnerToken(t testing.TB, prefix string) string {
	t.Helper()
	rules := fmt.Sprintf(`key_prefix %q { policy = "write" }
key_prefix "%s/" { policy = "read" }
session %q { policy = "write" }
`, prefix, lockmodel.DefaultRegistryPrefix, agent.NodeName)
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// waitKey waits with blocking queries until cond holds for key (nil when
// absent) and returns the pair.
func waitKey(t testing.TB, key string, timeout time.Duration, cond func(*api.KVPair) bool) *api.KVPair {
	t.Helper()
	return waitKeyAt(t, agent.Client(), key, timeout, cond)
}

// waitKeyAt is waitKey through the Consul client c.
func waitKeyAt(t testing.TB, c *api.Client, key string, timeout time.Duration, cond func(*api.KVPair) bool) *api.KVPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kv := c.KV()
	var index uint64
	for {
		pair, meta, err := kv.Get(key, (&api.QueryOptions{WaitIndex: index, WaitTime: 2 * time.Second, RequireConsistent: true}).WithContext(ctx))
		if ctx.Err() != nil {
			t.Fatalf("key %s: condition not met within %s (last: %+v)", key, timeout, pair)
		}
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if cond(pair) {
			return pair
		}
		index = consul.NextIndex(index, meta.LastIndex)
	}
}

func heldByOther(than string) func(*api.KVPair) bool {
	return func(p *api.KVPair) bool { return p != nil && p.Session != "" && p.Session != than }
}

func notHeld(p *api.KVPair) bool { return p == nil || p.Session == "" }

// waitSemaphoreHolders waits until the semaphore under prefix lists n live
// holders.
func waitSemaphoreHolders(t testing.TB, prefix string, n int, timeout time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kv := agent.Client().KV()
	var index uint64
	for {
		pairs, meta, err := kv.List(prefix+"/", (&api.QueryOptions{WaitIndex: index, WaitTime: 2 * time.Second}).WithContext(ctx))
		if ctx.Err() != nil {
			t.Fatalf("semaphore %s: %d holders not reached within %s", prefix, n, timeout)
		}
		if err != nil {
			t.Fatal(err)
		}
		var live []string
		for _, p := range pairs {
			if p.Key != prefix+"/.lock" {
				continue
			}
			st, err := lockmodel.DecodeSemaphoreState(p.Value)
			if err != nil {
				t.Fatal(err)
			}
			table := st
			lockproto.PruneDeadHolders(table, pairs)
			for h := range table.Holders {
				live = append(live, h)
			}
		}
		if len(live) >= n {
			return live
		}
		index = consul.NextIndex(index, meta.LastIndex)
	}
}

// sessionsNamed lists the sessions on the agent's node with the given name.
func sessionsNamed(t testing.TB, name string) []*api.SessionEntry {
	t.Helper()
	all, _, err := agent.Client().Session().Node(agent.NodeName, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.SessionEntry
	for _, s := range all {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// fastProfile is the profile most tests use: the minimum TTL and a short
// lock-delay, so that failures show quickly.
func fastProfile(t testing.TB, lockDelay time.Duration) *lockmodel.SessionProfile {
	return &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: lockDelay}
}

// waitStarted waits until the child tagged tag has recorded its start (and
// so has set up its signal handling). Files offer no blocking query, so
// this polls.
func waitStarted(t testing.TB, record, tag string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		for _, r := range readRuns(t, record) {
			if r.tag == tag && !r.start.IsZero() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %s did not start within 30s", tag)
		}
	}
}

// waitOutput waits until the process has written text (a log event that
// marks a state with no other outside sign). It polls.
func waitOutput(t testing.TB, p *proc, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if strings.Contains(p.out.String(), text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within 30s:\n%s", p.name, text, p.out.String())
		}
	}
}

// sameStrings reports whether a and b hold the same strings, in any order
// (nil and empty are the same).
func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
