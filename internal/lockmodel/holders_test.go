package lockmodel_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel/holdercases"
)

// state describes a shared case as the rule takes it.
func state(c holdercases.Case, id func(string) string, withSessions bool) lockmodel.LockState {
	entries := c.Entries("jobs/job", id)
	st := lockmodel.LockState{Key: entries[0].Key, Entry: &entries[0].KeyEntry, Semaphore: c.Semaphore, Keys: map[string]lockmodel.KeyEntry{}}
	for _, e := range entries[1:] {
		st.Keys[e.Key] = e.KeyEntry
	}
	if withSessions {
		st.Sessions = c.Sessions(id)
	}
	return st
}

func TestHolders_sharedCases(t *testing.T) {
	id := holdercases.ID
	for _, c := range holdercases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			st := state(c, id, true)
			var got []string
			for _, h := range lockmodel.Holders(st) {
				got = append(got, h.Session)
				// The holder's entry is the key it holds: its value is the
				// holder value, its ModifyIndex the fencing token.
				read := st.Keys[h.Key]
				if h.Key == st.Key {
					read = *st.Entry
				}
				if h.Entry.Session != h.Session || h.Entry.ModifyIndex != read.ModifyIndex || string(h.Entry.Value) != string(read.Value) {
					t.Errorf("holder %s: key %s entry %+v", h.Session, h.Key, h.Entry)
				}
				if h.FencingToken != read.ModifyIndex {
					t.Errorf("holder %s: fencing token %d, want the key's ModifyIndex %d", h.Session, h.FencingToken, read.ModifyIndex)
				}
				if s, ok := st.Sessions[h.Session]; ok && h.Node != s.Node {
					t.Errorf("holder %s: node %q, want its session's %q", h.Session, h.Node, s.Node)
				}
			}
			want := c.WantIDs(id)
			if !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("Holders = %q, want %q", got, want)
			}
			// NotHolding is the same rule, one session at a time.
			for _, s := range c.Everyone() {
				why := lockmodel.NotHolding(st, id(s))
				if holds := slices.Contains(c.Want, s); holds != (why == "") {
					t.Errorf("NotHolding(%s) = %q, want holding %v", s, why, holds)
				}
			}
			// Without a session read, every consistent state gives the
			// same holders: in one Consul state a key's holder is alive.
			if !c.Torn {
				if n := len(lockmodel.Holders(state(c, id, false))); n != len(want) {
					t.Errorf("without a session read: %d holders, want %d", n, len(want))
				}
			}
		})
	}
}

func TestHolders_whereTheCopiesDiffered(t *testing.T) {
	table := []byte(`{"Limit":2,"Holders":{"a":true,"b":true}}`)
	sem := func(keys map[string]lockmodel.KeyEntry, sessions ...string) lockmodel.LockState {
		st := lockmodel.LockState{Key: "jobs/x/.lock", Semaphore: true, Entry: &lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue, Value: table}, Keys: keys}
		if sessions != nil {
			st.Sessions = map[string]lockmodel.ObservedSession{}
			for _, s := range sessions {
				st.Sessions[s] = lockmodel.ObservedSession{ID: s}
			}
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   lockmodel.LockState
		who  string
		want string // "" = holds, else a part of why not
	}{
		{"listed, contender key held", sem(map[string]lockmodel.KeyEntry{"jobs/x/a": {Session: "a"}}, "a"), "a", ""},
		{"listed, alive, contender key released (the controller counted it)",
			sem(map[string]lockmodel.KeyEntry{"jobs/x/a": {}}, "a"), "a", "contender key jobs/x/a is not held by session a"},
		{"listed, alive, no contender key (the controller counted it)", sem(nil, "a"), "a", "contender key jobs/x/a is not held"},
		{"a waiter: contender key held, not listed",
			sem(map[string]lockmodel.KeyEntry{"jobs/x/c": {Session: "c"}}, "c"), "c", "holder table jobs/x/.lock does not list session c"},
		{"holder ended after the key read (status listed a mutex's)",
			sem(map[string]lockmodel.KeyEntry{"jobs/x/a": {Session: "a"}}, "b"), "a", "session a no longer exists"},
		{"table deleted", lockmodel.LockState{Key: "jobs/x/.lock", Semaphore: true, Keys: map[string]lockmodel.KeyEntry{"jobs/x/a": {Session: "a"}}},
			"a", "holder table jobs/x/.lock does not exist"},
		{"table unusable", lockmodel.LockState{Key: "jobs/x/.lock", Semaphore: true, Entry: &lockmodel.KeyEntry{Value: []byte("{")},
			Keys: map[string]lockmodel.KeyEntry{"jobs/x/a": {Session: "a"}}}, "a", "holder table jobs/x/.lock is unusable"},
		{"mutex held by another", lockmodel.LockState{Key: "k", Entry: &lockmodel.KeyEntry{Session: "b"}}, "a", "key k is held by session b"},
		{"mutex unheld", lockmodel.LockState{Key: "k", Entry: &lockmodel.KeyEntry{}}, "a", "key k is not held"},
		{"mutex missing", lockmodel.LockState{Key: "k"}, "a", "key k does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := lockmodel.NotHolding(tc.st, tc.who)
			if (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
				t.Errorf("NotHolding = %q, want %q", why, tc.want)
			}
			held := slices.ContainsFunc(lockmodel.Holders(tc.st), func(h lockmodel.LockHolder) bool { return h.Session == tc.who })
			if held != (tc.want == "") {
				t.Errorf("Holders lists %s: %v, want %v", tc.who, held, tc.want == "")
			}
		})
	}
}

func TestWaiters(t *testing.T) {
	table := &lockmodel.KeyEntry{Value: []byte(`{"Limit":1,"Holders":{"a":true}}`)}
	keys := map[string]lockmodel.KeyEntry{
		"jobs/x/a": {Session: "a"}, // the holder
		"jobs/x/b": {Session: "b"}, // waiting
		"jobs/x/c": {},             // not held: nobody
		"jobs/x/d": {Session: "e"}, // another session's key: not its own
	}
	st := lockmodel.LockState{Key: "jobs/x/.lock", Entry: table, Semaphore: true, Keys: keys}
	if got := lockmodel.Waiters(st); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Waiters = %q, want [b]", got)
	}
	st.Entry = &lockmodel.KeyEntry{Value: []byte("{")}
	if got := lockmodel.Waiters(st); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Waiters with a table that does not decode = %q, want [a b]", got)
	}
	st.Semaphore = false
	if got := lockmodel.Waiters(st); got != nil {
		t.Errorf("a mutex's Waiters = %q, want none", got)
	}
}
