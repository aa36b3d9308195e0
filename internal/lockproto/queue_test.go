package lockproto

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

func TestLockTxnOps(t *testing.T) {
	pair := &api.KVPair{Key: "p/.lock", Value: []byte("v"), Session: "s", Flags: lockmodel.LockFlagValue}
	ops := lockTxnOps(pair, "")
	if len(ops) != 1 || ops[0].KV.Verb != api.KVLock || ops[0].KV.Key != "p/.lock" || ops[0].KV.Session != "s" || ops[0].KV.Flags != lockmodel.LockFlagValue {
		t.Fatalf("without a queue entry: %+v; want the lock op alone", ops)
	}
	ops = lockTxnOps(pair, "p/.queue/s")
	if len(ops) != 2 || ops[0].KV.Verb != api.KVLock || ops[1].KV.Verb != api.KVDelete || ops[1].KV.Key != "p/.queue/s" {
		t.Fatalf("with a queue entry: %+v; want the lock op, then the entry's delete", ops)
	}
}

func TestQueueEntries(t *testing.T) {
	got := QueueEntries(api.KVPairs{{Key: "p/.queue/a", Session: "a", CreateIndex: 3, ModifyIndex: 7}, {Key: "p/.queue/b", CreateIndex: 4, ModifyIndex: 9}})
	want := []lockmodel.QueueEntry{{Key: "p/.queue/a", Session: "a", CreateIndex: 3, ModifyIndex: 7}, {Key: "p/.queue/b", CreateIndex: 4, ModifyIndex: 9}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("QueueEntries = %+v; want %+v", got, want)
	}
}

// queuedFixture is a queued mutex on a fresh prefix and a management
// client.
func queuedFixture(t *testing.T) (*consul.Client, lockmodel.Lock) {
	t.Helper()
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.UniquePrefix(t.Name())
	return c, lockmodel.Lock{Name: "q", Prefix: prefix, Key: prefix + "/" + lockmodel.LockKeyName, Limit: 1, Waiters: lockmodel.WaitersQueue}
}

