package status

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// TestStatusHolders_agreeWithTheOneRule feeds the shared Consul states to
// status: the HOLDERS of a declared lock are the sessions lockmodel.Holders
// names, which the controller, the data source and the protocol name too.
func TestStatusHolders_agreeWithTheOneRule(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range holdercases.Cases {
		l := c.Lock()
		w := &world{registry: "consul-lock", decl: decodeRegistry("consul-lock/", nil), pairs: map[string][]*api.KVPair{}}
		w.decl.locks[l.Name] = l
		for _, e := range c.Entries(l.Prefix, holdercases.ID) {
			w.pairs["jobs/"] = append(w.pairs["jobs/"], &api.KVPair{Key: e.Key, Flags: e.Flags, Value: e.Value, Session: e.Session, LockIndex: e.LockIndex, ModifyIndex: e.ModifyIndex})
		}
		raw := map[string]*api.SessionEntry{}
		for id, s := range c.Sessions(holdercases.ID) {
			raw[id] = &api.SessionEntry{ID: id, Name: s.Name, Node: s.Node, TTL: "15s", Behavior: "release"}
		}
		w.setSessions(raw)
		rep := build(w, "consul-lock", nil, now)
		if len(rep.Locks) != 1 {
			t.Fatalf("%s: report has %d locks, want 1", c.Name, len(rep.Locks))
		}
		got := []string{}
		for _, h := range rep.Locks[0].Holders {
			got = append(got, h.Session)
		}
		want := c.WantIDs(holdercases.ID)
		if !slices.Equal(got, want) {
			t.Errorf("%s: status holders = %q, want %q", c.Name, got, want)
		}
		if state := map[bool]string{true: "held", false: "unheld"}[len(want) > 0]; rep.Locks[0].State != state {
			t.Errorf("%s: status state = %q, want %q", c.Name, rep.Locks[0].State, state)
		}
	}
}
