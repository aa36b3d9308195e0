package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// A lock's creation is all or nothing in one request: when any part of it
// fails (missing profile, record or key already there, no permission on
// the key), neither the record nor the key is written, and the result says
// which part failed.
func TestApplyLockChange_createIsAllOrNothingInOneRequest(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	profileKey, recordKey, lockKey := p+"/reg/session-defaults/prof", p+"/reg/locks/job", p+"/job/.lock"
	create := LockChange{
		ProfileKey: profileKey,
		RecordKey:  recordKey, Record: RecordPut, RecordValue: []byte(`{"r":1}`),
		Key: lockKey, KeyOp: KeyCreate, Flags: lockmodel.LockFlagValue,
	}
	nothingWritten := func(when string) {
		t.Helper()
		for _, k := range []string{recordKey, lockKey} {
			if pair, _, err := c.KV().Get(k, nil); err != nil || pair != nil {
				t.Fatalf("%s: %s is %+v (err %v), want absent", when, k, pair, err)
			}
		}
	}

	res, err := c.ApplyLockChange(ctx, create)
	if err != nil || res.OK || !res.ProfileMissing || res.RecordConflict || res.KeyConflict {
		t.Fatalf("creation with a missing profile: %+v, %v; want only ProfileMissing", res, err)
	}
	nothingWritten("missing profile")

	if _, err := c.KV().Put(&api.KVPair{Key: profileKey, Value: []byte(`{"p":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: lockKey, Value: []byte("holder data")}, nil); err != nil {
		t.Fatal(err)
	}
	res, err = c.ApplyLockChange(ctx, create)
	if err != nil || res.OK || !res.KeyConflict || res.ProfileMissing || res.RecordConflict {
		t.Fatalf("creation over an existing key: %+v, %v; want only KeyConflict", res, err)
	}
	if pair, _, _ := c.KV().Get(recordKey, nil); pair != nil {
		t.Fatalf("creation over an existing key wrote the record: %+v", pair)
	}
	if _, err := c.KV().Delete(lockKey, nil); err != nil {
		t.Fatal(err)
	}

	// A token that may write the record but not the key: refused, nothing
	// written, and the error names the permission.
	tok, err := agent.MintToken("locktxn-"+testenv.NewUUID()[:8], fmt.Sprintf(`key_prefix %q { policy = "write" }
key %q { policy = "read" }`, p+"/reg/", lockKey), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, tok.SecretID).ApplyLockChange(ctx, create); consul.KindOf(err) != consul.KindPermissionDenied {
		t.Fatalf("creation without key:write on the key: %v (kind %s), want permission denied", err, consul.KindOf(err))
	}
	nothingWritten("no permission on the key")

	before := c.Requests()
	res, err = c.ApplyLockChange(ctx, create)
	if err != nil || !res.OK {
		t.Fatalf("creation: %+v, %v", res, err)
	}
	if n := c.Requests() - before; n != 1 {
		t.Fatalf("creation sent %d requests, want 1", n)
	}
	if res.Profile == nil || string(res.Profile.Value) != `{"p":1}` || res.RecordIndex == 0 || res.Key == nil || res.Key.Flags != lockmodel.LockFlagValue {
		t.Fatalf("creation result %+v: want the profile, the record's index and the key", res)
	}

	// Deleting by check-and-set at a stale key index deletes nothing.
	del := LockChange{RecordKey: recordKey, Record: RecordDelete, RecordIndex: res.RecordIndex, Key: lockKey, KeyOp: KeyDelete, KeyIndex: res.Key.ModifyIndex - 1}
	if res, err := c.ApplyLockChange(ctx, del); err != nil || res.OK || !res.KeyConflict {
		t.Fatalf("delete at a stale key index: %+v, %v; want KeyConflict", res, err)
	}
	if pair, _, _ := c.KV().Get(recordKey, nil); pair == nil {
		t.Fatal("delete at a stale key index deleted the record")
	}
	del.KeyIndex = res.Key.ModifyIndex
	if res, err := c.ApplyLockChange(ctx, del); err != nil || !res.OK {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	nothingWritten("after delete")
}

// A token Consul does not know is reported as such by a lock change (the
// api's transaction call reports the 403 as bare text, which would read as
// an unknown failure), so that the provider says "invalid or expired token".
func TestApplyLockChange_unknownTokenIsInvalidToken(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	c := newClient(t, testenv.NewUUID())
	_, err := c.ApplyLockChange(context.Background(), LockChange{
		RecordKey: p + "/reg/locks/job", Record: RecordPut, RecordValue: []byte(`{}`),
		Key: p + "/job/.lock", KeyOp: KeyCreate, Flags: lockmodel.LockFlagValue,
	})
	if consul.KindOf(err) != consul.KindInvalidToken {
		t.Fatalf("lock change with an unknown token: %v (kind %s), want invalid token", err, consul.KindOf(err))
	}
}

// holdLock creates a mutex lock at <p>/job/.lock through ApplyLock and has
// a session with lockDelay hold it, as a job's runner would.
func holdLock(t *testing.T, c Store, p string, lockDelay time.Duration) (lockmodel.Lock, string, string) {
	t.Helper()
	ctx := context.Background()
	l := lockmodel.Lock{Name: "job", Prefix: p + "/job", Key: p + "/job/.lock", Limit: 1}
	recordKey := p + "/registry/locks/job"
	data, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyLock(ctx, LockApply{Op: LockCreate, Lock: l, RecordKey: recordKey, Record: data}); err != nil {
		t.Fatalf("creating the lock: %v", err)
	}
	mgmt := agent.Client()
	holder, _, err := mgmt.Session().Create(&api.SessionEntry{
		Name: "job-runner", Node: agent.NodeName, Behavior: api.SessionBehaviorRelease, LockDelay: lockDelay,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = mgmt.Session().Destroy(holder, nil) })
	if ok, _, err := mgmt.KV().Acquire(&api.KVPair{Key: l.Key, Session: holder, Flags: lockmodel.LockFlagValue, Value: []byte("running")}, nil); err != nil || !ok {
		t.Fatalf("acquiring: %v %v", ok, err)
	}
	return l, recordKey, holder
}

// A forced delete ends the holder's session instead of releasing its key:
// Consul keeps the key (by name) under the session's lock-delay even after
// the key is deleted, so a waiter cannot start while the old command stops.
func TestApplyLock_forceDeleteEndsHolderSessionKeepingLockDelay(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	l, recordKey, holder := holdLock(t, c, p, 30*time.Second)

	_, err := c.ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey})
	var held *LockHeldError
	if !errors.As(err, &held) || len(held.Holders) != 1 || held.Holders[0].Session != holder || held.Holders[0].Name != "job-runner" {
		t.Fatalf("deleting a held lock without Force: %v, want LockHeldError naming session %s", err, holder)
	}

	res, err := c.ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey, Force: true})
	if err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if len(res.Ended) != 1 || res.Ended[0].Session != holder {
		t.Fatalf("forced delete ended %+v, want session %s", res.Ended, holder)
	}
	for _, k := range []string{l.Key, recordKey} {
		if pair, _, err := c.KV().Get(k, &api.QueryOptions{RequireConsistent: true}); err != nil || pair != nil {
			t.Fatalf("%s after the forced delete: %+v %v, want it gone", k, pair, err)
		}
	}
	if s, _, err := c.Session().Info(holder, &api.QueryOptions{RequireConsistent: true}); err != nil || s != nil {
		t.Fatalf("holder session after the forced delete: %+v %v, want it ended", s, err)
	}
	waiter, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(waiter, nil) })
	ok, _, err := c.KV().Acquire(&api.KVPair{Key: l.Key, Session: waiter, Flags: lockmodel.LockFlagValue}, nil)
	if err != nil || ok {
		t.Fatalf("a waiter acquiring the deleted key within the ended holder's 30s lock-delay: ok=%v err=%v, want false", ok, err)
	}
	// Created again (as a replacement's create does, create-only), the key
	// is still under the delay: Consul keys it by name.
	if created, err := c.CreateKeyOnly(ctx, l.Key, lockmodel.LockFlagValue, nil); err != nil || !created {
		t.Fatalf("creating the key again: %v %v", created, err)
	}
	ok, _, err = c.KV().Acquire(&api.KVPair{Key: l.Key, Session: waiter, Flags: lockmodel.LockFlagValue}, nil)
	if err != nil || ok {
		t.Fatalf("a waiter acquiring the re-created key within the ended holder's 30s lock-delay: ok=%v err=%v, want false", ok, err)
	}
}

// Ending another node's session needs 'session:write' on that node: without
// it the forced delete stops, says which rule is missing, and deletes
// nothing.
func TestApplyLock_forceDeleteWithoutSessionWriteDeletesNothing(t *testing.T) {
	ctx := context.Background()
	p := testenv.UniquePrefix(t.Name())
	l, recordKey, holder := holdLock(t, newClient(t, agent.ManagementToken), p, time.Second)
	tok, err := agent.MintToken("force-no-session-write-"+testenv.NewUUID()[:8], fmt.Sprintf(`
key_prefix %q { policy = "write" }
session_prefix "" { policy = "read" }
`, p+"/"), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, tok.SecretID).ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey, Force: true})
	if consul.KindOf(err) != consul.KindPermissionDenied {
		t.Fatalf("forced delete without session write: %v (kind %s), want permission denied", err, consul.KindOf(err))
	}
	for _, want := range []string{"session:write", fmt.Sprintf(`session_prefix %q { policy = "write" }`, agent.NodeName), "nothing was deleted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if pair := readKey(t, l.Key); pair == nil || pair.Session != holder {
		t.Fatalf("lock key after the refused forced delete: %+v, want it still held by %s", pair, holder)
	}
	if readKey(t, recordKey) == nil {
		t.Fatalf("record %s deleted by a forced delete that could not end the holder's session", recordKey)
	}
}

func readKey(t *testing.T, key string) *api.KVPair {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// A forced delete of a semaphore ends the holders' sessions and keeps the
// holder table until their lock-delay has passed: Consul puts none on a
// slot, and a waiting `consullock run` honours a dead holder's lock-delay
// only while the table lists it.
func TestApplyLock_forceDeleteOfSemaphoreKeepsTableForHoldersLockDelay(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	l := lockmodel.Lock{Name: "pool", Prefix: p + "/pool", Key: p + "/pool/.lock", Limit: 2}
	recordKey := p + "/registry/locks/pool"
	data, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyLock(ctx, LockApply{Op: LockCreate, Lock: l, RecordKey: recordKey, Record: data}); err != nil {
		t.Fatalf("creating the semaphore: %v", err)
	}
	const lockDelay = 10 * time.Second
	holder, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, Behavior: api.SessionBehaviorDelete, LockDelay: lockDelay}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(holder, nil) })
	contender := l.Prefix + "/" + holder
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: contender, Session: holder, Flags: lockmodel.SemaphoreFlagValue}, nil); err != nil || !ok {
		t.Fatalf("acquiring the contender key: %v %v", ok, err)
	}
	table := readKey(t, l.Key)
	table.Value = []byte(fmt.Sprintf(`{"Limit":2,"Holders":{%q:true}}`, holder))
	if ok, _, err := c.KV().CAS(table, nil); err != nil || !ok {
		t.Fatalf("joining the holder table: %v %v", ok, err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey, Force: true})
		done <- err
	}()
	for {
		s, _, err := c.Session().Info(holder, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("forced delete returned (%v) with the holder's session still alive", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if pair := readKey(t, l.Key); pair == nil || !strings.Contains(string(pair.Value), holder) {
		t.Fatalf("holder table right after the holder's session ended: %+v, want it kept, listing %s, for its %s lock-delay", pair, holder, lockDelay)
	}
	if err := <-done; err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	for _, k := range []string{l.Key, recordKey, contender} {
		if pair := readKey(t, k); pair != nil {
			t.Fatalf("%s after the forced delete: %+v, want it gone", k, pair)
		}
	}
}

func TestHoldersTakeOverDelay(t *testing.T) {
	for _, tc := range []struct {
		delays []time.Duration
		want   time.Duration
	}{
		{nil, 0},
		{[]time.Duration{time.Second, 5 * time.Second}, 5 * time.Second},
		{[]time.Duration{2 * time.Minute}, lockmodel.MaxLockDelay},
		{[]time.Duration{time.Second, -1}, lockmodel.MaxLockDelay},
	} {
		hs := make([]HolderSession, 0, len(tc.delays))
		for _, d := range tc.delays {
			hs = append(hs, HolderSession{LockDelay: d})
		}
		if got := holdersTakeOverDelay(hs); got != tc.want {
			t.Errorf("holdersTakeOverDelay(%v) = %s, want %s", tc.delays, got, tc.want)
		}
	}
}

// A lock's delete removes its pause record in the delete's own
// transaction: one write request for the key, the record and the pause
// (a separate delete was a second Raft write per destroyed lock).
func TestApplyLock_deleteRemovesThePauseRecordInTheSameTransaction(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	l, recordKey, pauseKey := createPausedLock(t, c, p)
	key := readKey(t, l.Key)
	before := c.Requests()
	if _, err := c.ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey, KeyIndex: key.ModifyIndex, PauseKey: pauseKey}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if n := c.Requests() - before; n != 1 {
		t.Errorf("the delete sent %d requests, want 1 transaction", n)
	}
	for _, k := range []string{l.Key, recordKey, pauseKey} {
		if pair := readKey(t, k); pair != nil {
			t.Errorf("%s after the delete: %+v, want it gone", k, pair)
		}
	}
}

// A token that may delete the lock but not its pause record (a policy
// written before pauses existed) still deletes the lock and its record;
// the pause record stays, and the result says why.
func TestApplyLock_deleteWithoutWriteOnThePauseRecordLeavesItAndSaysSo(t *testing.T) {
	ctx := context.Background()
	p := testenv.UniquePrefix(t.Name())
	l, recordKey, pauseKey := createPausedLock(t, newClient(t, agent.ManagementToken), p)
	tok, err := agent.MintToken("delete-no-pause-write-"+testenv.NewUUID()[:8], fmt.Sprintf(`
key_prefix %q { policy = "write" }
key_prefix %q { policy = "write" }
key_prefix %q { policy = "read" }
`, p+"/job", p+"/registry/locks/", p+"/registry/pauses/"), 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := newClient(t, tok.SecretID).ApplyLock(ctx, LockApply{Op: LockDelete, Lock: l, RecordKey: recordKey, PauseKey: pauseKey})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if consul.KindOf(res.PauseLeft) != consul.KindPermissionDenied || !strings.Contains(res.PauseLeft.Error(), pauseKey) {
		t.Errorf("PauseLeft = %v, want a permission denial naming %s", res.PauseLeft, pauseKey)
	}
	for _, k := range []string{l.Key, recordKey} {
		if pair := readKey(t, k); pair != nil {
			t.Errorf("%s after the delete: %+v, want it gone", k, pair)
		}
	}
	if readKey(t, pauseKey) == nil {
		t.Error("the pause record is gone, deleted by a token that may not write it")
	}
}

// createPausedLock declares lock "job" under p (record and key) and writes
// its pause record.
func createPausedLock(t *testing.T, c Store, p string) (lockmodel.Lock, string, string) {
	t.Helper()
	l := lockmodel.Lock{Name: "job", Prefix: p + "/job", Key: p + "/job/.lock", Limit: 1}
	recordKey, pauseKey := p+"/registry/locks/job", p+"/registry/pauses/job"
	data, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyLock(context.Background(), LockApply{Op: LockCreate, Lock: l, RecordKey: recordKey, Record: data}); err != nil {
		t.Fatalf("creating the lock: %v", err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: pauseKey, Value: []byte(`{"paused":true}`)}, nil); err != nil {
		t.Fatal(err)
	}
	return l, recordKey, pauseKey
}
