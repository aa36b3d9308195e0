package faults

import (
	"context"
	"time"
)

// FaultClientKill SIGKILLs a client agent, and starts it again after For.
const FaultClientKill FaultKind = "client-kill"

type clientKill struct{}

func (clientKill) Spec() FaultSpec {
	return FaultSpec{Name: FaultClientKill, Weight: 2, Group: "clients", OnCluster: true}
}

func (clientKill) Draw(sc *scheduler, s *Step) { s.Target, s.For = sc.client(), sc.lasting() }

func (clientKill) Inject(n *nemesis, sh shot) (func(), bool) {
	node := n.clientNode(sh.s)
	node.Kill()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := node.Start(ctx); err != nil {
			n.errorf("restarting %s: %v", node.Name, err)
		}
	}, true
}
