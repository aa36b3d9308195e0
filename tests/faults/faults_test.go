package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestFaults runs three `consullock run` workers per fault on a lock of
// their own, injects the fault round after round, and checks the guarded
// store's log: no overlap among accepted writes, no stale token accepted,
// no token used by two executions. The table is logged, and written to
// <repo>/tmp/faults-report.md.
//
// FAULTS_FULL=1 runs the full variant (at least 200 hand-overs); the
// default is a small variant for CI.
func TestFaults(t *testing.T) {
	if err := createRunnerToken(); err != nil {
		t.Fatal(err)
	}
	full := os.Getenv("FAULTS_FULL") != ""
	var reports []Report
	for _, ph := range faultPhases(full) {
		t.Run(ph.name, func(t *testing.T) {
			reports = append(reports, newHarness(t, ph).run())
		})
	}
	table := Table(reports)
	variant := "CI"
	if full {
		variant = "full (FAULTS_FULL=1)"
	}
	t.Logf("fault table, %s variant:\n%s", variant, table)
	if root, err := testenv.RepoRoot(); err == nil {
		_ = os.WriteFile(filepath.Join(root, "tmp", "faults-report.md"), []byte("Variant: "+variant+"\n\n"+table), 0o644)
	}
	handOvers := 0
	for _, r := range reports {
		handOvers += r.HandOvers
	}
	if full && handOvers < 200 {
		t.Errorf("%d hand-overs in total; the full variant must reach 200", handOvers)
	}
}

// faultPhases lists the faults. The CI variant runs a few rounds of each;
// the full variant adds enough clean hand-overs for 200 in total.
func faultPhases(full bool) []phase {
	n := func(ci, fullRounds int) int {
		if full {
			return fullRounds
		}
		return ci
	}
	return []phase{
		{name: "clean-release", rounds: n(12, 170), work: 200 * time.Millisecond},
		{name: "sigterm-holder", rounds: n(3, 15), work: 5 * time.Second, inject: injectTerm},
		{name: "sigkill-holder", rounds: n(2, 5), work: 5 * time.Second, inject: injectKill},
		{name: "sigstop-holder", rounds: n(1, 4), work: 10 * time.Second, inject: injectStall},
		{name: "session-destroy", rounds: n(3, 15), work: 5 * time.Second, inject: injectDestroy},
		{name: "controller-enforce", rounds: n(2, 10), work: 20 * time.Second, maxHold: 2 * time.Second, controller: true, inject: injectEnforce},
		{name: "partition-holder", rounds: n(1, 3), work: time.Minute, otherWork: time.Second, partitioned: true, inject: injectPartition},
		{name: "agent-restart", rounds: n(1, 3), work: 5 * time.Second, inject: injectRestart},
	}
}

// injectTerm stops the holder as a deploy or an operator would: SIGTERM to
// the runner, which forwards it to the child and releases.
func injectTerm(h *harness, holder Write) Write {
	mark := h.store.Mark(holder.Worker, "SIGTERM runner")
	if p := h.holderRunner(holder); p != nil {
		_ = p.Signal(syscall.SIGTERM)
	}
	return h.waitStart(mark.Seq, holder.Token)
}

// injectKill crashes the holder: SIGKILL to its runner and its child. The
// session is left to expire (about 2 x TTL), then lock-delay passes.
func injectKill(h *harness, holder Write) Write {
	mark := h.store.Mark(holder.Worker, "SIGKILL runner and child")
	if p := h.holderRunner(holder); p != nil {
		signalHolder(p, holder, syscall.SIGKILL)
	}
	return h.waitStart(mark.Seq, holder.Token)
}

