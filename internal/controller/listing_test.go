package controller

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// TestDecodeListing_agreesWithEncodingJSON: the lock key watches' parser
// reads what encoding/json reads from random listings in Consul's shape
// (keys in order, with characters JSON escapes, null and binary values,
// sessions present or omitted, fields the watch skips); walked alongside
// the previous listing, the changes it reports (keys written, added and
// deleted among those the group keeps) turn the previous listing into the
// new one; and it refuses what is not a listing.
func TestDecodeListing_agreesWithEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(24, 1))
	runes := []rune("ab/.-_<>&\"\\é\u2028\x01z9")
	randomPair := func(key string) *api.KVPair {
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
		return p
	}
	covers := func(key string) bool { return !strings.Contains(key, "z") }
	encode := func(pairs api.KVPairs) []byte {
		slices.SortFunc(pairs, func(a, b *api.KVPair) int { return strings.Compare(a.Key, b.Key) })
		data, err := json.MarshalIndent(pairs, "", []string{"", "  "}[rnd.IntN(2)])
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// want is what encoding/json reads of data, among the covered keys.
	want := func(data []byte) map[string]lockmodel.KeyEntry {
		var pairs api.KVPairs
		if err := json.Unmarshal(data, &pairs); err != nil {
			t.Fatal(err)
		}
		out := map[string]lockmodel.KeyEntry{}
		for _, p := range pairs {
			if covers(p.Key) {
				out[p.Key] = lockmodel.KeyEntry{Flags: p.Flags, Value: nonEmpty(p.Value), Session: p.Session, LockIndex: p.LockIndex, ModifyIndex: p.ModifyIndex}
			}
		}
		return out
	}
	apply := func(m map[string]lockmodel.KeyEntry, changes []keyChange) {
		for _, ch := range changes {
			if ch.present {
				ch.entry.Value = nonEmpty(ch.entry.Value)
				m[ch.key] = ch.entry
			} else {
				delete(m, ch.key)
			}
		}
	}
	for i := range 500 {
		var before api.KVPairs
		for j := range rnd.IntN(6) {
			key := fmt.Sprintf("k%d-%d/", i, j)
			for range rnd.IntN(8) {
				key += string(runes[rnd.IntN(len(runes))])
			}
			before = append(before, randomPair(key))
		}
		first := encode(before)
		listed, changes, err := diffListing(first, nil, covers)
		if err != nil {
			t.Fatalf("listing %d: %v\n%s", i, err, first)
		}
		got := map[string]lockmodel.KeyEntry{}
		apply(got, changes)
		if w := want(first); !reflect.DeepEqual(got, w) {
			t.Fatalf("listing %d: got %+v\nwant %+v\n%s", i, got, w, first)
		}
		// The next answer: some keys written, some deleted, some added.
		var after api.KVPairs
		for j, p := range before {
			switch rnd.IntN(4) {
			case 0: // deleted
			case 1:
				after = append(after, randomPair(p.Key))
			default:
				after = append(after, p)
			}
			if rnd.IntN(4) == 0 {
				after = append(after, randomPair(fmt.Sprintf("k%d-%d/new", i, j)))
			}
		}
		second := encode(after)
		if _, changes, err = diffListing(second, listed, covers); err != nil {
			t.Fatalf("listing %d, second answer: %v\n%s", i, err, second)
		}
		apply(got, changes)
		if w := want(second); !reflect.DeepEqual(got, w) {
			t.Fatalf("listing %d, second answer: got %+v\nwant %+v\n%s", i, got, w, second)
		}
	}
	for _, bad := range []string{`{}`, `[{"Key":"a"}`, `[{"Key":"a",}]`, `[{"Key":"a"}] x`, `[{"Key":"a","Flags":-1}]`, `[{"Key":"a","Value":"%%%"}]`} {
		if _, _, err := diffListing([]byte(bad), nil, covers); err == nil {
			t.Errorf("%q decoded without an error", bad)
		}
	}
}

