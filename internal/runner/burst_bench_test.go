package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// BenchmarkMidnightBurst is the midnight burst (issue 37): on a cluster of
// three servers and three client agents (testenv.StartClusterT), J jobs,
// each declared run once and triggered on all three nodes in the same
// instant: one `consullock run -lock job-i -run-id midnight` of the built
// binary per job per node, 3 x J processes started together, each job a
// BENCH_BURST_JOB (1s) sleep of testdata/handoverchild. Then the same
// burst with `consul lock` (one per job per node, on the job's key).
//
// Checked: every runner exits 0 and every job's command started exactly
// once (consul lock runs it once per node: its executions are printed).
// Printed per J: the time from the trigger until every job's command has
// started and until every one has ended; the start latency after the
// trigger (p50, p99 over the jobs; for consul lock, each job's first
// start); the Raft writes in all (the servers' Raft index, as
// BenchmarkWritesPerRun counts them) beside the protocol's floor for the
// sessions the runners created (writesFloor1 per job); the servers' CPU
// seconds (utime+stime of the three server processes, /proc/<pid>/stat),
// the client agents', and the runners' own.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench MidnightBurst -benchtime 1x -timeout 60m ./internal/runner/
//
// BENCH_BURST_J=10,50,100 picks the job counts (make bench-burst);
// BENCH_BASELINE=<consullock binary of another commit> runs the same
// burst with it first (before/after in one run).
func BenchmarkMidnightBurst(b *testing.B) {
	js := testenv.EnvInts(b, "BENCH_BURST_J", []int{10, 50, 100})
	job := 1 * time.Second
	if v := os.Getenv("BENCH_BURST_JOB"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("BENCH_BURST_JOB=%q: %v", v, err)
		}
		job = d
	}
	benchChild(b) // built before any trigger: not timed
	c := testenv.StartClusterT(b, testenv.ClusterOptions{Servers: 3, Clients: 3})
	tg := burstTarget{handoverTarget: clusterTarget(c), servers: pids(c.Servers), clients: pids(c.Clients)}
	tg.nodes = nil
	for _, n := range c.Clients {
		tg.nodes, tg.addrs = append(tg.nodes, n.Name), append(tg.addrs, n.Addr)
	}
	base := os.Getenv("BENCH_BASELINE")
	b.ReportMetric(0, "ns/op")
	for b.Loop() {
		for _, j := range js {
			var before burstFigures
			if base != "" {
				before = midnightBurst(b, tg, j, job, runBurstWith(base), true)
			}
			run := midnightBurst(b, tg, j, job, runBurstWith(runnerBin), true)
			for i, n := range run.execs {
				if n != 1 {
					b.Errorf("J=%d: job %d's command ran %d times, want exactly once", j, i, n)
				}
			}
			cl := midnightBurst(b, tg, j, job, consulLockBurst, false)
			if base != "" {
				before.log(b, "baseline", j)
				before.report(b, "baseline", j)
			}
			run.log(b, "consullock run", j)
			cl.log(b, "consul lock", j)
			run.report(b, "run", j)
			cl.report(b, "consul_lock", j)
		}
	}
}

// burstTarget is the cluster of a burst: its client agents' addresses
// (a job's process on node k talks to addrs[k]) and its members' PIDs.
type burstTarget struct {
	handoverTarget
	addrs            []string
	servers, clients []int
}

// burstJob is one job of a burst: its lock, where its commands record
// their starts and ends, and the processes triggered for it.
type burstJob struct {
	lock   lockmodel.Lock
	record string
	procs  []*proc
}

// burstStarter starts one job's process on node k of the cluster.
type burstStarter func(b *testing.B, tg burstTarget, token string, jb *burstJob, k int, job time.Duration) *proc

// runBurstWith starts `consullock run` of the binary bin.
func runBurstWith(bin string) burstStarter {
	return func(b *testing.B, tg burstTarget, token string, jb *burstJob, k int, job time.Duration) *proc {
		return startRunnerBin(b, bin, fmt.Sprintf("%s on node %d", jb.lock.Name, k), tg.addrs[k], token,
			[]string{"-lock", jb.lock.Name, "-run-id", "midnight"}, childArgs(jb.record, "node"+strconv.Itoa(k), "-sleep", job.String())...)
	}
}

