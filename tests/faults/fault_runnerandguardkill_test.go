package faults

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// FaultTreeKill SIGKILLs a holder's runner and its guard together, as
// `pkill -9 -f consullock` does. Target is the workload whose runners run
// with -tree-protection pid-namespace (ScheduleConfig.TreeKill): the
// kernel ends the tree.
const FaultTreeKill FaultKind = "runner-and-guard-kill"

type runnerAndGuardKill struct{}

func (runnerAndGuardKill) Spec() FaultSpec {
	return FaultSpec{Name: FaultTreeKill, Weight: 1, Needs: func(cfg ScheduleConfig) bool { return cfg.TreeKill != "" }}
}

func (runnerAndGuardKill) Draw(sc *scheduler, s *Step) { s.Target = sc.cfg.TreeKill }

func (runnerAndGuardKill) Inject(n *nemesis, sh shot) (func(), bool) {
	return nil, n.killTree(sh, func(h lockTarget, holder Write, p *os.Process) bool {
		guard := guardOf(p.Pid)
		if guard == 0 {
			return false // no command started yet, or its guard is gone
		}
		h.store.Mark(holder.Worker, fmt.Sprintf("nemesis: %s SIGKILL runner %d and guard %d", sh.s.Kind, p.Pid, guard))
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		_ = syscall.Kill(guard, syscall.SIGKILL)
		return true
	})
}

// pidNamespacesUnavailable says why runners here cannot run with
// -tree-protection pid-namespace ("" when they can): it needs root (or
// CAP_SYS_ADMIN), and a PID and mount namespace the kernel grants.
func pidNamespacesUnavailable() string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf("the test runs as uid %d, not root", os.Geteuid())
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("no PID namespace: %v", err)
	}
	return ""
}
