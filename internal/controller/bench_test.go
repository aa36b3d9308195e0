package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// seed writes n lock declarations in transactions of 64 operations (the
// most one Consul transaction takes). Lock keys are spread over `segments`
// first path segments. With keys, it also creates each lock key as the
// provider does (the api-compatible flags), so that a controller starts in
// the steady state.
func seed(b *testing.B, h *harness, n, segments int, keys bool) []lockmodel.Lock {
	b.Helper()
	locks := make([]lockmodel.Lock, 0, n)
	var ops api.KVTxnOps
	flush := func() {
		if len(ops) == 0 {
			return
		}
		ok, resp, _, err := h.api.KV().Txn(ops, nil)
		if err != nil || !ok {
			b.Fatalf("txn: ok=%v err=%v %v", ok, err, resp)
		}
		ops = ops[:0]
	}
	add := func(op *api.KVTxnOp) {
		ops = append(ops, op)
		if len(ops) == 64 {
			flush()
		}
	}
	for i := range n {
		prefix := fmt.Sprintf("%s/%d", h.prefix, i)
		if segments > 1 {
			prefix = fmt.Sprintf("seg%04d/%s/%d", i%segments, h.prefix, i)
		}
		l := lockmodel.Lock{Name: fmt.Sprintf("bench-%d", i), Prefix: prefix}
		rec, err := record.EncodeLockRecord(l)
		if err != nil {
			b.Fatal(err)
		}
		l, _ = l.Normalize()
		locks = append(locks, l)
		add(&api.KVTxnOp{Verb: api.KVSet, Key: lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), Value: rec})
		if keys {
			add(&api.KVTxnOp{Verb: api.KVSet, Key: l.Key, Flags: l.Flags()})
		}
	}
	flush()
	return locks
}

// benchHarness is a harness for a benchmark (the helpers need only Helper,
// Fatal and Cleanup).
func benchHarness(b *testing.B) *harness {
	h := &harness{a: agent, api: agent.Client()}
	p := fmt.Sprintf("b/%s-%d-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-", "=", "-").Replace(b.Name())), os.Getpid(), rand.IntN(1e6))
	h.registry, h.prefix = p+"/registry", p+"/locks"
	return h
}

