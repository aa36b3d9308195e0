package controller

import (
	"slices"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestHolders_agreeWithTheOneRule feeds the shared Consul states to the
// controller's holders (what it judges and exports as
// consullock_lock_holder_info): it must name the holders lockmodel.Holders
// names, which status, the data source and the protocol name too.
func TestHolders_agreeWithTheOneRule(t *testing.T) {
	for _, c := range holdercases.Cases {
		l := c.Lock()
		keys := map[string]LiveKey{}
		for _, e := range c.Entries(l.Prefix, holdercases.ID) {
			keys[e.Key] = e.KeyEntry
		}
		got := []string{}
		for _, s := range holders(l, keys, c.Sessions(holdercases.ID)) {
			got = append(got, s.ID)
		}
		if want := c.WantIDs(holdercases.ID); !slices.Equal(got, want) {
			t.Errorf("%s: controller holders = %q, want %q", c.Name, got, want)
		}
	}
}
