package runner

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
// then sees the key held (lockproto.WithTry), 2; or 3 when its own lock
// op went out first and was refused (a refused transaction is a Raft
// entry still). It then waits without a session. A node that first reads
// the key held needs no session to wait: the release and the outcome are
// one transaction, so it learns of the success from the key's change and
// a consistent read of the ledger, writing 0; and a node after the
// success reads the ledger and writes 0.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench WritesPerRun -benchtime 1x ./internal/runner/
//
// BENCH_WRITES_N=3,10,30 picks the node counts (make bench-writes).
func BenchmarkWritesPerRun(b *testing.B) {
	ns := testenv.EnvInts(b, "BENCH_WRITES_N", []int{3, 10, 30})
	admin := agent.Client()
	b.ReportMetric(0, "ns/op")
	for b.Loop() {
		for _, n := range ns {
			l, token := declareRunOnce(b, lockmodel.RunOnce{Period: time.Hour})
			record := filepath.Join(b.TempDir(), "record")
			id := fmt.Sprintf("n%d", n)
			runners := func(what, sleep string) burstResult {
				return countWrites(b, admin, func() []*proc {
					return startMany(n, func(i int) *proc {
						return startRun(b, fmt.Sprintf("%s %d", what, i), token, []string{"-lock", l.Name, "-run-id", id},
							childArgs(record, fmt.Sprintf("%s.%d", what, i), "-sleep", sleep)...)
					})
				})
			}
			together := runners("together", "2s")
			execs := len(readRuns(b, record))
			late := runners("late", "10ms")
			lateExecs := len(readRuns(b, record)) - execs

			// consul lock on the same key (<prefix>/.lock): it runs the
			// command once per node, one after the other.
			clRecord := filepath.Join(b.TempDir(), "consul-lock")
			cl := countWrites(b, admin, func() []*proc {
				return startMany(n, func(i int) *proc {
					return startConsulLock(b, fmt.Sprintf("consul lock %d", i), 1, l.Prefix, childArgs(clRecord, strconv.Itoa(i), "-sleep", "100ms")...)
				})
			})
			clExecs := len(readRuns(b, clRecord))

			floorLo, floorHi := writesFloor(n)
			b.Logf("MEASURED Raft writes per run, N=%d triggered together: consullock run %d (floor %d-%d: %d of %d created a session, "+
				"so this run's floor is %d), %d execution(s), %s to the last exit; background %d over the same time",
				n, together.writes, floorLo, floorHi, together.sessions, n, writesFloor1(together.sessions), execs,
				together.took.Round(time.Millisecond), together.background)
			b.Logf("MEASURED Raft writes, N=%d late arrivals (after the success): consullock run %d (floor 0), %d execution(s), "+
				"%d session(s); background %d", n, late.writes, lateExecs, late.sessions, late.background)
			b.Logf("MEASURED Raft writes, N=%d consul lock on the same key: %d, %d execution(s) (one per node), %s; background %d",
				n, cl.writes, clExecs, cl.took.Round(time.Millisecond), cl.background)
			b.ReportMetric(float64(together.writes), fmt.Sprintf("writes_together_n%d", n))
			b.ReportMetric(float64(late.writes), fmt.Sprintf("writes_late_n%d", n))
			b.ReportMetric(float64(cl.writes), fmt.Sprintf("writes_consul_lock_n%d", n))
			b.ReportMetric(float64(clExecs), fmt.Sprintf("execs_consul_lock_n%d", n))
		}
	}
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