func startBench(b *testing.B, h *harness, mode compliance.Mode) (*Controller, func()) {
	b.Helper()
	client, err := consul.New(consul.Settings{Address: h.a.Addr, Token: h.a.ManagementToken})
	if err != nil {
		b.Fatal(err)
	}
	watcher, err := consul.New(consul.Settings{Address: h.a.Addr, Token: h.a.ManagementToken, Retry: consul.RetrySettings{MaxAttempts: 1}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Mode: mode, RegistryPrefix: h.registry, DisableHA: true, WatchClient: watcher, MaxLockWatches: benchMaxLockWatches(b)}
	if path := os.Getenv("CONTROLLER_BENCH_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		cfg.Logger = slog.New(slog.NewJSONHandler(f, nil))
	}
	c, err := New(client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return c, func() { cancel(); <-done }
}

func waitUntil(b *testing.B, timeout time.Duration, f func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			b.Fatalf("not within %s", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// repairSizes are the numbers of declared locks the repair benchmarks
// watch (BENCH_LOCKS=10,1000 to choose).
func repairSizes(b *testing.B) []int {
	sizes := []int{10, 1000, 10000}
	if v := os.Getenv("BENCH_LOCKS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_LOCKS: %q is not a list of lock counts", v)
			}
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// benchMaxLockWatches is the controllers' -max-lock-watches in the repair
// benchmarks (BENCH_MAX_LOCK_WATCHES; 0, the default, leaves the flag's
// default): the lock keys are numbered in decimal under one prefix, so a
// cap below 10 keeps them in one watch (see compliance.GroupKeys).
func benchMaxLockWatches(b *testing.B) int {
	v := os.Getenv("BENCH_MAX_LOCK_WATCHES")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("BENCH_MAX_LOCK_WATCHES: %q is not a positive number", v)
	}
	return n
}

// seeded keeps one seeded set of locks per size for the whole run: the
// benchmark framework calls a sub-benchmark more than once, and seeding
// 10,000 locks each time would dominate the run.
var seeded = map[int]*seededLocks{}

type seededLocks struct {
	h     *harness
	locks []lockmodel.Lock
}

func seedOnce(b *testing.B, n int) *seededLocks {
	b.Helper()
	if s, ok := seeded[n]; ok {
		return s
	}
	h := benchHarness(b)
	start := time.Now()
	s := &seededLocks{h: h, locks: seed(b, h, n, 1, true)}
	b.Logf("seeded %d declarations and their lock keys in %s (transactions of 64)", n, time.Since(start).Round(time.Millisecond))
	seeded[n] = s
	return s
}

// BenchmarkDriftToRepair measures the time from an out-of-band deletion of
// a lock key to its re-creation, seen by a blocking query, with a
// repair-mode controller in this process watching 10, 1,000 and 10,000
// declared locks on the real agent; also how long it takes from start to
// ready (initial sync: every watch answered, every lock decided) and its
// heap after the sync. The lock keys all share one first segment (one
// lock key watch: the largest listing a change brings).
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench 'DriftToRepair$' -benchtime 200x ./internal/controller/
func BenchmarkDriftToRepair(b *testing.B) {
	for _, n := range repairSizes(b) {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			s := seedOnce(b, n)
			start := time.Now()
			c, stop := startBench(b, s.h, compliance.ModeRepair)
			defer stop()
			waitUntil(b, 120*time.Second, c.Ready)
			synced := time.Since(start)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			lat := measureRepairs(b, s)
			reportLatencies(b, lat)
			b.ReportMetric(float64(synced.Milliseconds()), "sync_ms")
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap_MiB")
			b.ReportMetric(float64(c.LockWatches()+3), "watches")
		})
	}
}

// BenchmarkDriftToRepairBinary is BenchmarkDriftToRepair with the
// controller run as users run it: the built binary (`consullock
// controller -mode repair`, leader election on) in its own process against
// the same agent. It reports the repair latencies, the time from exec to
// /readyz answering 200 (initial sync), the process's CPU time per repair
// (utime+stime) and its peak RSS (VmHWM).
// CONTROLLER_BENCH_BASELINE names another build of the binary (e.g. of an
// earlier commit) to measure side by side, on the same seeded locks in the
// same run:
//
//	git worktree add /tmp/before <commit> && (cd /tmp/before && go build -o /tmp/consullock-before .)
//	CONSUL_BIN=$PWD/bin/consul CONTROLLER_BENCH_BASELINE=/tmp/consullock-before \
//	  go test -run '^$' -bench 'DriftToRepairBinary' -benchtime 200x ./internal/controller/
//
// BENCH_MAX_LOCK_WATCHES=N gives both binaries -max-lock-watches N (unset: the
// default, automatic cap).
func BenchmarkDriftToRepairBinary(b *testing.B) {
	bins := []struct{ name, path string }{{"current", buildBenchBinary(b)}}
	if base := os.Getenv("CONTROLLER_BENCH_BASELINE"); base != "" {
		bins = append([]struct{ name, path string }{{"baseline", base}}, bins...)
	}
	for _, n := range repairSizes(b) {
		for _, bin := range bins {
			b.Run(fmt.Sprintf("locks=%d/binary=%s", n, bin.name), func(b *testing.B) {
				s := seedOnce(b, n)
				p := startBinary(b, bin.path, s.h)
				cpu := procCPU(p.cmd.Process.Pid)
				lat := measureRepairs(b, s)
				cpu = procCPU(p.cmd.Process.Pid) - cpu
				rss := p.stop(b)
				reportLatencies(b, lat)
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu_ms/repair")
				b.ReportMetric(float64(p.sync.Milliseconds()), "sync_ms")
				b.ReportMetric(float64(rss)/1024, "peak_rss_MiB")
			})
		}
	}
}

// BenchmarkLedgerWriteBinary measures what a run-ledger write costs a
// controller watching 10,000 declared locks: every run-once attempt writes
// its ledger under the registry prefix, which wakes the registry watch.
// It reports the controller process's CPU time (utime+stime) per ledger
// write, above what it spends idle over the same time, side by side with
// CONTROLLER_BENCH_BASELINE (see BenchmarkDriftToRepairBinary):
//
//	CONSUL_BIN=$PWD/bin/consul CONTROLLER_BENCH_BASELINE=/tmp/consullock-before \
//	  go test -count=1 -run '^$' -bench LedgerWriteBinary -benchtime 50x ./internal/controller/
func BenchmarkLedgerWriteBinary(b *testing.B) {
	bins := []struct{ name, path string }{{"current", buildBenchBinary(b)}}
	if base := os.Getenv("CONTROLLER_BENCH_BASELINE"); base != "" {
		bins = append([]struct{ name, path string }{{"baseline", base}}, bins...)
	}
	const n = 10000
	for _, bin := range bins {
		b.Run(fmt.Sprintf("locks=%d/binary=%s", n, bin.name), func(b *testing.B) {
			s := seedOnce(b, n)
			p := startBinary(b, bin.path, s.h)
			defer p.stop(b)
			const gap = 100 * time.Millisecond
			idleStart := procCPU(p.cmd.Process.Pid)
			time.Sleep(time.Duration(b.N) * gap)
			idle := procCPU(p.cmd.Process.Pid) - idleStart
			start := procCPU(p.cmd.Process.Pid)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l := s.locks[i%len(s.locks)]
				// A new run each time: Consul does not apply a write that
				// changes nothing, and the watch would not wake.
				rec, err := record.EncodeLedger(ledger.Ledger{Lock: l.Name, Runs: []ledger.Run{{
					ID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Outcome: ledger.RunRunning,
					Attempts: []ledger.Attempt{{Number: 1, Node: "bench", Session: "aaaaaaaa-0000-0000-0000-000000000001",
						FencingToken: uint64(i + 1), Outcome: ledger.RunRunning, Started: time.Now()}},
				}}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.h.api.KV().Put(&api.KVPair{Key: lockmodel.RegistryKey(s.h.registry, lockmodel.KindRuns, l.Name), Value: rec}, nil); err != nil {
					b.Fatal(err)
				}
				time.Sleep(gap)
			}
			b.StopTimer()
			busy := procCPU(p.cmd.Process.Pid) - start
			b.ReportMetric(float64((busy-idle).Microseconds())/1000/float64(b.N), "cpu_ms/write")
			b.ReportMetric(float64(idle.Microseconds())/1000/float64(b.N), "idle_cpu_ms/gap")
		})
	}
}

// procCPU is the CPU time (user + system) process pid has used.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

var (
	benchBinaryOnce sync.Once
	benchBinary     string
	benchBinaryErr  error
)

// buildBenchBinary builds the repository's binary once per run.
func buildBenchBinary(b *testing.B) string {
	b.Helper()
	benchBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "consullock-bench-")
		if err != nil {
			benchBinaryErr = err
			return
		}
		benchBinary = filepath.Join(dir, "consullock")
		benchBinaryErr = testenv.BuildConsullock(context.Background(), benchBinary)
	})
	if benchBinaryErr != nil {
		b.Fatal(benchBinaryErr)
	}
	return benchBinary
}

