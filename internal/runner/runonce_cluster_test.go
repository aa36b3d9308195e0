package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// On a 3-server cluster, two runners on each of three client agents (six
// nodes' worth of runners, sessions on three nodes) are triggered together
// per run ID; for every third (tenth) run ID the Raft leader is killed while the
// holder's command ends, so that the transaction recording its success and
// releasing the lock meets the election. Each run ID ends "succeeded" with
// exactly one execution, the attempts the ledger says, and every other
// runner exits 0. 9 run IDs (3 leader kills) in `make test`; 200 run IDs
// (20 leader kills, every tenth) with FAULTS_FULL=1.
func TestRunOnce_clusterRunnersAcrossClientsAndLeaderKills(t *testing.T) {
	ids, killEvery := 9, 3
	if os.Getenv("FAULTS_FULL") != "" {
		ids, killEvery = 200, 10
	}
	c := testenv.StartClusterT(t, testenv.ClusterOptions{Servers: 3, Clients: 3})
	l := declareClusterRunOnce(t, c, lockmodel.SessionProfile{Name: "cluster-once", TTL: 10 * time.Second, LockDelay: time.Second},
		lockmodel.Lock{Name: "cluster-once", Prefix: "jobs/cluster-once", RunOnce: &ledger.RunOnce{Period: time.Hour}})

	record := filepath.Join(t.TempDir(), "record")
	kills := 0
	for i := range ids {
		id := fmt.Sprintf("cluster-%02d", i)
		var procs []*proc
		for j := range 6 {
			node := c.Clients[j%3]
			tag := fmt.Sprintf("%s.%d", id, j)
			procs = append(procs, startRunAt(t, "runner "+tag+" on "+node.Name, node.Addr, c.ManagementToken,
				[]string{"-lock", l.Name, "-run-id", id}, childArgs(record, tag, "-sleep", "700ms")...))
		}
		if i%killEvery == killEvery-1 {
			killLeaderAsTheCommandEnds(t, c, record, id)
			kills++
		}
		for _, p := range procs {
			if code := p.wait(2 * time.Minute); code != 0 {
				t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
			}
		}
		var ran []*childRun
		for _, r := range readRuns(t, record) {
			if r.runID == id {
				ran = append(ran, r)
			}
		}
		run := clusterLedgerRun(t, c, l.Name, id)
		if len(ran) != 1 || run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
			t.Fatalf("run %s: %d executions, ledger %+v; want one execution, recorded succeeded as attempt 1", id, len(ran), run)
		}
		if i%killEvery == killEvery-1 {
			restartKilledServers(t, c)
		}
	}
	t.Logf("MEASURED %d run IDs x 6 runners on 3 client agents, %d with the Raft leader killed as the command ended: one execution and one succeeded attempt each",
		ids, kills)
	t.Run("election-longer-than-the-stop-rule", func(t *testing.T) { longElectionAsTheCommandEnds(t, c, record) })
}

