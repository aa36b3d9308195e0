package store

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestReadLockHolders_agreeWithTheOneRule writes each shared Consul state
// into a real agent and reads it as the data source does (ReadLock): the
// holders are the sessions lockmodel.Holders names, which status, the
// controller and the protocol name too. Torn reads are no Consul state.
func TestReadLockHolders_agreeWithTheOneRule(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	for _, tc := range holdercases.Cases {
		if tc.Torn {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			prefix := testenv.UniquePrefix(t.Name())
			ids := map[string]string{}
			for _, s := range tc.Everyone() {
				sid, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorRelease, LockDelay: 1}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids[s] = sid
				if slices.Contains(tc.Alive, s) {
					t.Cleanup(func() { _, _ = c.Session().Destroy(sid, nil) })
				} else if _, err := c.Session().Destroy(sid, nil); err != nil {
					t.Fatal(err)
				}
			}
			id := func(s string) string { return ids[s] }
			for _, e := range tc.Entries(prefix, id) {
				p := &api.KVPair{Key: e.Key, Flags: e.Flags, Value: e.Value, Session: e.Session}
				if e.Session == "" {
					if _, err := c.KV().Put(p, nil); err != nil {
						t.Fatal(err)
					}
				} else if ok, _, err := c.KV().Acquire(p, nil); err != nil || !ok {
					t.Fatalf("acquire %s by %s: %v %v", e.Key, e.Session, ok, err)
				}
			}
			view, err := c.ReadLock(ctx, holdercases.LockKey(prefix), true)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			if view.Semaphore != nil {
				for _, h := range view.Semaphore.Holders {
					got = append(got, h.Session)
				}
			} else if view.Session != nil {
				got = append(got, view.Session.ID)
			}
			if tc.Semaphore != (view.Semaphore != nil) {
				t.Errorf("read as a semaphore: %v, want %v", view.Semaphore != nil, tc.Semaphore)
			}
			if want := tc.WantIDs(id); !slices.Equal(got, want) {
				t.Errorf("ReadLock holders = %q, want %q", got, want)
			}
		})
	}
}