// controllerProcess is a controller binary running in its own process.
type controllerProcess struct {
	cmd  *exec.Cmd
	sync time.Duration // exec to /readyz 200
}

// startBinary runs `<bin> controller -mode repair` on h's registry and
// waits for /readyz.
func startBinary(b *testing.B, bin string, h *harness) *controllerProcess {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	args := []string{"controller", "-mode", "repair", "-listen", addr, "-registry-prefix", h.registry, "-log-level", "warn"}
	if n := benchMaxLockWatches(b); n != 0 {
		args = append(args, "-max-lock-watches", strconv.Itoa(n))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+h.a.Addr, "CONSUL_HTTP_TOKEN="+h.a.ManagementToken)
	if path := os.Getenv("CONTROLLER_BENCH_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		cmd.Stderr = f
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &controllerProcess{cmd: cmd}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitUntil(b, 120*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	p.sync = time.Since(start)
	// Ready is every watch answered; leading is what repairs need.
	waitUntil(b, 60*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "\nconsullock_leader 1\n")
	})
	return p
}

// stop reads the process's peak RSS (kB), then stops it with SIGTERM.
func (p *controllerProcess) stop(b *testing.B) int64 {
	b.Helper()
	rss := procStatusOf(p.cmd.Process.Pid, "VmHWM")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return rss
}