// Issue 31, item 1, on the cluster: the Raft leader and a follower are
// killed as the holder's command ends, so that no leader is elected for
// longer than the stop rule's loss_after (renewals fail too: the loss
// judge fires) and shorter than 2 x ttl; then one of them is started
// again. The holder's runner keeps sending its outcome until the new
// leader commits it; the next holder finds the run succeeded and does not
// run it again.
func longElectionAsTheCommandEnds(t *testing.T, c *testenv.Cluster, record string) {
	p := lockmodel.SessionProfile{Name: "cluster-election", TTL: 10 * time.Second, LockDelay: 5 * time.Second, RenewEvery: time.Second}
	rule := lockmodel.NewStopRule(p.Resolve(), time.Second)
	noLeader := rule.LossAfter() + 2*time.Second
	l := declareClusterRunOnce(t, c, p, lockmodel.Lock{Name: "cluster-election", Prefix: "jobs/cluster-election",
		RunOnce: &ledger.RunOnce{Period: time.Hour}})
	args := []string{"-lock", l.Name, "-run-id", "election", "-grace", "1s"}
	a := startRunAt(t, "runner a on "+c.Clients[0].Name, c.Clients[0].Addr, c.ManagementToken, args,
		childArgs(record, "election.a", "-wait-stdin")...)
	waitStarted(t, record, "election.a")
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	var follower *testenv.Node
	for _, s := range c.Servers {
		if s != leader && follower == nil {
			follower = s
		}
	}
	leader.Kill()
	follower.Kill()
	killed := time.Now()
	a.closeStdin()
	time.Sleep(noLeader)
	// The fault itself: one server of three left, so no leader for all of
	// noLeader, longer than the stop rule's loss_after: no renewal can
	// have succeeded, whatever the runner logged meanwhile.
	if l, err := c.Leader(); err == nil {
		t.Fatalf("a leader (%s) was elected with two of three servers killed", l.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := follower.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want 0:\n%s", code, a.out.String())
	}
	restartKilledServers(t, c)
	if run := clusterLedgerRun(t, c, l.Name, "election"); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("after %s without a leader the ledger says %+v; want attempt 1 succeeded:\n%s", noLeader, run, a.out.String())
	}
	b := startRunAt(t, "runner b on "+c.Clients[1].Name, c.Clients[1].Addr, c.ManagementToken, args, childArgs(record, "election.b")...)
	if code := b.wait(time.Minute); code != 0 || !strings.Contains(b.out.String(), "run already succeeded") {
		t.Fatalf("runner b exited %d, want 0 without running:\n%s", code, b.out.String())
	}
	t.Logf("MEASURED no leader for %s + the restart (loss after %s): runner a exited %s after the kill, its outcome recorded",
		noLeader, rule.LossAfter(), a.exited.Sub(killed).Round(time.Millisecond))
}

// declareClusterRunOnce writes profile and lock l (with profile as its
// session defaults) to the cluster's registry, and creates the lock's key,
// as consullock_lock would. It returns l as declared.
func declareClusterRunOnce(t *testing.T, c *testenv.Cluster, profile lockmodel.SessionProfile, l lockmodel.Lock) lockmodel.Lock {
	t.Helper()
	kv := c.Clients[0].Client().KV()
	put := func(key string, value []byte, flags uint64) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: key, Value: value, Flags: flags}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := record.EncodeSessionProfileRecord(profile)
	if err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, profile.Name), rec, 0)
	l.SessionDefaults = profile.Name
	if rec, err = record.EncodeLockRecord(l); err != nil {
		t.Fatal(err)
	}
	put(lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, l.Name), rec, 0)
	n, _ := l.Normalize()
	put(n.Key, nil, n.Flags())
	return l
}

// killLeaderAsTheCommandEnds kills the Raft leader 100ms before the
// holder's 700ms command of run id ends.
func killLeaderAsTheCommandEnds(t *testing.T, c *testenv.Cluster, record, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, r := range readRuns(t, record) {
			if r.runID == id && !r.start.IsZero() {
				time.Sleep(time.Until(r.start.Add(600 * time.Millisecond)))
				leader, err := c.Leader()
				if err != nil {
					t.Fatal(err)
				}
				leader.Kill()
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("run %s: no command started within a minute", id)
}

func restartKilledServers(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range c.Servers {
		if !s.Running() {
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func clusterLedgerRun(t *testing.T, c *testenv.Cluster, lock, id string) ledger.Run {
	t.Helper()
	ledger, _ := clusterLedger(t, c, lock)
	i := ledger.Find(id)
	if i < 0 {
		t.Fatalf("run %s not in the ledger", id)
	}
	return ledger.Runs[i]
}

// clusterLedger reads lock's ledger consistently through the second client
// agent, riding out an election, and decodes it.
func clusterLedger(t *testing.T, c *testenv.Cluster, lock string) (ledger.Ledger, *api.KVPair) {
	t.Helper()
	var pair *api.KVPair
	_, err := testenv.RetryWhile(context.Background(), func(err error) bool {
		return strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "leader")
	},
		func() error {
			var err error
			pair, _, err = c.Clients[1].Client().KV().Get(record.RunLedgerKey(lockmodel.DefaultRegistryPrefix, lock), &api.QueryOptions{RequireConsistent: true})
			return err
		})
	if err != nil || pair == nil {
		t.Fatalf("read the ledger: %v (pair %v)", err, pair)
	}
	ledger, err := record.DecodeLedger(pair.Value)
	if err != nil {
		t.Fatal(err)
	}
	return ledger, pair
}
