package runner

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// consulLockProfile has the session settings `consul lock` uses (api.Lock:
// TTL 15s; LockDelay unset, so the server's 15s; serfHealth), so that the
// comparison with consullock run is about the implementations, not the
// settings.
func consulLockProfile(b testing.TB) *lockmodel.SessionProfile {
	return &lockmodel.SessionProfile{Name: uniqueName(b, "consul-lock-profile"), TTL: 15 * time.Second, LockDelay: 15 * time.Second}
}

// isConsulLockSession matches the session names `consul lock` gives:
// "Consul lock for '<command>' at '<prefix>'".
func isConsulLockSession(prefix string) func(string) bool {
	return func(name string) bool { return strings.HasSuffix(name, "at '"+prefix+"'") }
}

// BenchmarkHandover measures a clean hand-over: the time from the end of
// the holder's child to the start of the waiting holder's child, for
// consullock run, consullock run with -run-id (the run ledger read and
// written on the way), consul lock, and the floor (testdata/handoverfloor:
// the same steps done by a bare program with the api package), on the same
// agent in the same run, in turn; the figures are medians. All use the same session settings (TTL
// 15s, lock-delay 15s). BENCH_BASE_RUNNER names another consullock binary
// (built at the base commit) measured in the same loop.
//
// BENCH_CLUSTER=1 runs the same variants, loop and figures on a cluster
// (testenv.StartClusterT: three servers, so each Raft write is replicated
// and written to disk, and two client agents) instead of the dev agent:
// the holder on client 1, the waiter on client 2, the declarations, tokens
// and waits on the cluster; the metrics keep their names, the log lines
// say "MEASURED (cluster)".
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench 'Handover$' -benchtime 20x ./internal/runner/
//	CONSUL_BIN=$PWD/bin/consul BENCH_CLUSTER=1 go test -run '^$' -bench 'Handover$' -benchtime 20x -timeout 30m ./internal/runner/
func BenchmarkHandover(b *testing.B) {
	tg := handoverTargetFromEnv(b)
	variants := handoverVariants()
	took := make([][]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			took[i] = append(took[i], handover(b, v, tg))
		}
	}
	// Medians: one hand-over slowed by the shared machine must not move
	// the figure. The ratios are to consul lock's median.
	b.ReportMetric(0, "ns/op")
	var consul time.Duration
	for i, v := range variants {
		if v.metric == "consul_lock" {
			consul = median(took[i])
		}
	}
	for i, v := range variants {
		m := median(took[i])
		b.ReportMetric(ms(m), v.metric+"_handover_ms")
		if v.metric != "consul_lock" && consul > 0 {
			b.ReportMetric(float64(m)/float64(consul), v.metric+"/consul_lock")
		}
		b.Logf("MEASURED%s %s hand-overs: median %.2fms of %v", tg.label, v.metric, ms(m), took[i])
	}
}

