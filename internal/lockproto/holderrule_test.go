package lockproto

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestSemaphoreLoss_agreesWithTheOneRule feeds the shared semaphore states
// to a holder's loss check: every session lockmodel.Holders names still
// holds its slot, every other one has lost it. Torn reads need a session
// read, which a holder's watch does not make.
func TestSemaphoreLoss_agreesWithTheOneRule(t *testing.T) {
	for _, c := range holdercases.Cases {
		if !c.Semaphore || c.Torn {
			continue
		}
		m := &semaphore{lock: c.Lock(), prefix: c.Lock().Prefix}
		var pairs api.KVPairs
		for _, e := range c.Entries(m.prefix, holdercases.ID) {
			pairs = append(pairs, &api.KVPair{Key: e.Key, Flags: e.Flags, Value: e.Value, Session: e.Session, LockIndex: e.LockIndex, ModifyIndex: e.ModifyIndex})
		}
		for _, s := range c.Everyone() {
			lost := m.lostBecause(pairs, &Session{ID: holdercases.ID(s)})
			if holds := slices.Contains(c.Want, s); holds != (lost == "") {
				t.Errorf("%s: session %s: lostBecause = %q; want holding = %v", c.Name, s, lost, holds)
			}
		}
	}
}
