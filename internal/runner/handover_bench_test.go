package runner

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// handoverVariant is one subject of BenchmarkHandover: it starts a holder
// (child tagged "first", 1.5s) at the target's addr1 and, once the holder's
// child runs and the second contender waits, a waiter (child tagged
// "second", 10ms) at its addr2.
type handoverVariant struct {
	metric string
	start  func(b *testing.B, record string, tg handoverTarget) (first, second *proc)
}

// handoverTarget is the Consul a hand-over runs on: the dev agent of the
// runner tests (devAgentTarget) or a cluster (clusterTarget).
type handoverTarget struct {
	// label follows MEASURED in the figures' lines: "" or " (cluster)".
	label string
	// admin (with the management token) writes the declarations, mints
	// the tokens and waits on the keys and the sessions.
	admin *api.Client
	// managementToken is consul lock's and the floor's token (consul lock
	// needs agent read).
	managementToken string
	// consulBin runs consul lock.
	consulBin string
	// addr1 and addr2 are the HTTP addresses of the holder's and the
	// waiter's agents.
	addr1, addr2 string
	// nodes are the nodes of addr1 and addr2 (one when they are the same
	// agent): the contenders' sessions live there.
	nodes []string
}

// handoverTargetFromEnv is a cluster of three servers and two client
// agents, stopped when b ends, with BENCH_CLUSTER set, else the dev agent.
func handoverTargetFromEnv(b *testing.B) handoverTarget {
	b.Helper()
	if os.Getenv("BENCH_CLUSTER") == "" {
		return devAgentTarget()
	}
	return clusterTarget(testenv.StartClusterT(b, testenv.ClusterOptions{Servers: 3, Clients: 2}))
}

// devAgentTarget is the runner tests' dev agent, holder and waiter both
// on it.
func devAgentTarget() handoverTarget {
	return handoverTarget{admin: agent.Client(), managementToken: agent.ManagementToken, consulBin: agent.Bin,
		addr1: agent.Addr, addr2: agent.Addr, nodes: []string{agent.NodeName}}
}

// clusterTarget is c with the holder on its first client agent and the
// waiter on its second; the admin requests go to its first server.
func clusterTarget(c *testenv.Cluster) handoverTarget {
	return handoverTarget{label: " (cluster)", admin: c.Servers[0].Client(), managementToken: c.ManagementToken, consulBin: c.Bin,
		addr1: c.Clients[0].Addr, addr2: c.Clients[1].Addr, nodes: []string{c.Clients[0].Name, c.Clients[1].Name}}
}

// waitHeld waits until key is held.
func (tg handoverTarget) waitHeld(b *testing.B, key string) {
	b.Helper()
	waitKeyAt(b, tg.admin, key, 30*time.Second, heldByOther(""))
}

// waitSessions waits until n sessions on the target's nodes have a name
// that match accepts.
func (tg handoverTarget) waitSessions(b *testing.B, match func(name string) bool, n int) {
	b.Helper()
	node := "" // several nodes: every session
	if len(tg.nodes) == 1 {
		node = tg.nodes[0]
	}
	waitForSessionsAt(b, tg.admin, node, match, n)
}

// handoverVariants: consullock run, consul lock, the floor, consullock run
// with -run-id, consullock run on a lock with waiters = "queue" and with
// waiters = "handoff", and the base binary's run when BENCH_BASE_RUNNER names
// one (BENCH_VARIANTS=run,consul_lock,... picks some); the ratios are to
// consul lock.
func handoverVariants() []handoverVariant {
	vs := []handoverVariant{
		{"run", runHandover(runnerBin, false)},
		{"consul_lock", consulLockHandover},
		{"floor", floorHandover},
		{"run_id", runHandover(runnerBin, true)},
		{"queue", runHandoverWaiters(runnerBin, false, lockmodel.WaitersQueue)},
		{"handoff", runHandoverWaiters(runnerBin, false, lockmodel.WaitersHandOff)},
		{"run_pidns", runHandoverWith(runnerBin, false, "", "-tree-protection", ProtectionPIDNamespace)},
	}
	if base := os.Getenv("BENCH_BASE_RUNNER"); base != "" {
		vs = append(vs, handoverVariant{"base_run", runHandover(base, false)}, handoverVariant{"base_run_id", runHandover(base, true)})
	}
	if only := os.Getenv("BENCH_VARIANTS"); only != "" {
		vs = slices.DeleteFunc(vs, func(v handoverVariant) bool { return !slices.Contains(strings.Split(only, ","), v.metric) })
	}
	return vs
}

