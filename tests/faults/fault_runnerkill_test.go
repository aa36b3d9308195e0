package faults

import (
	"syscall"
)

// FaultRunnerKill SIGKILLs a holder's runner and command.
const FaultRunnerKill FaultKind = "runner-kill"

type runnerKill struct{}

func (runnerKill) Spec() FaultSpec { return FaultSpec{Name: FaultRunnerKill, Weight: 3} }

func (runnerKill) Draw(sc *scheduler, s *Step) { s.Target = sc.lock }

func (runnerKill) Inject(n *nemesis, sh shot) (func(), bool) {
	h := n.lockTarget(sh.s)
	holder, p := n.holder(h)
	if p == nil {
		return nil, false
	}
	h.store.Mark(holder.Worker, "nemesis: SIGKILL runner and child")
	signalHolder(p, holder, syscall.SIGKILL)
	return nil, true
}