// A queued waiter keeps an entry acquired with its session (value: its
// holder value) while it waits; its acquisition is the lock transaction
// that also deletes the entry (the token is still the key's ModifyIndex);
// a waiter that gives up deletes its entry.
func TestMutexQueue_entryWhileWaitingDeletedByTheAcquisition(t *testing.T) {
	c, l := queuedFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := lockmodel.SessionProfile{Name: "q", TTL: 10 * time.Second, LockDelay: time.Second}.Resolve()
	holder, waiter, leaver := newSession(ctx, t, c, "", p), newSession(ctx, t, c, "", p), newSession(ctx, t, c, "", p)
	kv := agent.Client().KV()

	if _, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(ctx, holder, func() []byte { return []byte("holder") }); err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(ctx, waiter, func() []byte { return []byte(`{"node":"waiter"}`) })
		done <- result{g, err}
	}()
	entry := lockmodel.WaiterQueueEntryKey(l, waiter.ID)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pair, _, err := kv.Get(entry, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if pair != nil {
			if pair.Session != waiter.ID || !strings.Contains(string(pair.Value), `"node":"waiter"`) {
				t.Fatalf("queue entry %+v; want it held by the waiter's session with its holder value", pair)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter wrote no queue entry")
		}
	}

	// A second waiter queues behind, then gives up: its entry goes.
	lctx, lcancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(lctx, leaver, func() []byte { return []byte("leaver") })
		left <- err
	}()
	leaverEntry := lockmodel.WaiterQueueEntryKey(l, leaver.ID)
	waitFor(t, func() bool { pair, _, _ := kv.Get(leaverEntry, nil); return pair != nil })
	lcancel()
	if err := <-left; err == nil {
		t.Fatal("a cancelled waiter acquired")
	}
	if pair, _, _ := kv.Get(leaverEntry, &api.QueryOptions{RequireConsistent: true}); pair != nil {
		t.Fatalf("the cancelled waiter's entry is still there: %+v", pair)
	}

	if _, _, err := kv.Release(&api.KVPair{Key: l.Key, Session: holder.ID, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	lockPair, _, _ := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if lockPair == nil || lockPair.Session != waiter.ID || lockPair.ModifyIndex != r.g.FencingToken {
		t.Fatalf("lock key %+v after the waiter's grant %+v; want it held by the waiter at the token", lockPair, r.g)
	}
	if pair, _, _ := kv.Get(entry, &api.QueryOptions{RequireConsistent: true}); pair != nil {
		t.Fatalf("the winner's queue entry is still there: %+v", pair)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
	}
}

// With waiters = "handoff" a release hands the lock to the first in line
// in the release's own transaction: the waiter wakes holding it, at the
// hand-off's index (no lock op of its own), with its entry's holder value
// (started at the hand-off) and its entry gone; the next release hands it
// on to the one behind. A session that does not hold hands nothing over.
func TestMutexHandOff_releaseGivesTheLockToTheFirstInLine(t *testing.T) {
	c, l := queuedFixture(t)
	l.Waiters = lockmodel.WaitersHandOff
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := lockmodel.SessionProfile{Name: "q", TTL: 10 * time.Second, LockDelay: time.Second}.Resolve()
	holder, first, second := newSession(ctx, t, c, "", p), newSession(ctx, t, c, "", p), newSession(ctx, t, c, "", p)
	kv := agent.Client().KV()
	queuedAt := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	value := func(node string) func() []byte {
		return func() []byte {
			return []byte(`{"node":"` + node + `","pid":1,"started":"` + queuedAt.Format(time.RFC3339Nano) + `"}`)
		}
	}

	holderGrant, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(ctx, holder, value("holder"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   Grant
		err error
	}
	wait := func(s *Session, node string) (Protocol, chan result) {
		proto := New(c, l, p.LockDelay, discardLog(), Settings{})
		done := make(chan result, 1)
		go func() {
			g, err := proto.Acquire(ctx, s, value(node))
			done <- result{g, err}
		}()
		entry := lockmodel.WaiterQueueEntryKey(l, s.ID)
		waitFor(t, func() bool { pair, _, _ := kv.Get(entry, nil); return pair != nil })
		return proto, done
	}
	firstProto, firstDone := wait(first, "first")
	_, secondDone := wait(second, "second")

	// A session that does not hold the lock (a waiter leaving) hands
	// nothing over.
	if released, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Release(ctx, second, value("second")()); err != nil || released {
		t.Fatalf("Release by a waiter = %v, %v; want false: it does not hold the lock", released, err)
	}
	if pair, _, _ := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true}); pair == nil || pair.Session != holder.ID {
		t.Fatalf("lock key %+v after a waiter's release; want it still held by the holder", pair)
	}

	handOffStarted := time.Now()
	if released, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Release(ctx, holder, value("holder")()); err != nil || !released {
		t.Fatalf("Release by the holder = %v, %v; want true", released, err)
	}
	handedAt, _, err := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if handedAt == nil || handedAt.Session != first.ID {
		t.Fatalf("lock key right after the holder's release: %+v; want it held by the first in line (%s), not free", handedAt, first.ID)
	}
	var hv lockmodel.HolderValue
	if err := json.Unmarshal(handedAt.Value, &hv); err != nil || hv.Node != "first" || hv.Started.Before(handOffStarted.Add(-time.Second)) {
		t.Fatalf("value written for the first in line: %s (%v); want its entry's holder value, started at the hand-off", handedAt.Value, err)
	}
	r := <-firstDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.g.FencingToken != handedAt.ModifyIndex || r.g.FencingToken <= holderGrant.FencingToken || string(r.g.Value) != string(handedAt.Value) {
		t.Fatalf("first in line's grant %+v; want token %d (the hand-off's index: no lock op of its own), above the holder's %d, and the value written for it",
			r.g, handedAt.ModifyIndex, holderGrant.FencingToken)
	}
	if pair, _, _ := kv.Get(lockmodel.WaiterQueueEntryKey(l, first.ID), &api.QueryOptions{RequireConsistent: true}); pair != nil {
		t.Fatalf("the first in line's entry is still there: %+v", pair)
	}

	if released, err := firstProto.Release(ctx, first, r.g.Value); err != nil || !released {
		t.Fatalf("Release by the first in line = %v, %v; want true", released, err)
	}
	r = <-secondDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	pair, _, _ := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if pair == nil || pair.Session != second.ID || pair.ModifyIndex != r.g.FencingToken || r.g.FencingToken <= handedAt.ModifyIndex {
		t.Fatalf("lock key %+v, second's grant %+v; want it handed on to the second in line at a higher token", pair, r.g)
	}
}

