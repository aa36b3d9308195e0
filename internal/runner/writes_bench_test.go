package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Raft writes per run (issue 37): Consul's Raft log index (the leader's
// last_log_index in /v1/agent/self) before and after N `consullock run`
// processes of the built binary triggered together with one -run-id, then
// N more after the run's success (late arrivals), and N `consul lock`
// processes on the same key. Renewals are not Raft writes (the leader
// resets a timer); everything else a runner sends that changes state is.
//
// The floor, and why (see writesFloor): the node that runs the command
// writes 5 (session create; the lock op; the attempt's start; the outcome
// with the release, one transaction; session destroy). A node that reads
// the lock key free before the winner's lock op committed cannot know it
// will lose: it creates a session (1) and ends it (1, destroy) when it
// then sees the key held (lockproto.Settings.Try), 2; or 3 when its own lock
// op went out first and was refused (a refused transaction is a Raft
// entry still). It then waits without a session. A node that first reads
// the key held needs no session to wait: the release and the outcome are
// one transaction, so it learns of the success from the key's change and
// a consistent read of the ledger, writing 0; and a node after the
// success reads the ledger and writes 0.
//
// A node that reads the key free waits at random (up to arrivalSpread)
// before its session and looks again (doneBeforeSession): the first to
// wake takes the lock, and the others find it held. What is left of the
// race is a node that wakes inside the winner's window (its session
// create and lock op), 2 or 3 writes each.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench WritesPerRun -benchtime 1x ./internal/runner/
//
// BENCH_WRITES_N=3,10,30 picks the node counts (make bench-writes),
// BENCH_WRITES_RUNS=5 the runs per count. BENCH_BASELINE=<consullock
// binary of another commit> runs every shape with it too, in turn with
// the built binary, one after the other on the same agent. Start latency
// is the trigger (the processes' start) to the command's start: per
// count, over its runs; and for one node alone, BENCH_WRITES_ALONE=20
// runs per binary (what the random wait costs a node with no rival).
func BenchmarkWritesPerRun(b *testing.B) {
	ns := testenv.EnvInts(b, "BENCH_WRITES_N", []int{3, 10, 30})
	runs := testenv.EnvInts(b, "BENCH_WRITES_RUNS", []int{5})[0]
	alone := testenv.EnvInts(b, "BENCH_WRITES_ALONE", []int{20})[0]
	subjects := []writesSubject{{name: "consullock run", metric: "run", bin: runnerBin}}
	if base := os.Getenv("BENCH_BASELINE"); base != "" {
		subjects = append([]writesSubject{{name: "baseline", metric: "baseline", bin: base}}, subjects...)
	}
	admin := agent.Client()
	b.ReportMetric(0, "ns/op")
	for b.Loop() {
		for _, n := range ns {
			if runs == 0 {
				break
			}
			figs := make([]writesFigures, len(subjects))
			var cls []burstResult
			for run := range runs {
				for i, s := range subjects {
					figs[i].add(writesRun(b, admin, s, n, run))
				}
				cls = append(cls, consulLockWrites(b, admin, n))
			}
			for i, s := range subjects {
				figs[i].log(b, s.name, n)
				figs[i].report(b, s.metric, n)
			}
			clWrites := make([]uint64, len(cls))
			for i, cl := range cls {
				clWrites[i] = cl.writes
			}
			b.Logf("MEASURED Raft writes, N=%d consul lock on the same key, %d runs: %v (one execution per node)", n, len(cls), clWrites)
			b.ReportMetric(float64(slices.Max(clWrites)), fmt.Sprintf("writes_consul_lock_max_n%d", n))
		}
		lats, looks := make([][]time.Duration, len(subjects)), make([][]time.Duration, len(subjects))
		for range alone { // in turn, so that both see the same load
			for i, s := range subjects {
				lat, look := startAlone(b, s)
				lats[i], looks[i] = append(lats[i], lat), append(looks[i], look)
			}
		}
		for i, s := range subjects {
			if alone == 0 {
				break
			}
			lat, look := lats[i], looks[i]
			slices.Sort(lat)
			slices.Sort(look)
			b.Logf("MEASURED start latency of one runner alone, %s, %d runs: trigger to command start p50 %s p99 %s; "+
				"ledger read to session create (the runner's own log) p50 %s p99 %s",
				s.name, alone, quantile(lat, 0.5).Round(100*time.Microsecond), quantile(lat, 0.99).Round(100*time.Microsecond),
				quantile(look, 0.5).Round(100*time.Microsecond), quantile(look, 0.99).Round(100*time.Microsecond))
			b.ReportMetric(ms(quantile(lat, 0.5)), s.metric+"_alone_start_p50_ms")
			b.ReportMetric(ms(quantile(lat, 0.99)), s.metric+"_alone_start_p99_ms")
			b.ReportMetric(ms(quantile(look, 0.5)), s.metric+"_alone_to_session_p50_ms")
			b.ReportMetric(ms(quantile(look, 0.99)), s.metric+"_alone_to_session_p99_ms")
		}
	}
}

