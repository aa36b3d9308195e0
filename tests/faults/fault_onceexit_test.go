package faults

import (
	"fmt"
	"strings"
)

// FaultOnceExit is a fault timed to a run-once command's exit: armed at
// At, it strikes when the next run-once command ends (the moment the
// job's guard applies its effect, just before the command exits) within
// OnceExitArmed, and is undone For later. Target says which:
// "client-freeze" (SIGSTOP the client agent of the runner whose command
// ends: its outcome transaction, renewals and all, meet a hung agent) or
// "leader-kill" (SIGKILL the Raft leader: no transaction commits until an
// election). Its checker: no runner exits 0 for a run whose ledger does
// not record that success (SuccessExitsNotRecorded).
const FaultOnceExit FaultKind = "once-exit"

type onceExit struct{}

func (onceExit) Spec() FaultSpec {
	return FaultSpec{Name: FaultOnceExit, Weight: 2, Group: "servers", AtExit: true, Needs: hasOnce}
}

// hasOnce: the configuration has a run-once lock.
func hasOnce(cfg ScheduleConfig) bool { return cfg.Once != "" }

// Draw freezes a client agent only when no other fault is on the client
// nodes.
func (onceExit) Draw(sc *scheduler, s *Step) {
	s.Target, s.For = "leader-kill", sc.lasting()
	if sc.free("clients", s.At) && sc.intN(2) == 1 {
		s.Target = "client-freeze"
	}
}

// Occupy: it strikes up to OnceExitArmed after At; the servers (and, for
// a freeze, the clients) are busy until it is undone.
func (onceExit) Occupy(sc *scheduler, s Step) {
	end := s.At + OnceExitArmed + s.For + sc.cfg.MinGap
	sc.occupyUntil("servers", end)
	if s.Target == "client-freeze" {
		sc.occupyUntil("clients", end)
	}
}

// Inject strikes as the command of sh.end ends: the client agent of its
// runner frozen, or the Raft leader killed.
func (onceExit) Inject(n *nemesis, sh shot) (func(), bool) {
	if sh.s.Target != "client-freeze" {
		return n.killLeader()
	}
	worker := sh.end.Worker
	_, runner, _ := strings.Cut(worker, "/")
	nodeName := runner[:max(strings.LastIndex(runner, "."), 0)]
	for _, c := range n.cluster.Clients {
		if c.Name != nodeName {
			continue
		}
		n.markAll(fmt.Sprintf("nemesis: %s %s (%s: as the command of %s ends)", FaultClientFreeze, c.Name, FaultOnceExit, worker))
		if err := c.Freeze(); err != nil {
			n.errorf("freezing %s: %v", c.Name, err)
			return nil, false
		}
		return func() { _ = c.Thaw() }, true
	}
	return nil, false
}
