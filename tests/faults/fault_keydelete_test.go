package faults

import (
	"github.com/hashicorp/consul/api"
)

// FaultKeyDelete deletes the lock key (the controller restores it).
const FaultKeyDelete FaultKind = "key-delete"

type keyDelete struct{}

func (keyDelete) Spec() FaultSpec { return FaultSpec{Name: FaultKeyDelete, Weight: 2} }

func (keyDelete) Draw(sc *scheduler, s *Step) { s.Target = sc.lock }

func (keyDelete) Inject(n *nemesis, sh shot) (func(), bool) {
	h := n.lockTarget(sh.s)
	h.store.Mark("", "nemesis: delete "+h.key)
	return nil, n.admin(func(c *api.Client) error { _, err := c.KV().Delete(h.key, nil); return err })
}