// runHandover starts two runners of bin on a fresh lock with consul
// lock's session settings; with runID, the lock is run once and each
// runner has a run ID of its own (the waiter, which waits without a
// session, creates one when the key goes free, then reads the ledger and
// records its attempt before its command starts).
func runHandover(bin string, runID bool) func(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
	return runHandoverWaiters(bin, runID, "")
}

// runHandoverWaiters is runHandover on a lock declared with waiters
// (lockmodel.WaitersQueue, WaitersHandOff or "").
func runHandoverWaiters(bin string, runID bool, waiters string) func(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
	return runHandoverWith(bin, runID, waiters)
}

// runHandoverWith is runHandoverWaiters with extra flags for both runners
// (-tree-protection pid-namespace).
func runHandoverWith(bin string, runID bool, waiters string, extra ...string) func(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
	return func(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
		l := lockmodel.Lock{Name: uniqueName(b, "lock"), Prefix: testenv.UniquePrefix(b.Name()), Waiters: waiters}
		if runID {
			l.RunOnce = &ledger.RunOnce{Period: time.Hour}
		}
		l = declareAt(b, tg.admin, l, consulLockProfile(b))
		token := herdToken(b, tg, l)
		args := func(id string) []string {
			if runID {
				return append([]string{"-lock", l.Name, "-run-id", id}, extra...)
			}
			return append([]string{"-lock", l.Name}, extra...)
		}
		first := startRunnerBin(b, bin, "runner 1", tg.addr1, token, args("r1"), childArgs(record, "first", "-sleep", "1500ms")...)
		tg.waitHeld(b, l.Key)
		second := startRunnerBin(b, bin, "runner 2", tg.addr2, token, args("r2"), childArgs(record, "second", "-sleep", "10ms")...)
		if runID {
			// A run-once waiter follows the held key without a session
			// and creates one when the key goes free: that is in its
			// hand-over.
			waitOutput(b, second, "holder_session=")
		} else {
			tg.waitSessions(b, func(name string) bool { return name == "consullock run "+l.Name }, 2)
		}
		return first, second
	}
}

func consulLockHandover(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
	prefix := testenv.UniquePrefix(b.Name())
	args := func(tag, sleep string) []string {
		return append([]string{"lock", "-shell=false", "-child-exit-code", prefix, benchChild(b)}, childArgs(record, tag, "-sleep", sleep)...)
	}
	first := startProc(b, "consul lock 1", processEnv(tg.addr1, tg.managementToken), tg.consulBin, args("first", "1500ms")...)
	tg.waitHeld(b, lockmodel.DefaultLockKey(prefix))
	second := startProc(b, "consul lock 2", processEnv(tg.addr2, tg.managementToken), tg.consulBin, args("second", "10ms")...)
	tg.waitSessions(b, isConsulLockSession(prefix), 2)
	return first, second
}

func floorHandover(b *testing.B, record string, tg handoverTarget) (*proc, *proc) {
	key := lockmodel.DefaultLockKey(testenv.UniquePrefix(b.Name()))
	args := func(tag, sleep string) []string {
		return append([]string{"-key", key, "--", benchChild(b)}, childArgs(record, tag, "-sleep", sleep)...)
	}
	bin := floorBin(b)
	first := startProc(b, "floor 1", processEnv(tg.addr1, tg.managementToken), bin, args("first", "1500ms")...)
	tg.waitHeld(b, key)
	second := startProc(b, "floor 2", processEnv(tg.addr2, tg.managementToken), bin, args("second", "10ms")...)
	tg.waitSessions(b, func(name string) bool { return name == "handover floor "+key }, 2)
	return first, second
}

// startRunnerBin is startRunAt with another consullock binary, running
// the benchmarks' child (benchChild).
func startRunnerBin(t testing.TB, bin, name, addr, token string, args []string, childArgs ...string) *proc {
	t.Helper()
	full := append([]string{"run"}, args...)
	full = append(full, "--", benchChild(t))
	full = append(full, childArgs...)
	return startProc(t, name, processEnv(addr, token), bin, full...)
}

