package faults

import (
	"fmt"
	"slices"
	"syscall"
)

// FaultStopAtExit is timed to a run-once command's exit, armed as
// FaultOnceExit is: the runner alone is stopped (SIGSTOP) as its command
// exits by itself, kept stopped For (past its guard's kill-by, well under
// 2 x ttl: StopAtExitWindow), then woken. The run's outcome must be the
// command's: succeeded, once (StopAtExitViolations).
const FaultStopAtExit FaultKind = "stop-at-once-exit"

type stopAtExit struct{}

func (stopAtExit) Spec() FaultSpec {
	return FaultSpec{Name: FaultStopAtExit, Weight: 2, Group: "servers", AtExit: true, Needs: hasOnce}
}

func (stopAtExit) Draw(sc *scheduler, s *Step) {
	s.Target, s.For = sc.cfg.Once, sc.between(sc.cfg.MinStop, sc.cfg.MaxStop)
}

// Occupy: judged only when nothing else touches the run: no fault on the
// cluster, the client nodes, the clocks or the run-once lock from the stop
// (up to OnceExitArmed after At) to StopAtExitJudged after the wake-up.
func (stopAtExit) Occupy(sc *scheduler, s Step) {
	end := s.At + OnceExitArmed + s.For + StopAtExitJudged + sc.cfg.MinGap
	for _, g := range []string{"servers", "clients", "skews", "once"} {
		sc.occupyUntil(g, end)
	}
}

func (stopAtExit) Inject(n *nemesis, sh shot) (func(), bool) { return n.stopAtExit(sh.i, sh.end) }

// stopStrike is one stop-at-once-exit that struck: step i, the run and
// its runner, the cluster faults in force then, and its marks in the
// run-once store (cont: zero until woken).
type stopStrike struct {
	i             int
	runID, worker string
	inForce       string
	stop, cont    Write
}

// stopAtExit stops (SIGSTOP) the runner of the run-once command whose end
// was just applied, the runner alone: its guard sees the command exit and
// acts at its kill-by, the runner wakes (the undo) with its command long
// exited.
func (n *nemesis) stopAtExit(i int, end Write) (func(), bool) {
	o := n.once
	p := o.runnerOf(end)
	if p == nil {
		return nil, false
	}
	inForce := n.clusterFaultsInForce(i)
	stop := o.store.Mark(end.Worker, fmt.Sprintf("nemesis: %s SIGSTOP runner %d as its command exits", FaultStopAtExit, p.Pid))
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return nil, false
	}
	n.mu.Lock()
	k := len(n.stopStrikes)
	n.stopStrikes = append(n.stopStrikes, stopStrike{i: i, runID: OnceRunID(end.Worker), worker: end.Worker, inForce: inForce, stop: stop})
	n.mu.Unlock()
	return func() {
		cont := o.store.Mark(end.Worker, fmt.Sprintf("nemesis: %s SIGCONT runner %d", FaultStopAtExit, p.Pid))
		_ = p.Signal(syscall.SIGCONT)
		n.mu.Lock()
		n.stopStrikes[k].cont = cont
		n.mu.Unlock()
	}, true
}

// stopAtExitStrikes are the strikes as the checker reads them: the
// runner's exit, and judged when no cluster fault was in force at the
// stop and no other fault was marked in the run-once store from the stop
// to StopAtExitJudged after the wake-up (a session destroyed, a node cut off: the
// outcome is then not the stop's alone).
func (n *nemesis) stopAtExitStrikes(onceLog []Write) []StopAtExitStrike {
	n.mu.Lock()
	strikes := slices.Clone(n.stopStrikes)
	n.mu.Unlock()
	n.once.mu.Lock()
	defer n.once.mu.Unlock()
	var out []StopAtExitStrike
	for _, s := range strikes {
		code, ok := n.once.exitOf[s.worker]
		if !ok {
			code = -1
		}
		judged := s.inForce == "none" && !s.cont.At.IsZero()
		for _, w := range onceLog[s.stop.Seq+1:] {
			if !judged || !w.At.Before(s.cont.At.Add(StopAtExitJudged)) {
				break
			}
			judged = w.Kind != KindFault || w.Seq == s.cont.Seq
		}
		out = append(out, StopAtExitStrike{RunID: s.runID, Worker: s.worker, Exit: code, Judged: judged})
	}
	return out
}

// strikeExits counts the stopped runners' exit codes (-1: not seen).
func strikeExits(strikes []StopAtExitStrike) string {
	m := map[int]int{}
	for _, s := range strikes {
		m[s.Exit]++
	}
	return exitsText(m)
}
