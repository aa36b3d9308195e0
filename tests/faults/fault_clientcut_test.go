package faults

// FaultClientCut cuts a client node off the network, and heals it after For.
const FaultClientCut FaultKind = "client-cut"

type clientCut struct{}

func (clientCut) Spec() FaultSpec {
	return FaultSpec{Name: FaultClientCut, Weight: 2, Group: "clients", OnCluster: true}
}

func (clientCut) Draw(sc *scheduler, s *Step) { s.Target, s.For = sc.client(), sc.lasting() }

func (clientCut) Inject(n *nemesis, sh shot) (func(), bool) {
	node := n.clientNode(sh.s)
	if err := node.Cut(); err != nil {
		n.errorf("cutting %s off: %v", node.Name, err)
		return nil, false
	}
	return func() { _ = node.Heal() }, true
}