// herdToken is a runner token for locks on the target's nodes, with write
// on the run ledger of each that runs once.
func herdToken(t testing.TB, tg handoverTarget, locks ...lockmodel.Lock) string {
	t.Helper()
	rules := fmt.Sprintf("key_prefix \"%s/\" { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix)
	for _, l := range locks {
		rules += fmt.Sprintf("key_prefix %q { policy = \"write\" }\nkey %q { policy = \"write\" }\n", l.Prefix, ledgerKey(l))
	}
	for _, node := range tg.nodes {
		rules += fmt.Sprintf("session %q { policy = \"write\" }\n", node)
	}
	name := uniqueName(t, "policy")
	acl := tg.admin.ACL()
	policy, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatalf("creating policy %s: %v", name, err)
	}
	tok, _, err := acl.TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
	if err != nil {
		t.Fatalf("creating token for %s: %v", name, err)
	}
	return tok.SecretID
}

// testdataBins builds the programs under testdata/ once per test binary.
var testdataBins struct {
	sync.Mutex
	paths map[string]string
}

// removeTestdataBins removes what testdataBin built (once the tests end).
func removeTestdataBins() {
	testdataBins.Lock()
	defer testdataBins.Unlock()
	for _, p := range testdataBins.paths {
		_ = os.Remove(p)
	}
}

// testdataBin builds testdata/<name> once and returns its path.
func testdataBin(t testing.TB, name string) string {
	t.Helper()
	testdataBins.Lock()
	defer testdataBins.Unlock()
	if p, ok := testdataBins.paths[name]; ok {
		return p
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "tmp", fmt.Sprintf("%s-%d", name, os.Getpid()))
	cmd := exec.Command("go", "build", "-o", path, "./internal/runner/testdata/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	if testdataBins.paths == nil {
		testdataBins.paths = map[string]string{}
	}
	testdataBins.paths[name] = path
	return path
}

// floorBin builds testdata/handoverfloor once.
func floorBin(t testing.TB) string {
	t.Helper()
	return testdataBin(t, "handoverfloor")
}

// benchChild is the command of the hand-over and herd benchmarks:
// testdata/handoverchild, a program that records its start and end and
// imports next to nothing, so that its own start-up (about 1 ms) pads every
// variant as little as a small job would. BENCH_CHILD=test uses the test
// binary instead (the tests' child, helperMain), as the benchmarks did
// before: its start-up takes several milliseconds more, the same in every
// variant.
func benchChild(t testing.TB) string {
	t.Helper()
	if os.Getenv("BENCH_CHILD") == "test" {
		return childBin
	}
	return testdataBin(t, "handoverchild")
}

// ---------------------------------------------------------------------------
// Counting Consul requests.

// recordingProxy forwards to the agent and records every request: what
// it was, when it was sent and answered, and how.
type recordingProxy struct {
	addr string
	mu   sync.Mutex
	reqs []*proxied
}

type proxied struct {
	method, path, query string
	sent, answered      time.Time // answered is zero while in flight
	status              int
}

// renewal: PUT /v1/session/renew/<id>.
func (r *proxied) renewal() bool { return strings.HasPrefix(r.path, "/v1/session/renew/") }

// refusedLock: a transaction Consul rolled back (409), which for the
// runners is a lock op that found the key held or in its lock-delay.
func (r *proxied) refusedLock() bool {
	return r.path == "/v1/txn" && r.status == http.StatusConflict
}

func (r *proxied) String() string {
	q := r.query
	if q != "" {
		q = "?" + q
	}
	return r.method + " " + r.path + q
}

func newRecordingProxy(t testing.TB) *recordingProxy {
	t.Helper()
	return newRecordingProxyTo(t, agent.Addr)
}

// newRecordingProxyTo is newRecordingProxy to the agent at addr.
func newRecordingProxyTo(t testing.TB, addr string) *recordingProxy {
	t.Helper()
	p := &recordingProxy{}
	p.addr = agentProxy(t, addr, func(w http.ResponseWriter, req *http.Request, forward http.Handler) {
		q := req.URL.Query()
		q.Del("dc")
		r := &proxied{method: req.Method, path: req.URL.Path, query: q.Encode(), sent: time.Now()}
		p.mu.Lock()
		p.reqs = append(p.reqs, r)
		p.mu.Unlock()
		sw := &testenv.StatusRecorder{ResponseWriter: w, Status: http.StatusOK}
		forward.ServeHTTP(sw, req)
		p.mu.Lock()
		r.answered, r.status = time.Now(), sw.Status
		p.mu.Unlock()
	})
	return p
}

// requestCount is what a window of requests held.
type requestCount struct {
	total, renewals, refusedLocks int
}

