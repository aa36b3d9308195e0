package faults

import (
	"syscall"
)

// FaultRunnerFreeze SIGSTOPs a fenced holder's runner, guard and command,
// and SIGCONTs them after For.
const FaultRunnerFreeze FaultKind = "runner-freeze"

type runnerFreeze struct{}

func (runnerFreeze) Spec() FaultSpec { return FaultSpec{Name: FaultRunnerFreeze, Weight: 2} }

// Draw picks a fenced holder only: a semaphore's slots have no fencing
// token the store could check, and a frozen command wakes up to write
// whatever it was about to. Up to three times the longest other fault:
// past 2 x TTL the session is gone and another holder takes over while it
// sleeps.
func (runnerFreeze) Draw(sc *scheduler, s *Step) {
	s.Target, s.For = sc.fenced[sc.intN(len(sc.fenced))], sc.between(sc.cfg.MinFor, 3*sc.cfg.MaxFor)
}

func (runnerFreeze) Inject(n *nemesis, sh shot) (func(), bool) {
	return n.freezeHolder(n.lockTarget(sh.s))
}

// freezeHolder stops a fenced holder's runner, guard and command (SIGSTOP,
// a paused VM); the undo wakes the command first, which then writes at
// once with its old token: the store must reject it if another holder
// started meanwhile.
func (n *nemesis) freezeHolder(h lockTarget) (func(), bool) {
	holder, p := n.holder(h)
	if p == nil {
		return nil, false
	}
	h.store.Mark(holder.Worker, "nemesis: SIGSTOP runner, guard and child")
	signalHolder(p, holder, syscall.SIGSTOP)
	return func() {
		h.store.Mark(holder.Worker, "nemesis: SIGCONT runner, guard and child")
		_ = syscall.Kill(-holder.PID, syscall.SIGCONT)
		signalRunner(p, syscall.SIGCONT)
	}, true
}
