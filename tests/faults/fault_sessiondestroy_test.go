package faults

import (
	"github.com/hashicorp/consul/api"
)

// FaultSessionDestroy destroys a holder's session.
const FaultSessionDestroy FaultKind = "session-destroy"

type sessionDestroy struct{}

func (sessionDestroy) Spec() FaultSpec { return FaultSpec{Name: FaultSessionDestroy, Weight: 3} }

func (sessionDestroy) Draw(sc *scheduler, s *Step) { s.Target = sc.lock }

func (sessionDestroy) Inject(n *nemesis, sh shot) (func(), bool) {
	h := n.lockTarget(sh.s)
	holder, p := n.holder(h)
	if p == nil || holder.Session == "" {
		return nil, false
	}
	h.store.Mark(holder.Worker, "nemesis: destroy session "+holder.Session)
	return nil, n.admin(func(c *api.Client) error { _, err := c.Session().Destroy(holder.Session, nil); return err })
}