// handover runs a holder and a waiter on tg and returns the gap between
// the holder's child's end and the waiter's child's start.
func handover(b *testing.B, v handoverVariant, tg handoverTarget) time.Duration {
	b.Helper()
	record := filepath.Join(b.TempDir(), "record")
	first, second := v.start(b, record, tg)
	for _, p := range []*proc{first, second} {
		if code := p.wait(time.Minute); code != 0 {
			b.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	runs := readRuns(b, record)
	if len(runs) != 2 || runs[0].tag != "first" || !runs[0].ended || runs[1].start.Before(runs[0].end) {
		b.Fatalf("%s: runs = %+v", v.metric, runs)
	}
	return runs[1].start.Sub(runs[0].end)
}

// BenchmarkFailover measures a crash fail-over: the holder process is
// SIGKILLed (with its child, as when its machine dies) and the time until
// the waiting holder's child starts is measured, for consullock run and
// consul lock with the same session settings (TTL 15s, lock-delay 15s), and
// for consullock run with a declared fast profile (TTL 10s, lock-delay 1s).
// The three run side by side on the same agent; each takes about
// 2 x TTL + lock-delay.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench Failover -benchtime 1x ./internal/runner/
func BenchmarkFailover(b *testing.B) {
	var runSum, consulSum, fastSum time.Duration
	n := 0
	for b.Loop() {
		r, c, f := failover(b)
		runSum, consulSum, fastSum = runSum+r, consulSum+c, fastSum+f
		n++
	}
	sec := func(d time.Duration) float64 { return d.Seconds() / float64(n) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(sec(runSum), "run_failover_s")
	b.ReportMetric(sec(consulSum), "consul_lock_failover_s")
	b.ReportMetric(float64(runSum)/float64(consulSum), "run/consul_lock")
	b.ReportMetric(sec(fastSum), "run_fast_profile_failover_s")
	b.ReportMetric(float64(fastSum)/float64(consulSum), "run_fast/consul_lock")
}

type failoverCase struct {
	record         string
	holder, waiter *proc
	killChildToo   bool
}

func failover(b *testing.B) (run, consulLock, fast time.Duration) {
	b.Helper()
	setupRun := func(profile *lockmodel.SessionProfile) *failoverCase {
		prefix := testenv.UniquePrefix(b.Name())
		l := declare(b, lockmodel.Lock{Name: uniqueName(b, "lock"), Prefix: prefix}, profile)
		token := runnerToken(b, prefix)
		c := &failoverCase{record: filepath.Join(b.TempDir(), "record")}
		c.holder = startRun(b, "holder", token, []string{"-lock", l.Name}, childArgs(c.record, "holder", "-sleep", "10m")...)
		waitKey(b, l.Key, 30*time.Second, heldByOther(""))
		waitStarted(b, c.record, "holder")
		c.waiter = startRun(b, "waiter", token, []string{"-lock", l.Name}, childArgs(c.record, "waiter", "-sleep", "10ms")...)
		waitForTwoSessions(b, "consullock run "+l.Name)
		return c
	}
	setupConsul := func() *failoverCase {
		prefix := testenv.UniquePrefix(b.Name())
		c := &failoverCase{record: filepath.Join(b.TempDir(), "record"), killChildToo: true}
		c.holder = startConsulLock(b, "holder", 1, prefix, childArgs(c.record, "holder", "-sleep", "10m")...)
		waitKey(b, lockmodel.DefaultLockKey(prefix), 30*time.Second, heldByOther(""))
		waitStarted(b, c.record, "holder")
		c.waiter = startConsulLock(b, "waiter", 1, prefix, childArgs(c.record, "waiter", "-sleep", "10ms")...)
		waitForSessionsMatching(b, isConsulLockSession(prefix), 2)
		return c
	}
	cases := []*failoverCase{setupRun(consulLockProfile(b)), setupConsul(), setupRun(fastProfile(b, time.Second))}

	killed := time.Now()
	for _, c := range cases {
		// consul lock leaves its child running when it dies; kill the
		// child too, as a dead machine would. (The runner's child dies
		// with the runner.)
		if c.killChildToo {
			_ = syscall.Kill(readRuns(b, c.record)[0].pid, syscall.SIGKILL)
		}
		_ = c.holder.cmd.Process.Signal(syscall.SIGKILL)
	}
	var took [3]time.Duration
	for i, c := range cases {
		if code := c.waiter.wait(3 * time.Minute); code != 0 {
			b.Fatalf("waiter %d exited %d", i, code)
		}
		runs := readRuns(b, c.record)
		if len(runs) != 2 || runs[1].tag != "waiter" {
			b.Fatalf("case %d: runs = %+v", i, runs)
		}
		took[i] = runs[1].start.Sub(killed)
		b.Logf("MEASURED failover case %d: %s", i, took[i].Round(time.Millisecond))
	}
	return took[0], took[1], took[2]
}