func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// TestDiffRecords_aRunLedgerWriteChangesNoDeclaration: a registry answer
// that differs from the last only by a run ledger (every run-once attempt
// writes one) decodes that ledger alone and changes no declaration, so the
// controller neither regroups its lock watches nor decides anything again;
// a lock record that moved, appeared or went is a declaration change; keys
// that are no records (the controller's leader key) are no change.
func TestDiffRecords_aRunLedgerWriteChangesNoDeclaration(t *testing.T) {
	c, err := New(nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "consul-lock/"
	lock := func(name string, index uint64) *api.KVPair {
		rec, err := record.EncodeLockRecord(lockmodel.Lock{Name: name, Prefix: "jobs/" + name})
		if err != nil {
			t.Fatal(err)
		}
		return &api.KVPair{Key: prefix + "locks/" + name, Value: rec, ModifyIndex: index}
	}
	led := func(index uint64) *api.KVPair {
		rec, err := record.EncodeLedger(ledger.Ledger{Lock: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return &api.KVPair{Key: prefix + "runs/a", Value: rec, ModifyIndex: index}
	}
	var prev []listed
	for _, step := range []struct {
		name                string
		pairs               api.KVPairs
		decl, ledgers, runs bool
	}{
		{"first listing", api.KVPairs{lock("a", 10), lock("b", 11), led(12)}, true, true, true},
		{"the same listing", api.KVPairs{lock("a", 10), lock("b", 11), led(12)}, false, false, true},
		{"a ledger write", api.KVPairs{lock("a", 10), lock("b", 11), led(13)}, false, true, true},
		{"a lock record write", api.KVPairs{lock("a", 14), lock("b", 11), led(13)}, true, false, true},
		{"a ledger deleted", api.KVPairs{lock("a", 14), lock("b", 11)}, false, true, false},
		{"a lock record deleted", api.KVPairs{lock("a", 14)}, true, false, false},
		{"the leader key written", api.KVPairs{lock("a", 14), {Key: prefix + "controller/.lock", ModifyIndex: 15}}, false, false, false},
	} {
		data, err := json.Marshal(step.pairs)
		if err != nil {
			t.Fatal(err)
		}
		listed, changes, err := diffListing(data, prev, func(key string) bool { _, ok := recordKind(prefix, key); return ok })
		if err != nil {
			t.Fatal(err)
		}
		prev = listed
		decl, ledgers := c.diffRecords(prefix, changes)
		if decl != step.decl || ledgers != step.ledgers {
			t.Errorf("%s: declarations changed %v, ledgers changed %v; want %v, %v", step.name, decl, ledgers, step.decl, step.ledgers)
		}
		if _, ok := c.cache.records[prefix+"runs/a"].value.(ledger.Ledger); ok != step.runs {
			t.Errorf("%s: ledger kept %v, want %v", step.name, ok, step.runs)
		}
	}
}

// BenchmarkListing compares, on one answer of a lock key watch over n
// mutex keys of which one changed, what the watch did before (encoding/json
// into api.KVPairs, as the api decodes a listing, then a map of every
// kept key) with diffListing walking the previous answer:
//
//	go test -run '^$' -bench Listing -benchmem ./internal/controller/
func BenchmarkListing(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		pairs := make(api.KVPairs, n)
		for i := range pairs {
			pairs[i] = &api.KVPair{Key: fmt.Sprintf("svc/jobs/%05d/.lock", i), Flags: lockmodel.LockFlagValue, CreateIndex: uint64(100 + i), ModifyIndex: uint64(100 + i)}
		}
		first, _ := json.Marshal(pairs)
		pairs[n/2].ModifyIndex = 1e6
		pairs[n/2].Session = "aaaaaaaa-0000-0000-0000-000000000001"
		second, _ := json.Marshal(pairs)
		covers := func(key string) bool { return strings.HasSuffix(key, "/.lock") }
		b.Run(fmt.Sprintf("keys=%d/encoding-json", n), func(b *testing.B) {
			b.SetBytes(int64(len(second)))
			for b.Loop() {
				var out api.KVPairs
				if err := json.Unmarshal(second, &out); err != nil {
					b.Fatal(err)
				}
				live := make(map[string]lockmodel.KeyEntry, len(out))
				for _, p := range out {
					if covers(p.Key) {
						live[p.Key] = lockmodel.KeyEntry{Flags: p.Flags, Value: p.Value, Session: p.Session, LockIndex: p.LockIndex, ModifyIndex: p.ModifyIndex}
					}
				}
			}
		})
		b.Run(fmt.Sprintf("keys=%d/diffListing", n), func(b *testing.B) {
			prev, _, err := diffListing(first, nil, covers)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(second)))
			for b.Loop() {
				if _, changes, err := diffListing(second, prev, covers); err != nil || len(changes) != 1 {
					b.Fatalf("changes %v, err %v", changes, err)
				}
			}
		})
	}
}