func consulLockBurst(b *testing.B, tg burstTarget, _ string, jb *burstJob, k int, job time.Duration) *proc {
	args := append([]string{"lock", "-shell=false", "-child-exit-code", jb.lock.Prefix, benchChild(b)},
		childArgs(jb.record, "node"+strconv.Itoa(k), "-sleep", job.String())...)
	return startProc(b, fmt.Sprintf("consul lock %s on node %d", jb.lock.Prefix, k), processEnv(tg.addrs[k], tg.managementToken), tg.consulBin, args...)
}

// burstFigures is what one burst measured.
type burstFigures struct {
	execs                 []int           // per job, its command's executions
	startLatency          []time.Duration // per job, trigger -> its first start
	allStarted, allEnded  time.Duration   // trigger -> the last job's first start, the last end
	lastExit              time.Duration   // trigger -> the last process's exit
	writes, floor         uint64          // Raft index moved; the floor for the sessions created
	writesIdle            float64         // the index's idle drift over as long
	sessions              int             // processes that created a session
	serverCPU, serverIdle float64         // the servers' CPU seconds; their idle rate over as long
	clientCPU, clientIdle float64         // the same for the client agents
	runnersCPU            float64         // the processes' own CPU seconds
	failed                int             // processes that exited non-zero
	failure               string          // the first one's exit code and output
}

// midnightBurst declares j run-once jobs on the cluster, triggers start
// for every job on every client node together and measures it. With
// mustSucceed, a process that exits non-zero fails the benchmark; else it
// is counted (consul lock's own failures under the burst).
func midnightBurst(b *testing.B, tg burstTarget, j int, job time.Duration, start burstStarter, mustSucceed bool) burstFigures {
	b.Helper()
	jobs := make([]*burstJob, j)
	locks := make([]lockmodel.Lock, j)
	dir := b.TempDir()
	for i := range jobs {
		l := lockmodel.Lock{Name: uniqueName(b, fmt.Sprintf("job%d", i)), Prefix: testenv.UniquePrefix(b.Name()),
			RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}}
		locks[i] = declareAt(b, tg.admin, l, consulLockProfile(b))
		jobs[i] = &burstJob{lock: locks[i], record: filepath.Join(dir, fmt.Sprintf("job%d", i))}
	}
	token := herdToken(b, tg.handoverTarget, locks...)
	servers, clients := tg.servers, tg.clients

	// The idle drift of the Raft index (anti-entropy, coordinates) and of
	// the agents' CPU, over two seconds, scaled to the burst's length: the
	// background the figures include.
	const idle = 2 * time.Second
	i0, s0, c0 := raftIndex(b, tg.admin), cpuSeconds(b, servers), cpuSeconds(b, clients)
	time.Sleep(idle)
	i1, s1, c1 := raftIndex(b, tg.admin), cpuSeconds(b, servers), cpuSeconds(b, clients)

	t0 := time.Now()
	nodes := len(tg.addrs)
	all := startMany(j*nodes, func(i int) *proc { return start(b, tg, token, jobs[i/nodes], i%nodes, job) })
	for i, jb := range jobs {
		jb.procs = all[i*nodes : (i+1)*nodes]
	}
	var f burstFigures
	var runnersCPU time.Duration
	for _, jb := range jobs {
		for _, p := range jb.procs {
			switch code := p.wait(10 * time.Minute); {
			case code != 0 && mustSucceed:
				b.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
			case code != 0:
				f.failed++
				if f.failure == "" {
					f.failure = fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(p.out.String()))
				}
			}
			f.lastExit = max(f.lastExit, p.exited.Sub(t0))
			runnersCPU += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
		}
	}
	scale := time.Since(t0).Seconds() / idle.Seconds()
	f.writes = raftIndex(b, tg.admin) - i1
	f.writesIdle = float64(i1-i0) * scale
	f.serverCPU, f.serverIdle = cpuSeconds(b, servers)-s1, (s1-s0)*scale
	f.clientCPU, f.clientIdle = cpuSeconds(b, clients)-c1, (c1-c0)*scale
	f.runnersCPU = runnersCPU.Seconds()
	for _, jb := range jobs {
		runs := readRuns(b, jb.record)
		f.execs = append(f.execs, len(runs))
		if len(runs) == 0 {
			if mustSucceed {
				b.Fatalf("job %s: its command never started", jb.lock.Name)
			}
			continue // every process of the job failed (counted above)
		}
		first := runs[0].start.Sub(t0)
		f.startLatency = append(f.startLatency, first)
		f.allStarted = max(f.allStarted, first)
		for _, r := range runs {
			f.allEnded = max(f.allEnded, r.end.Sub(t0))
		}
		sessions := 0
		for _, p := range jb.procs {
			if strings.Contains(p.out.String(), "session created") {
				sessions++
			}
		}
		f.sessions += sessions
		if sessions > 0 { // consul lock says nothing of its sessions
			f.floor += uint64(writesFloor1(sessions))
		}
	}
	return f
}

