package faults

// FaultClientFreeze SIGSTOPs a client agent, and SIGCONTs it after For.
const FaultClientFreeze FaultKind = "client-freeze"

type clientFreeze struct{}

func (clientFreeze) Spec() FaultSpec {
	return FaultSpec{Name: FaultClientFreeze, Weight: 2, Group: "clients", OnCluster: true}
}

func (clientFreeze) Draw(sc *scheduler, s *Step) { s.Target, s.For = sc.client(), sc.lasting() }

func (clientFreeze) Inject(n *nemesis, sh shot) (func(), bool) {
	node := n.clientNode(sh.s)
	if err := node.Freeze(); err != nil {
		n.errorf("freezing %s: %v", node.Name, err)
		return nil, false
	}
	return func() { _ = node.Thaw() }, true
}
