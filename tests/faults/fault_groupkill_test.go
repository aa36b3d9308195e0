package faults

import (
	"fmt"
	"os"
	"syscall"
)

// FaultGroupKill SIGKILLs the process group of a holder's runner, as
// `timeout -s KILL`, supervisord's killasgroup or `kill -9 -- -PGID` do
// (the nemesis starts runners as group leaders): the runner dies, its
// guard (a group of its own) must end the command's tree.
const FaultGroupKill FaultKind = "group-kill"

type groupKill struct{}

func (groupKill) Spec() FaultSpec { return FaultSpec{Name: FaultGroupKill, Weight: 1} }

func (groupKill) Draw(sc *scheduler, s *Step) { s.Target = sc.lock }

// Inject never kills the test's own group: the nemesis starts every
// runner as a group leader.
func (groupKill) Inject(n *nemesis, sh shot) (func(), bool) {
	return nil, n.killTree(sh, func(h lockTarget, holder Write, p *os.Process) bool {
		if pgid, err := syscall.Getpgid(p.Pid); err != nil || pgid != p.Pid || pgid == syscall.Getpgrp() {
			n.t.Logf("nemesis: %s: runner %d of %s does not lead its process group (pgid %d, %v): not killed", sh.s.Kind, p.Pid, holder.Worker, pgid, err)
			return false
		}
		h.store.Mark(holder.Worker, fmt.Sprintf("nemesis: %s SIGKILL process group %d of the runner", sh.s.Kind, p.Pid))
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		return true
	})
}
