package controller

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestDecodeListing_agreesWithEncodingJSON: the lock key watches' parser
// reads what encoding/json reads from random listings in Consul's shape
// (keys with characters JSON escapes, null and binary values, sessions
// present or omitted, fields the watch skips), and refuses what is not a
// listing.
func TestDecodeListing_agreesWithEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(24, 1))
	runes := []rune("ab/.-_<>&\"\\é\u2028\x01z9")
	for i := range 500 {
		var pairs api.KVPairs
		for j := range rnd.IntN(6) {
			key := fmt.Sprintf("k%d-%d/", i, j)
			for range rnd.IntN(8) {
				key += string(runes[rnd.IntN(len(runes))])
			}
			p := &api.KVPair{Key: key, Flags: rnd.Uint64(), LockIndex: rnd.Uint64N(100), CreateIndex: rnd.Uint64N(1e6), ModifyIndex: rnd.Uint64N(1e9), Namespace: []string{"", "default"}[rnd.IntN(2)]}
			if rnd.IntN(2) == 0 {
				p.Value = make([]byte, rnd.IntN(40))
				for k := range p.Value {
					p.Value[k] = byte(rnd.IntN(256))
				}
			}
			if rnd.IntN(2) == 0 {
				p.Session = fmt.Sprintf("%08x-0000-0000-0000-000000000000", rnd.Uint32())
			}
			pairs = append(pairs, p)
		}
		data, err := json.MarshalIndent(pairs, "", []string{"", "  "}[rnd.IntN(2)])
		if err != nil {
			t.Fatal(err)
		}
		var want api.KVPairs
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string]compliance.LiveKey{}
		var order []string
		if err := decodeListing(data, func(key string, e compliance.LiveKey) { got[key] = e; order = append(order, key) }); err != nil {
			t.Fatalf("listing %d: %v\n%s", i, err, data)
		}
		if len(order) != len(want) {
			t.Fatalf("listing %d: %d entries, want %d", i, len(order), len(want))
		}
		for k, p := range want {
			e := compliance.LiveKey{Flags: p.Flags, Value: p.Value, Session: p.Session, LockIndex: p.LockIndex, ModifyIndex: p.ModifyIndex}
			if len(e.Value) == 0 {
				e.Value = nil
			}
			g := got[p.Key]
			if len(g.Value) == 0 {
				g.Value = nil
			}
			if order[k] != p.Key || !reflect.DeepEqual(g, e) {
				t.Fatalf("listing %d, entry %d: got %q %+v, want %q %+v\n%s", i, k, order[k], g, p.Key, e, data)
			}
		}
	}
	for _, bad := range []string{``, `{}`, `[{"Key":"a"}`, `[{"Key":"a",}]`, `[{"Key":"a"}] x`, `[{"Key":"a","Flags":-1}]`, `[{"Key":"a","Value":"%%%"}]`} {
		if err := decodeListing([]byte(bad), func(string, compliance.LiveKey) {}); err == nil {
			t.Errorf("%q decoded without an error", bad)
		}
	}
}

// TestDiffRecords_aRunLedgerWriteChangesNoDeclaration: a registry answer
// that differs from the last only by a run ledger (every run-once attempt
// writes one) decodes that ledger alone and changes no declaration, so the
// controller neither regroups its lock watches nor decides anything again;
// a lock record that moved, appeared or went is a declaration change.
func TestDiffRecords_aRunLedgerWriteChangesNoDeclaration(t *testing.T) {
	c, err := New(nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "consul-lock/"
	lock := func(name string, index uint64) *api.KVPair {
		rec, err := lockmodel.EncodeLockRecord(lockmodel.Lock{Name: name, Prefix: "jobs/" + name})
		if err != nil {
			t.Fatal(err)
		}
		return &api.KVPair{Key: prefix + "locks/" + name, Value: rec, ModifyIndex: index}
	}
	ledger := func(index uint64) *api.KVPair {
		rec, err := lockmodel.EncodeLedger(lockmodel.Ledger{Lock: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return &api.KVPair{Key: prefix + "runs/a", Value: rec, ModifyIndex: index}
	}
	for _, step := range []struct {
		name                string
		pairs               api.KVPairs
		decl, ledgers, runs bool
	}{
		{"first listing", api.KVPairs{lock("a", 10), lock("b", 11), ledger(12)}, true, true, true},
		{"the same listing", api.KVPairs{lock("a", 10), lock("b", 11), ledger(12)}, false, false, true},
		{"a ledger write", api.KVPairs{lock("a", 10), lock("b", 11), ledger(13)}, false, true, true},
		{"a lock record write", api.KVPairs{lock("a", 14), lock("b", 11), ledger(13)}, true, false, true},
		{"a ledger deleted", api.KVPairs{lock("a", 14), lock("b", 11)}, false, true, false},
		{"a lock record deleted", api.KVPairs{lock("a", 14)}, true, false, false},
	} {
		decl, ledgers := c.diffRecords(prefix, step.pairs)
		if decl != step.decl || ledgers != step.ledgers {
			t.Errorf("%s: declarations changed %v, ledgers changed %v; want %v, %v", step.name, decl, ledgers, step.decl, step.ledgers)
		}
		if _, ok := c.records[prefix+"runs/a"].value.(lockmodel.Ledger); ok != step.runs {
			t.Errorf("%s: ledger kept %v, want %v", step.name, ok, step.runs)
		}
	}
}