// log prints one burst's figures.
func (f burstFigures) log(b *testing.B, what string, j int) {
	b.Helper()
	lat := slices.Clone(f.startLatency)
	slices.Sort(lat)
	execs := map[int]int{}
	for _, n := range f.execs {
		execs[n]++
	}
	floor := ""
	if f.sessions > 0 {
		floor = fmt.Sprintf("; the protocol's floor for the %d sessions created: %d", f.sessions, f.floor)
	}
	if f.failed > 0 {
		b.Logf("MEASURED (cluster) midnight burst, %s, J=%d: %d of %d processes exited non-zero; the first: %s", what, j, f.failed, 3*j, f.failure)
	}
	b.Logf("MEASURED (cluster) midnight burst, %s, J=%d jobs x 3 nodes: executions per job %v (executions: jobs); all started %s, "+
		"all ended %s, last exit %s after the trigger; start latency p50 %s p99 %s; Raft writes %d (%.1f per job; idle drift over "+
		"as long %.0f%s); CPU seconds: servers %.2f (idle rate over as long %.2f), client agents %.2f (idle %.2f), the %d processes %.2f",
		what, j, execs, f.allStarted.Round(time.Millisecond), f.allEnded.Round(time.Millisecond), f.lastExit.Round(time.Millisecond),
		quantile(lat, 0.5).Round(time.Millisecond), quantile(lat, 0.99).Round(time.Millisecond), f.writes, float64(f.writes)/float64(j),
		f.writesIdle, floor, f.serverCPU, f.serverIdle, f.clientCPU, f.clientIdle, 3*j, f.runnersCPU)
}

// report records one burst's figures as metrics named <what>_..._j<J>.
func (f burstFigures) report(b *testing.B, what string, j int) {
	lat := slices.Clone(f.startLatency)
	slices.Sort(lat)
	m := func(v float64, name string) { b.ReportMetric(v, fmt.Sprintf("%s_%s_j%d", what, name, j)) }
	m(ms(f.allStarted), "all_started_ms")
	m(ms(f.allEnded), "all_ended_ms")
	m(ms(quantile(lat, 0.5)), "start_p50_ms")
	m(ms(quantile(lat, 0.99)), "start_p99_ms")
	m(float64(f.writes), "raft_writes")
	m(f.serverCPU, "server_cpu_s")
	m(float64(slices.Max(f.execs)), "max_execs_per_job")
	m(float64(f.failed), "failed_processes")
}

// quantile is the p quantile of sorted ds (nearest rank).
func quantile(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// pids are the process IDs of nodes.
func pids(nodes []*testenv.Node) []int {
	var out []int
	for _, n := range nodes {
		out = append(out, n.PID())
	}
	return out
}

// cpuSeconds is the user plus system CPU time the processes have used,
// from /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s, the
// value of USER_HZ on Linux).
func cpuSeconds(t testing.TB, pids []int) float64 {
	t.Helper()
	var ticks uint64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The command name (field 2) is in parentheses and may hold
		// spaces: the fields after it start at the last ")".
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		for _, f := range fields[11:13] { // utime, stime: fields 14 and 15
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/stat: %v", pid, err)
			}
			ticks += n
		}
	}
	return float64(ticks) / 100
}
