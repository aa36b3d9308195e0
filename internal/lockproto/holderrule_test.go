package lockproto

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestSemaphoreLoss_agreesWithTheOneRule feeds the shared semaphore states
// to a holder's loss check: every session lockmodel.Holders names still
// holds its slot, every other one has lost it. Torn reads need a session
// read, which a holder's watch does not make.
func TestSemaphoreLoss_agreesWithTheOneRule(t *testing.T) {
	id := func(s string) string { return "session-" + s }
	for _, c := range holdercases.Cases {
		if !c.Semaphore || c.Torn {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			l, err := lockmodel.Lock{Name: "job", Prefix: "jobs/job", Limit: 2}.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			m := &semaphore{lock: l, prefix: l.Prefix}
			var pairs api.KVPairs
			for _, e := range c.Entries(l.Prefix, id) {
				pairs = append(pairs, &api.KVPair{Key: e.Key, Flags: e.Flags, Value: e.Value, Session: e.Session, LockIndex: e.LockIndex, ModifyIndex: e.ModifyIndex})
			}
			for _, s := range c.Everyone() {
				lost := m.lostBecause(pairs, &Session{ID: id(s)})
				if holds := slices.Contains(c.Want, s); holds != (lost == "") {
					t.Errorf("session %s: lostBecause = %q; want holding = %v", s, lost, holds)
				}
			}
		})
	}
}
