package faults

import (
	"context"
	"time"
)

// FaultLeaderKill SIGKILLs the Raft leader and restarts it after For.
const FaultLeaderKill FaultKind = "leader-kill"

type leaderKill struct{}

func (leaderKill) Spec() FaultSpec {
	return FaultSpec{Name: FaultLeaderKill, Weight: 2, Group: "servers", OnCluster: true}
}

func (leaderKill) Draw(sc *scheduler, s *Step) { s.Target, s.For = "raft-leader", sc.lasting() }

func (leaderKill) Inject(n *nemesis, _ shot) (func(), bool) { return n.killLeader() }

// killLeader SIGKILLs the Raft leader once every server runs and the
// cluster is healthy; the undo starts it again.
func (n *nemesis) killLeader() (func(), bool) {
	c := n.cluster
	for _, s := range c.Servers {
		if !s.Running() {
			return nil, false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, false // a restarted server is not a voter yet: a kill now could leave no quorum
	}
	leader, err := c.Leader()
	if err != nil {
		return nil, false
	}
	n.markAll("nemesis: kill Raft leader " + leader.Name)
	leader.Kill()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := leader.Start(ctx); err != nil {
			n.errorf("restarting %s: %v", leader.Name, err)
		}
	}, true
}
