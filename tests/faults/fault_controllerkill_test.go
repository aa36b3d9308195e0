package faults

// FaultControllerKill SIGKILLs a controller replica and restarts it after
// For.
const FaultControllerKill FaultKind = "controller-kill"

type controllerKill struct{}

func (controllerKill) Spec() FaultSpec {
	return FaultSpec{Name: FaultControllerKill, Weight: 2, Group: "controllers"}
}

func (controllerKill) Draw(sc *scheduler, s *Step) { s.Target, s.For = sc.controller(), sc.lasting() }

// Inject's undo starts the replica again even when it was down already
// (an earlier kill's restart is still to come: the step is skipped).
func (controllerKill) Inject(n *nemesis, sh shot) (func(), bool) {
	r := n.replicas[replicaIndex(sh.s.Target)]
	process := r.kill()
	n.killed(r, process)
	return func() {
		if err := r.start(); err != nil {
			n.errorf("restarting %s: %v", r.name, err)
		}
	}, process != ""
}