// injectStall stops the holder (runner, guard and child) for longer than
// 2 x TTL: the session expires and another worker takes over. When the
// stalled child wakes up its late write must be rejected by the store.
// The runner and its guard wake once that write is in: awake, the guard
// kills the child at once (its kill-by has passed), before it could write.
func injectStall(h *harness, holder Write) Write {
	t := h.t
	p := h.holderRunner(holder)
	if p == nil {
		return h.waitStart(holder.Seq, holder.Token)
	}
	// Let the child read the store's answer to its start first: frozen
	// with the answer in flight, it would wake to a client timeout and give
	// up without writing, and the round would prove nothing.
	time.Sleep(300 * time.Millisecond)
	mark := h.store.Mark(holder.Worker, "SIGSTOP runner, guard and child")
	signalHolder(p, holder, syscall.SIGSTOP)
	stopped := time.Now()
	next := h.waitStart(mark.Seq, holder.Token)
	if rest := 2*h.profile.TTL + 2*time.Second - time.Since(stopped); rest > 0 {
		time.Sleep(rest) // the stall itself: the fault is a process frozen for this long
	}
	// The child first: it wakes up believing it holds the lock and writes
	// at once (its work timer has run out), before its runner can stop it.
	h.store.Mark(holder.Worker, fmt.Sprintf("SIGCONT after %s", time.Since(stopped).Round(time.Second)))
	_ = syscall.Kill(-holder.PID, syscall.SIGCONT)
	defer signalRunner(p, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	var late Write
	if _, err := h.store.WaitFor(ctx, func(log []Write) bool {
		for _, w := range log[mark.Seq:] {
			if w.Run == holder.Run {
				late = w
				return true
			}
		}
		return false
	}); err != nil {
		t.Errorf("the stalled holder (%s, token %d) wrote nothing within 30s of waking up; the test proved nothing", holder.Worker, holder.Token)
	} else if late.Accepted {
		t.Errorf("the stalled holder's late %s write (token %d) was ACCEPTED after the next holder started with token %d",
			late.Kind, late.Token, next.Token)
	} else {
		t.Logf("stalled holder %s woke after %s: its late %s write with token %d was rejected (highest %d)",
			holder.Worker, late.At.Sub(stopped).Round(time.Millisecond), late.Kind, late.Token, late.Highest)
	}
	return next
}

// injectDestroy destroys the holder's session out of band (as an operator
// with `consul session destroy` would): the runner must see the loss and
// stop its child; the key is under lock-delay.
func injectDestroy(h *harness, holder Write) Write {
	mark := h.store.Mark(holder.Worker, "session destroy")
	if _, err := h.env.admin().Session().Destroy(holder.Session, nil); err != nil {
		h.t.Fatalf("destroying session %s: %v", holder.Session, err)
	}
	return h.waitStart(mark.Seq, holder.Token)
}

// injectEnforce does nothing itself: the controller in enforce mode ends
// every holder that exceeds the declared max_hold (2s; the jobs last 20s).
func injectEnforce(h *harness, holder Write) Write {
	next := h.waitStart(holder.Seq, holder.Token)
	if d := next.At.Sub(holder.At); d >= h.ph.work {
		h.t.Errorf("the holder kept the lock %s, the whole job: the controller did not end it at max_hold %s", d, h.ph.maxHold)
	}
	return next
}

// injectRestart restarts the dev agent, which loses all state (sessions,
// keys, ACLs), and re-seeds what the provider and the operator had created.
func injectRestart(h *harness, holder Write) Write {
	mark := h.store.Mark(holder.Worker, "agent restart")
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	if err := agent.Restart(ctx); err != nil {
		h.t.Fatalf("restarting the agent: %v", err)
	}
	if err := h.reseed(); err != nil {
		h.t.Fatalf("re-seeding after the restart: %v", err)
	}
	h.t.Logf("agent restarted and re-seeded %s after the fault", time.Since(mark.At).Round(time.Millisecond))
	return h.waitStart(mark.Seq, holder.Token)
}

// injectPartition cuts the holder off from the agent (its network
// namespace's link, or the link the test controls; its child can still
// reach the store). The runner must stop its child
// within TTL + grace, before Consul can hand the lock over (2 x TTL +
// lock_delay); the partition is healed once another worker holds the lock.
func injectPartition(h *harness, holder Write) Write {
	mark := h.store.Mark(holder.Worker, "partition from agent")
	h.cut()
	next := h.waitStart(mark.Seq, holder.Token)
	h.heal()
	var stopped *Write
	for _, w := range h.store.Log()[mark.Seq:] {
		if w.Run == holder.Run && w.Kind != KindStart {
			stopped = &w
			break
		}
	}
	switch {
	case stopped == nil:
		h.t.Errorf("the partitioned holder's child wrote nothing after the partition: was it still working when %s started?", next.Worker)
	case stopped.At.After(next.At):
		h.t.Errorf("the partitioned holder's child was stopped %s after the next holder started", stopped.At.Sub(next.At))
	default:
		h.t.Logf("partitioned holder %s: child stopped (%s) %s after the cut; next holder %s started %s after the cut",
			holder.Worker, stopped.Kind, stopped.At.Sub(mark.At).Round(time.Millisecond), next.Worker, next.At.Sub(mark.At).Round(time.Millisecond))
	}
	return next
}

// cut partitions worker w1 from its agent; heal ends it.
func (h *harness) cut() {
	if h.part != nil {
		h.part.cut(h.t)
		return
	}
	h.link.Cut()
}

func (h *harness) heal() {
	if h.part != nil {
		h.part.heal(h.t)
		return
	}
	h.link.Heal()
}
