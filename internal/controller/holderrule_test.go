package controller

import (
	"slices"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestHolders_agreeWithTheOneRule feeds the shared Consul states to the
// controller's holders (what it judges and exports as
// consullock_lock_holder_info): it must name the holders lockmodel.Holders
// names, which status, the data source and the protocol name too.
func TestHolders_agreeWithTheOneRule(t *testing.T) {
	id := func(s string) string { return "session-" + s }
	for _, c := range holdercases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			l, err := lockmodel.Lock{Name: "job", Prefix: "jobs/job", Limit: 1}.Normalize()
			if c.Semaphore {
				l.Limit = 2
			}
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string]LiveKey{}
			for _, e := range c.Entries(l.Prefix, id) {
				keys[e.Key] = LiveKey(e.KeyEntry)
			}
			var got []string
			for _, s := range holders(l, keys, c.Sessions(id)) {
				got = append(got, s.ID)
			}
			want := []string{}
			for _, s := range c.Want {
				want = append(want, id(s))
			}
			if !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("controller holders = %q, want %q", got, want)
			}
		})
	}
}