// A handoff holder hands over from the queue listing its watch kept while
// holding (followQueue); when that listing is stale (its first waiter left
// since), the refused transaction is tried once more on a fresh listing,
// so the lock still goes to the waiter now first, and the holder's watch
// saw no loss before its own release. (The hold that gives the lock up as
// here is package concurrency's; this is its protocol.)
func TestMutexHandOff_aStaleKeptListingIsListedAgain(t *testing.T) {
	c, l := queuedFixture(t)
	l.Waiters = lockmodel.WaitersHandOff
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := holdProfile()
	p.TTL, p.LockDelay = 10*time.Second, time.Second
	holderValue := []byte(`{"node":"holder","pid":1,"started":"2026-01-01T00:00:00Z"}`)
	holder := newSession(ctx, t, c, "", p)
	proto := New(c, l, p.LockDelay, discardLog(), Settings{})
	if _, err := proto.Acquire(ctx, holder, func() []byte { return holderValue }); err != nil {
		t.Fatal(err)
	}
	m, ok := proto.(*mutex)
	if !ok {
		t.Fatalf("protocol %T; want the mutex", proto)
	}
	// The holder's watch, as a hold runs it: what it sees before the
	// holder gives the lock up (ending) would be a loss.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var ending atomic.Bool
	obs := make(chan Observation, 16)
	go func() {
		proto.Watch(wctx, holder, obs)
		close(obs)
	}()
	lostWhileHeld := make(chan []Observation, 1)
	go func() {
		var lost []Observation
		for o := range obs {
			if o.Kind == ObsKeyLost && !ending.Load() {
				lost = append(lost, o)
			}
		}
		lostWhileHeld <- lost
	}()
	kv := agent.Client().KV()
	leaver, waiter := newSession(ctx, t, c, "", p), newSession(ctx, t, c, "", p)
	value := func(node string) func() []byte {
		return func() []byte { return []byte(`{"node":"` + node + `","pid":2,"started":"2026-01-01T00:00:00Z"}`) }
	}
	lctx, lcancel := context.WithCancel(ctx)
	leaverDone := make(chan error, 1)
	go func() {
		_, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(lctx, leaver, value("leaver"))
		leaverDone <- err
	}()
	waitFor(t, func() bool {
		pair, _, _ := kv.Get(lockmodel.WaiterQueueEntryKey(l, leaver.ID), nil)
		return pair != nil
	})
	waitFor(t, func() bool { kept := m.queueSeen.Load(); return kept != nil && len(*kept) == 1 })
	stale := m.queueSeen.Load()

	type result struct {
		g   Grant
		err error
	}
	waiterDone := make(chan result, 1)
	go func() {
		g, err := New(c, l, p.LockDelay, discardLog(), Settings{}).Acquire(ctx, waiter, value("waiter"))
		waiterDone <- result{g, err}
	}()
	waitFor(t, func() bool {
		pair, _, _ := kv.Get(lockmodel.WaiterQueueEntryKey(l, waiter.ID), nil)
		return pair != nil
	})
	lcancel()
	if err := <-leaverDone; err == nil {
		t.Fatal("the cancelled waiter acquired")
	}
	waitFor(t, func() bool {
		kept := m.queueSeen.Load()
		return kept != nil && len(*kept) == 1 && (*kept)[0].Session == waiter.ID
	})
	m.queueSeen.Store(stale) // as if the leaver's going had not reached the holder yet

	// The holder gives the lock up as a hold does: ending, the watch
	// stopped, then the release.
	ending.Store(true)
	stopWatch()
	if released, err := proto.Release(ctx, holder, holderValue); err != nil || !released {
		t.Fatalf("the holder's release = %v, %v; want the lock released (handed over)", released, err)
	}
	pair, _, err := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != waiter.ID {
		t.Fatalf("lock key after the release: %+v (%v); want it handed to the waiter now first (%s)", pair, err, waiter.ID)
	}
	r := <-waiterDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.g.Value == nil {
		t.Fatalf("the waiter's grant %+v came from a lock op of its own; want the lock handed to it", r.g)
	}
	if lost := <-lostWhileHeld; len(lost) != 0 {
		t.Fatalf("the holder's watch saw the lock lost before its own release: %+v", lost)
	}
}

// A waiter whose token may lock the key but not delete its queue entry
// (the grant taken away while it waited) still acquires: Consul refuses the
// transaction with the entry's delete as permission denied, and the lock
// is tried again without it.
func TestMutexQueue_aTokenThatMayNotDeleteItsEntryStillAcquires(t *testing.T) {
	mgmt, l := queuedFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := agent.MintToken(testenv.UniquePrefix(t.Name()), `key "`+l.Key+`" { policy = "write" }
session_prefix "" { policy = "write" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	p := lockmodel.SessionProfile{Name: "q", TTL: 10 * time.Second, LockDelay: time.Second}.Resolve()
	s := newSession(ctx, t, c, "", p)
	entry := lockmodel.WaiterQueueEntryKey(l, s.ID)
	if ok, _, err := mgmt.KV().Acquire(&api.KVPair{Key: entry, Session: s.ID}, nil); err != nil || !ok {
		t.Fatalf("write the entry: %v %v", ok, err)
	}
	m := &mutex{c: c, lock: l, declaredDelay: p.LockDelay, log: discardLog()}
	won, ok, err := m.lockTxn(ctx, m.pair(s, []byte("w")), &entry)
	if err != nil || !ok || won == nil || won.Session != s.ID {
		t.Fatalf("lockTxn without the grant to delete the entry = %+v, %v, %v; want the lock", won, ok, err)
	}
	if entry != "" {
		t.Fatalf("entry %q after the fallback; want it dropped from the transaction", entry)
	}
}