// count counts the requests sent in [from, to).
func (p *recordingProxy) count(from, to time.Time) requestCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c requestCount
	for _, r := range p.reqs {
		if r.sent.Before(from) || !r.sent.Before(to) {
			continue
		}
		c.total++
		switch {
		case r.renewal():
			c.renewals++
		case r.refusedLock():
			c.refusedLocks++
		}
	}
	return c
}

// pending is the number of requests still unanswered (blocking queries).
func (p *recordingProxy) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.reqs {
		if r.answered.IsZero() {
			n++
		}
	}
	return n
}

// lastSent is when the newest request other than a renewal was sent.
func (p *recordingProxy) lastSent() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.reqs) - 1; i >= 0; i-- {
		if !p.reqs[i].renewal() {
			return p.reqs[i].sent
		}
	}
	return time.Time{}
}

// timeline lists the requests with their send and answer times relative
// to zero, in send order.
func (p *recordingProxy) timeline(zero time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sb strings.Builder
	for _, r := range p.reqs {
		answered := "pending"
		if !r.answered.IsZero() {
			answered = fmt.Sprintf("%+.2fms %d", ms(r.answered.Sub(zero)), r.status)
		}
		fmt.Fprintf(&sb, "  %+9.2fms -> %-16s %s\n", ms(r.sent.Sub(zero)), answered, r)
	}
	return sb.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkHandoverProfile lists every request of one clean hand-over,
// per process, with its send and answer times relative to the end of the
// holder's command, for consullock run (and the base binary's when
// BENCH_BASE_RUNNER names one), -run-id, consul lock and the floor. Each
// process talks to Consul through a proxy of its own (which adds its own
// hop to each request: the timings are for reading the path, the
// BenchmarkHandover figures are without proxies). BENCH_CLUSTER=1 runs it
// on a cluster as BenchmarkHandover does, each proxy in front of its
// process's client agent; its lines say "MEASURED (cluster)".
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench 'HandoverProfile' -benchtime 1x ./internal/runner/
func BenchmarkHandoverProfile(b *testing.B) {
	at := handoverTargetFromEnv(b)
	variants := handoverVariants()
	steps := make([]map[string][]time.Duration, len(variants))
	for i := range steps {
		steps[i] = map[string][]time.Duration{}
	}
	for b.Loop() {
		for i, v := range variants {
			record := filepath.Join(b.TempDir(), "record")
			p1, p2 := newRecordingProxyTo(b, at.addr1), newRecordingProxyTo(b, at.addr2)
			tg := at
			tg.addr1, tg.addr2 = p1.addr, p2.addr
			first, second := v.start(b, record, tg)
			for _, p := range []*proc{first, second} {
				if code := p.wait(time.Minute); code != 0 {
					b.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
				}
			}
			runs := readRuns(b, record)
			if len(runs) != 2 {
				b.Fatalf("%s: runs = %+v", v.metric, runs)
			}
			zero := runs[0].end
			for step, d := range handoverSteps(p1, p2, zero, runs[1].start) {
				steps[i][step] = append(steps[i][step], d)
			}
			fmt.Printf("MEASURED%s %s: hand-over %.2fms (through the proxies); holder's requests:\n%swaiter's requests (its command started at %+.2fms):\n%s",
				at.label, v.metric, ms(runs[1].start.Sub(zero)), p1.timeline(zero), ms(runs[1].start.Sub(zero)), p2.timeline(zero))
			if os.Getenv("RUNNER_TEST_VERBOSE") != "" {
				fmt.Printf("child end %d, start %d\n--- %s:\n%s--- %s:\n%s", runs[0].end.UnixNano(), runs[1].start.UnixNano(), first.name, first.out, second.name, second.out)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, v := range variants {
		var sb strings.Builder
		for _, step := range handoverStepNames {
			if ds := steps[i][step]; len(ds) > 0 {
				fmt.Fprintf(&sb, " %s %.2fms", step, ms(median(ds)))
			}
		}
		fmt.Printf("MEASURED%s %s, medians of the steps (through the proxies):%s\n", at.label, v.metric, sb.String())
	}
}

// handoverStepNames are the steps of a hand-over, in order, from the end
// of the holder's command: until the holder sends its release, its
// answer, the waiter's wake-up (its blocking query answered), the
// waiter's lock request sent and answered, and its command's start.
var handoverStepNames = []string{"to_release", "release", "to_wakeup", "to_lock", "lock", "to_start"}

// handoverSteps splits one hand-over into handoverStepNames. The release
// is the holder's first write after zero; the wake-up the waiter's
// earliest answer after it was sent (not the answer to its earliest
// request: a watch sent before its key's wait may answer later), the lock
// the waiter's next write (none when the lock was handed over: to_lock and
// lock are then left out).
func handoverSteps(holder, waiter *recordingProxy, zero, started time.Time) map[string]time.Duration {
	var release, lock, wake *proxied
	holder.mu.Lock()
	for _, r := range holder.reqs {
		if release == nil && r.method != http.MethodGet && !r.sent.Before(zero) && !r.renewal() {
			release = r
		}
	}
	holder.mu.Unlock()
	if release == nil || release.answered.IsZero() {
		return nil
	}
	waiter.mu.Lock()
	defer waiter.mu.Unlock()
	for _, r := range waiter.reqs {
		if r.method == http.MethodGet && r.answered.After(release.sent) && (wake == nil || r.answered.Before(wake.answered)) {
			wake = r
		}
	}
	if wake == nil {
		return nil
	}
	for _, r := range waiter.reqs {
		if lock == nil && r.method != http.MethodGet && r.sent.After(wake.answered) && !r.renewal() {
			lock = r
		}
	}
	steps := map[string]time.Duration{
		"to_release": release.sent.Sub(zero),
		"release":    release.answered.Sub(release.sent),
		"to_wakeup":  wake.answered.Sub(release.answered),
	}
	if lock == nil || lock.sent.After(started) {
		// No lock request before the command started: the release handed
		// the lock over (waiters = "handoff") and the wake-up was the
		// acquisition; a later write is the waiter's own release.
		steps["to_start"] = started.Sub(wake.answered)
		return steps
	}
	if lock.answered.IsZero() {
		return nil
	}
	steps["to_lock"] = lock.sent.Sub(wake.answered)
	steps["lock"] = lock.answered.Sub(lock.sent)
	steps["to_start"] = started.Sub(lock.answered)
	return steps
}

// ---------------------------------------------------------------------------
// Waiting herds.

// BenchmarkHerd runs one lock with 2, 20 and 100 waiting runners
// (BENCH_HERD=2,20,100) through one counting proxy: every holder's
// command runs until the benchmark ends it, so that each hand-over is
// measured with the full herd waiting (the runner that took the lock is
// replaced by a new waiter once the herd has settled). Per size it
// reports the mean hand-over (holder's command end -> next command's
// start), the Consul requests per hand-over (renewals left out: from the
// end of the command until the herd is quiet again, the release, destroy
// and the old holder's exit included), the failed acquisitions (refused
// lock transactions) per hand-over, and the requests per second while
// nobody hands over, with the blocking queries open meanwhile. Variants:
// run, run with -run-id (a run ID per runner), queue (run on a lock
// declared with waiters = "queue": one waiter wakes per hand-over), queue
// with -run-id, handoff (waiters = "handoff": the waiter is handed the
// lock) and, with BENCH_BASE_RUNNER, the base binary; -bench
// 'Herd/^(queue|handoff)$/' picks some.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench 'Herd' -benchtime 5x -timeout 60m ./internal/runner/
func BenchmarkHerd(b *testing.B) {
	sizes := []int{2, 20, 100}
	if env := os.Getenv("BENCH_HERD"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("BENCH_HERD: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	type variant struct {
		name    string
		bin     string
		runID   bool
		waiters string // the lock's waiters: "" (race), queue or handoff
	}
	vs := []variant{{"run", runnerBin, false, ""}, {"run_id", runnerBin, true, ""}, {"queue", runnerBin, false, lockmodel.WaitersQueue},
		{"queue_run_id", runnerBin, true, lockmodel.WaitersQueue}, {"handoff", runnerBin, false, lockmodel.WaitersHandOff}}
	if base := os.Getenv("BENCH_BASE_RUNNER"); base != "" {
		vs = append(vs, variant{"base_run", base, false, ""})
	}
	for _, n := range sizes {
		for _, v := range vs {
			b.Run(fmt.Sprintf("%s/waiters=%d", v.name, n), func(b *testing.B) {
				herd(b, v.bin, n, v.runID, v.waiters)
			})
		}
	}
}

func herd(b *testing.B, bin string, waiters int, runID bool, mode string) {
	l := lockmodel.Lock{Name: uniqueName(b, "herd"), Prefix: testenv.UniquePrefix(b.Name()), Waiters: mode}
	if runID {
		l.RunOnce = &ledger.RunOnce{Period: time.Hour}
	}
	l = declare(b, l, consulLockProfile(b))
	token := herdToken(b, devAgentTarget(), l)
	proxy := newRecordingProxy(b)
	record := filepath.Join(b.TempDir(), "record")
	procs := map[string]*proc{}
	next := 0
	startOne := func() *proc {
		tag := fmt.Sprintf("h%d", next)
		next++
		args := []string{"-lock", l.Name}
		if runID {
			args = append(args, "-run-id", tag)
		}
		p := startRunnerBin(b, bin, tag, proxy.addr, token, args, childArgs(record, tag, "-wait-stdin")...)
		procs[tag] = p
		return p
	}
	all := make([]*proc, 0, waiters+1)
	for range waiters + 1 {
		all = append(all, startOne())
	}
	for _, p := range all {
		waitHerdReady(b, p, record)
	}
	settle := func() time.Time { return waitQuiet(b, proxy, 500*time.Millisecond) }
	quietFrom := settle()

	// Nobody hands over: renewals, and the blocking queries left open.
	idle := 10 * time.Second
	time.Sleep(idle)
	c := proxy.count(quietFrom, quietFrom.Add(idle))
	open := proxy.pending()

	var gaps []time.Duration
	var reqs, refused int
	handovers := 0
	for b.Loop() {
		holder := currentHolder(b, record)
		if holder == nil {
			b.Fatal("no command runs")
		}
		from := time.Now()
		procs[holder.tag].closeStdin()
		started := waitNextStart(b, record, holder.tag)
		if code := procs[holder.tag].wait(time.Minute); code != 0 {
			b.Fatalf("%s exited %d:\n%s", holder.tag, code, procs[holder.tag].out.String())
		}
		to := settle()
		hc := proxy.count(from, to)
		runs := readRuns(b, record)
		var ended *childRun
		for _, r := range runs {
			if r.tag == holder.tag {
				ended = r
			}
		}
		gaps = append(gaps, started.start.Sub(ended.end))
		reqs += hc.total - hc.renewals
		refused += hc.refusedLocks
		handovers++
		delete(procs, holder.tag)
		waitHerdReady(b, startOne(), record)
		settle()
	}
	slices.Sort(gaps)
	var sum time.Duration
	for _, g := range gaps {
		sum += g
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(sum/time.Duration(len(gaps))), "handover_ms")
	b.ReportMetric(ms(gaps[len(gaps)/2]), "handover_p50_ms")
	b.ReportMetric(float64(reqs)/float64(handovers), "requests/handover")
	b.ReportMetric(float64(refused)/float64(handovers), "failed_acquires/handover")
	b.ReportMetric(float64(c.total)/idle.Seconds(), "idle_requests/s")
	b.ReportMetric(float64(c.renewals)/idle.Seconds(), "idle_renewals/s")
	b.ReportMetric(float64(open), "idle_open_queries")
	b.Logf("MEASURED herd of %d waiters (run ID %v, waiters %q): hand-overs %v; %d requests and %d refused lock transactions over %d hand-overs; idle %s: %d requests (%d renewals), %d blocking queries open",
		waiters, runID, mode, gaps, reqs, refused, handovers, idle, c.total, c.renewals, open)
}

// waitHerdReady waits until runner p waits on the lock (it has seen a
// holder, or stands in the waiter queue) or its command runs.
func waitHerdReady(b testing.TB, p *proc, record string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for out := p.out.String(); !strings.Contains(out, "holder_session=") && !strings.Contains(out, "queue_position="); out = p.out.String() {
		if currentHolder(b, record) != nil && currentHolder(b, record).tag == p.name {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s does not wait:\n%s", p.name, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitQuiet returns once the proxy has seen no request but renewals for
// quiet, and the time of the last one.
func waitQuiet(b testing.TB, p *recordingProxy, quiet time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		last := p.lastSent()
		if time.Since(last) >= quiet {
			return last.Add(time.Nanosecond)
		}
		if time.Now().After(deadline) {
			b.Fatal("the herd does not settle")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// currentHolder is the child that started and has not ended.
func currentHolder(b testing.TB, record string) *childRun {
	for _, r := range readRuns(b, record) {
		if !r.ended {
			return r
		}
	}
	return nil
}

// waitNextStart waits until a child other than after starts, and returns it.
func waitNextStart(b testing.TB, record, after string) *childRun {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if r := currentHolder(b, record); r != nil && r.tag != after {
			return r
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatal("no next command started")
	return nil
}