// writesSubject is a consullock binary the benchmark runs.
type writesSubject struct{ name, metric, bin string }

// writesRun triggers n runners of s together on a fresh run-once lock,
// then n more after the success (late arrivals), and measures both.
func writesRun(b *testing.B, admin *api.Client, s writesSubject, n, run int) writesOne {
	l, token := declareRunOnce(b, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(b.TempDir(), "record")
	id := fmt.Sprintf("n%d-%d", n, run)
	var t0 time.Time
	runners := func(what, sleep string) burstResult {
		return countWrites(b, admin, func() []*proc {
			t0 = time.Now()
			return startMany(n, func(i int) *proc {
				return startRunnerBin(b, s.bin, fmt.Sprintf("%s %s %d", s.name, what, i), agent.Addr, token,
					[]string{"-lock", l.Name, "-run-id", id}, childArgs(record, fmt.Sprintf("%s.%d", what, i), "-sleep", sleep)...)
			})
		})
	}
	together := runners("together", "2s")
	first := readRuns(b, record)
	if len(first) == 0 {
		b.Fatalf("%s, N=%d: the command never started", s.name, n)
	}
	latency := first[0].start.Sub(t0)
	late := runners("late", "10ms")
	return writesOne{together: together, late: late, execs: len(first), lateExecs: len(readRuns(b, record)) - len(first), start: latency}
}

// consulLockWrites runs n `consul lock` on one key together: it runs the
// command once per node, one after the other.
func consulLockWrites(b *testing.B, admin *api.Client, n int) burstResult {
	l, _ := declareRunOnce(b, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(b.TempDir(), "consul-lock")
	return countWrites(b, admin, func() []*proc {
		return startMany(n, func(i int) *proc {
			return startConsulLock(b, fmt.Sprintf("consul lock %d", i), 1, l.Prefix, childArgs(record, strconv.Itoa(i), "-sleep", "100ms")...)
		})
	})
}

// startAlone is the start latency of one runner of s with no rival: its
// start to its command's; and, from its log, its "run once" event (set
// up, about to read the ledger) to its "waiting for the lock" (about to
// create its session): what the random wait adds to, without the
// process's start.
func startAlone(b *testing.B, s writesSubject) (start, toSession time.Duration) {
	l, token := declareRunOnce(b, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(b.TempDir(), "record")
	t0 := time.Now()
	p := startRunnerBin(b, s.bin, s.name+" alone", agent.Addr, token, []string{"-lock", l.Name, "-run-id", "alone"}, childArgs(record, "alone")...)
	if code := p.wait(time.Minute); code != 0 {
		b.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
	}
	runs := readRuns(b, record)
	if len(runs) != 1 {
		b.Fatalf("%s: %d executions, want 1", s.name, len(runs))
	}
	return runs[0].start.Sub(t0), logGap(b, p.out.String(), `msg="run once"`, `msg="waiting for the lock"`)
}

// logGap is the time between the first text log events holding from and
// to.
func logGap(b *testing.B, out, from, to string) time.Duration {
	b.Helper()
	at := func(what string) time.Time {
		for line := range strings.Lines(out) {
			if !strings.Contains(line, what) {
				continue
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				b.Fatalf("log line %q: %v", line, err)
			}
			return t
		}
		b.Fatalf("no log event %s in:\n%s", what, out)
		return time.Time{}
	}
	return at(to).Sub(at(from))
}

// writesOne is one run of writesRun.
type writesOne struct {
	together, late   burstResult
	execs, lateExecs int
	start            time.Duration // trigger -> the command's start
}

// writesFigures are the runs of one subject at one N.
type writesFigures struct{ runs []writesOne }

func (f *writesFigures) add(o writesOne) { f.runs = append(f.runs, o) }

func (f *writesFigures) log(b *testing.B, what string, n int) {
	b.Helper()
	var writes, floors, sessions, late, execs []uint64
	var lat []time.Duration
	for _, o := range f.runs {
		writes = append(writes, o.together.writes)
		floors = append(floors, uint64(writesFloor1(o.together.sessions)))
		sessions = append(sessions, uint64(o.together.sessions))
		late = append(late, o.late.writes)
		execs = append(execs, uint64(o.execs+o.lateExecs))
		lat = append(lat, o.start)
	}
	slices.Sort(lat)
	floor, _ := writesFloor(n)
	b.Logf("MEASURED Raft writes per run, N=%d triggered together, %s, %d runs: %v (floor %d; at most floor + 2: %v); "+
		"sessions created %v (each run's floor for them %v); late arrivals' writes %v; executions %v; "+
		"start latency (trigger to command start) p50 %s p99 %s",
		n, what, len(f.runs), writes, floor, slices.Max(writes) <= uint64(floor+2), sessions, floors, late, execs,
		quantile(lat, 0.5).Round(time.Millisecond), quantile(lat, 0.99).Round(time.Millisecond))
}

func (f *writesFigures) report(b *testing.B, what string, n int) {
	var hi, late uint64
	var lat []time.Duration
	for _, o := range f.runs {
		hi, late = max(hi, o.together.writes), max(late, o.late.writes)
		lat = append(lat, o.start)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(hi), fmt.Sprintf("%s_writes_max_n%d", what, n))
	b.ReportMetric(float64(late), fmt.Sprintf("%s_writes_late_max_n%d", what, n))
	b.ReportMetric(ms(quantile(lat, 0.5)), fmt.Sprintf("%s_start_p50_ms_n%d", what, n))
}

// writesFloor is the fewest Raft writes of a run-once run triggered on n
// nodes together: 5 for the node that runs it, 0 for a node that first
// sees the key held (lo: every other node arrives after the lock op), 2
// for one that raced (hi: all n read the key free first).
func writesFloor(n int) (lo, hi int) { return 5, 5 + 2*(n-1) }

// writesFloor1 is the floor when sessions nodes raced for the free key
// (created a session): the winner's 5 and 2 for each loser (3 for one
// whose lock op went out before it saw the key held).
func writesFloor1(sessions int) int { return 5 + 2*max(sessions-1, 0) }

// burstResult is what countWrites measured.
type burstResult struct {
	writes     uint64        // Raft index after - before, less nothing
	background uint64        // the index's drift over as long, measured idle first
	sessions   int           // processes that logged a session created
	took       time.Duration // start to the last exit
}

// countWrites measures the Raft writes of the processes start starts
// (all must exit 0): the leader's Raft index before and after; first the
// index's drift over an idle second, scaled to the same time, as the
// background (anti-entropy, coordinates) the figure includes.
func countWrites(b *testing.B, c *api.Client, start func() []*proc) burstResult {
	b.Helper()
	i0 := raftIndex(b, c)
	time.Sleep(time.Second)
	i1 := raftIndex(b, c)
	t0 := time.Now()
	procs := start()
	res := burstResult{}
	for _, p := range procs {
		if code := p.wait(5 * time.Minute); code != 0 {
			b.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
		if strings.Contains(p.out.String(), "session created") {
			res.sessions++
		}
	}
	res.took = time.Since(t0)
	res.writes = raftIndex(b, c) - i1
	res.background = uint64(float64(i1-i0) * res.took.Seconds())
	return res
}

// startMany starts n processes together.
func startMany(n int, start func(i int) *proc) []*proc {
	procs := make([]*proc, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { procs[i] = start(i) })
	}
	wg.Wait()
	return procs
}

// raftIndex is the last Raft log index of the server c talks to (a
// server agent: the dev agent, or a cluster's server).
func raftIndex(t testing.TB, c *api.Client) uint64 {
	t.Helper()
	self, err := c.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	raft, _ := self["Stats"]["raft"].(map[string]any)
	s, _ := raft["last_log_index"].(string)
	i, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("no raft last_log_index in /v1/agent/self: %v", self["Stats"]["raft"])
	}
	return i
}