// measureRepairs deletes a random lock key b.N times and returns how long
// each took to be re-created, as a blocking query on the key sees it.
func measureRepairs(b *testing.B, s *seededLocks) []time.Duration {
	b.Helper()
	h := s.h
	waitUntil(b, 120*time.Second, func() bool {
		ks, _, err := h.api.KV().Keys(h.prefix+"/", "", nil)
		return err == nil && len(ks) == len(s.locks)
	})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := s.locks[rand.IntN(len(s.locks))]
		start := time.Now()
		if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
			b.Fatal(err)
		}
		var idx uint64
		for {
			p, meta, err := h.api.KV().Get(l.Key, &api.QueryOptions{WaitIndex: idx, WaitTime: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if p != nil {
				break
			}
			idx = meta.LastIndex
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	return lat
}

// reportLatencies reports the median and 99th percentile of lat.
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
}

// BenchmarkWatchConnections reports the blocking queries a controller keeps
// open: registry + sessions + ACL policies + lock key groups.
func BenchmarkWatchConnections(b *testing.B) {
	for _, tc := range []struct{ locks, segments int }{{10, 1}, {1000, 1}, {1000, 200}, {10000, 500}} {
		b.Run(fmt.Sprintf("locks=%d/segments=%d", tc.locks, tc.segments), func(b *testing.B) {
			h := benchHarness(b)
			seed(b, h, tc.locks, tc.segments, false)
			c, stop := startBench(b, h, compliance.ModeObserve)
			defer stop()
			waitUntil(b, 120*time.Second, c.Ready)
			for i := 0; i < b.N; i++ {
				_ = c.LockWatches()
			}
			b.ReportMetric(float64(c.LockWatches()+3), "blocking_queries")
		})
	}
}

// BenchmarkInitialSync measures how long an observe-mode controller takes
// from start to its first complete decision over 10,000 declarations, and
// the peak RSS of the process (VmHWM, which includes the test binary).
func BenchmarkInitialSync(b *testing.B) {
	h := benchHarness(b)
	seed(b, h, 10000, 100, false)
	rssBefore := procStatus("VmHWM")
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c, stop := startBench(b, h, compliance.ModeObserve)
		waitUntil(b, 120*time.Second, c.Ready)
		total += time.Since(start)
		stop()
	}
	b.StopTimer()
	b.ReportMetric(total.Seconds()/float64(b.N), "sync_s")
	b.ReportMetric(float64(procStatus("VmHWM"))/1024, "peak_rss_MiB")
	b.ReportMetric(float64(rssBefore)/1024, "rss_before_MiB")
}

// procStatus reads a kB field of /proc/self/status.
func procStatus(field string) int64 { return procStatusOf(0, field) }

// procStatusOf reads a kB field of /proc/<pid>/status (pid 0: this
// process).
func procStatusOf(pid int, field string) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}
