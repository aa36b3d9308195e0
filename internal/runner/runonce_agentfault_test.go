package runner

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agentFaultProfile is the profile of the agent-fault cases: with
// serfHealth bound to the session, another holder may acquire lock_delay
// (8s) after the holder's last contact, so the cut-off runner decides the
// loss at 8s - 1s margin - 1s grace = 6s and its command is dead by 7s.
// Renewals every 2s keep a healthy holder on a loaded machine.
var agentFaultProfile = lockmodel.SessionProfile{Name: "agent-fault-once", TTL: 10 * time.Second,
	LockDelay: 8 * time.Second, RenewEvery: 2 * time.Second}

const agentFaultGrace = time.Second

// The holder's client agent frozen (SIGSTOP, a paused VM) or killed
// (SIGKILL, then started again) while its runner's command runs, on a
// 3-server cluster with a waiter on each of the two other client agents;
// the agent comes back after the run succeeded elsewhere, or (frozen) as
// soon as its runner has stopped the command, so that the runner's release
// transaction meets a live agent and it records the attempt lost itself.
// The cut-off runner stops its command by the stop rule and exits 123
// (lock lost); the servers fail the node's serfHealth and invalidate the
// session; a waiter acquires after lock_delay, finds attempt 1 running
// under a gone session, records it crashed (or finds it recorded lost) and
// runs attempt 2, which succeeds; the other waiter exits 0. After the agent
// is back (thawed, or started again) and the old runner has exited, the
// ledger is left as the new holder wrote it: the old runner overwrote
// nothing. Exactly one successful execution, none after it, never two at
// once.
func TestRunOnce_holderAgentFrozenOrKilledMidRun(t *testing.T) {
	rule := lockmodel.NewStopRule(agentFaultProfile.Resolve(), agentFaultGrace)
	if !rule.Feasible() {
		t.Fatalf("test profile: %s", rule.Verdict())
	}
	c := testenv.StartClusterT(t, testenv.ClusterOptions{Servers: 3, Clients: 3})
	freeze := func(t *testing.T, n *testenv.Node) {
		if err := n.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	thaw := func(t *testing.T, n *testenv.Node) {
		if err := n.Thaw(); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(t *testing.T, n *testenv.Node) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, fault := range []struct {
		name        string
		inject, end func(*testing.T, *testenv.Node)
		// endEarly: the agent is back as soon as its runner has stopped
		// the command (before the take-over), so that the runner's
		// release transaction and late outcome meet a live agent.
		// Otherwise it is back after the run succeeded elsewhere.
		endEarly bool
	}{
		{name: "frozen", inject: freeze, end: thaw},
		{name: "frozen-thawed-before-take-over", inject: freeze, end: thaw, endEarly: true},
		{name: "killed", inject: func(_ *testing.T, n *testenv.Node) { n.Kill() }, end: restart},
	} {
		t.Run(fault.name, func(t *testing.T) {
			began := time.Now()
			l := declareClusterRunOnce(t, c, agentFaultProfile, lockmodel.Lock{Name: "agent-" + fault.name,
				Prefix: "jobs/agent-" + fault.name, RunOnce: &ledger.RunOnce{Period: time.Hour}})
			id := "agent-" + fault.name
			recordFile := filepath.Join(t.TempDir(), "record")
			args := []string{"-lock", l.Name, "-run-id", id, "-grace", agentFaultGrace.String()}
			victim := c.Clients[0]
			a := startRunAt(t, "runner a on "+victim.Name, victim.Addr, c.ManagementToken, args,
				childArgs(recordFile, "a", "-sleep", "5m")...)
			waitStarted(t, recordFile, "a")
			var waiters []*proc
			for _, node := range c.Clients[1:] {
				p := startRunAt(t, "runner on "+node.Name, node.Addr, c.ManagementToken, args,
					childArgs(recordFile, node.Name, "-sleep", "500ms")...)
				waitOutput(t, p, "waiting for the lock")
				waiters = append(waiters, p)
			}
			if run := clusterLedgerRun(t, c, l.Name, id); run.Outcome != ledger.RunRunning || len(run.Attempts) != 1 {
				t.Fatalf("while a runs, the ledger says %+v; want attempt 1 running", run)
			}

			fault.inject(t, victim)
			faulted := time.Now()
			if fault.endEarly {
				waitOutput(t, a, "lock lost: the command was stopped")
				fault.end(t, victim)
			}
			for _, p := range waiters {
				if code := p.wait(2 * time.Minute); code != 0 {
					t.Fatalf("%s exited %d, want 0:\n%s", p.name, code, p.out.String())
				}
			}
			settled, pair := clusterLedger(t, c, l.Name)
			if !fault.endEarly {
				fault.end(t, victim)
			}
			if code := a.wait(2 * time.Minute); code != ExitLockLost {
				t.Fatalf("runner a (agent %s) exited %d, want %d (lock lost, runner guide):\n%s", fault.name, code, ExitLockLost, a.out.String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
			// What the old runner sent to its agent before it exited is
			// handled once the agent runs again: watch the ledger a while.
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if _, now := clusterLedger(t, c, l.Name); now.ModifyIndex != pair.ModifyIndex {
					after, _ := record.DecodeLedger(now.Value)
					t.Fatalf("the ledger was written after the new holder's success (index %d -> %d): %+v", pair.ModifyIndex, now.ModifyIndex, after)
				}
			}

			runs := readRuns(t, recordFile)
			var old, success *childRun
			for _, r := range runs {
				if r.runID != id {
					t.Fatalf("execution %+v is not of run %s", r, id)
				}
				switch {
				case r.tag == "a":
					old = r
				case r.ended && !r.termed:
					if success != nil {
						t.Fatalf("two successful executions: %+v and %+v", success, r)
					}
					success = r
				default:
					t.Fatalf("execution %+v neither a's nor a success", r)
				}
			}
			if old == nil || !old.termed || !old.ended || old.attempt != "1" {
				t.Fatalf("a's execution %+v; want attempt 1, stopped by SIGTERM", old)
			}
			if success == nil || success.attempt != "2" || len(runs) != 2 {
				t.Fatalf("executions %+v; want a's and one success as attempt 2", runs)
			}
			if !old.end.Before(success.start) {
				t.Fatalf("a's command ran until %s, after attempt 2 started at %s", old.end, success.start)
			}
			i := settled.Find(id)
			if i < 0 {
				t.Fatalf("run %s not in the ledger", id)
			}
			run := settled.Runs[i]
			if run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 2 ||
				run.Attempts[0].Session != old.session ||
				(run.Attempts[0].Outcome != ledger.RunCrashed && run.Attempts[0].Outcome != ledger.RunLost) ||
				run.Attempts[1].Outcome != ledger.RunSucceeded || run.Attempts[1].Session != success.session ||
				run.Attempts[1].FencingToken != success.token {
				t.Fatalf("ledger run %+v; want attempt 1 (a) crashed or lost, attempt 2 (%s, token %d) succeeded",
					run, success.tag, success.token)
			}
			t.Logf("MEASURED agent %s: a's command stopped %s after the fault (stop rule: dead by %s after the last contact); "+
				"attempt 2 started %s after the fault on %s; runner a exited 123 %s after the fault; attempt 1 recorded %s; "+
				"ledger unchanged after the agent came back; case took %s",
				fault.name, old.end.Sub(faulted).Round(time.Millisecond), rule.DeadBy(),
				success.start.Sub(faulted).Round(time.Millisecond), success.tag,
				a.exited.Sub(faulted).Round(time.Millisecond), run.Attempts[0].Outcome, time.Since(began).Round(time.Millisecond))
		})
	}
}
