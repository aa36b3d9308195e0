package controller

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// seed writes n lock declarations in transactions of 64 operations. Lock
// keys are spread over `segments` first path segments.
func seed(b *testing.B, h *harness, n, segments int) []lockmodel.Lock {
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
	for i := range n {
		prefix := fmt.Sprintf("%s/%d", h.prefix, i)
		if segments > 1 {
			prefix = fmt.Sprintf("seg%04d/%s/%d", i%segments, h.prefix, i)
		}
		l := lockmodel.Lock{Name: fmt.Sprintf("bench-%d", i), Prefix: prefix}
		rec, err := lockmodel.EncodeLockRecord(l)
		if err != nil {
			b.Fatal(err)
		}
		l, _ = l.Normalize()
		locks = append(locks, l)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), Value: rec})
		if len(ops) == 64 {
			flush()
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
	cfg := Config{Mode: mode, RegistryPrefix: h.registry, DisableHA: true, WatchClient: watcher}
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

// BenchmarkDriftToRepair measures the time from an out-of-band deletion of
// a lock key to its re-creation by a repair-mode controller watching 10 and
// 1,000 declared locks, against the real agent.
func BenchmarkDriftToRepair(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) { benchDriftToRepair(b, n) })
	}
}

func benchDriftToRepair(b *testing.B, n int) {
	h := benchHarness(b)
	locks := seed(b, h, n, 1)
	c, stop := startBench(b, h, compliance.ModeRepair)
	defer stop()
	waitUntil(b, 60*time.Second, c.Ready)
	waitUntil(b, 60*time.Second, func() bool {
		ks, _, err := h.api.KV().Keys(h.prefix+"/", "", nil)
		return err == nil && len(ks) == len(locks)
	})
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := locks[rand.IntN(len(locks))]
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
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(float64(c.LockWatches()+3), "watches")
}

// BenchmarkWatchConnections reports the blocking queries a controller keeps
// open: registry + sessions + ACL policies + lock key groups.
func BenchmarkWatchConnections(b *testing.B) {
	for _, tc := range []struct{ locks, segments int }{{10, 1}, {1000, 1}, {1000, 200}, {10000, 500}} {
		b.Run(fmt.Sprintf("locks=%d/segments=%d", tc.locks, tc.segments), func(b *testing.B) {
			h := benchHarness(b)
			seed(b, h, tc.locks, tc.segments)
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
	seed(b, h, 10000, 100)
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
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
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
