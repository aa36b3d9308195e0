package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

func TestReadLockAndRecord_oneRequestMissingAndPresent(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	lockKey, recordKey := p+"/job/.lock", p+"/registry/locks/job"

	before := c.Requests()
	got, err := c.ReadLockAndRecord(ctx, lockKey, recordKey)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != nil || got.Record != nil {
		t.Fatalf("missing keys read as %+v", got)
	}
	if n := c.Requests() - before; n != 1 {
		t.Fatalf("ReadLockAndRecord sent %d requests, want 1", n)
	}

	if created, err := c.CreateKeyOnly(ctx, lockKey, lockmodel.LockFlagValue, nil); err != nil || !created {
		t.Fatalf("CreateKeyOnly: %v %v", created, err)
	}
	if created, err := c.CreateKeyOnly(ctx, lockKey, 0, []byte("x")); err != nil || created {
		t.Fatalf("CreateKeyOnly on an existing key: created=%v err=%v; want false, nil", created, err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: recordKey, Value: []byte(`{"r":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	got, err = c.ReadLockAndRecord(ctx, lockKey, recordKey)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key == nil || got.Key.Flags != lockmodel.LockFlagValue || got.Record == nil || string(got.Record.Value) != `{"r":1}` || got.Record.ModifyIndex == 0 {
		t.Fatalf("present keys read as key %+v record %+v", got.Key, got.Record)
	}
}

func TestReadLockAndRecord_hiddenKeyIsPermissionDeniedNotMissing(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	lockKey, recordKey := p+"/job/.lock", p+"/registry/locks/job"
	tok, err := agent.MintToken("locks-reader-"+testenv.NewUUID()[:8], fmt.Sprintf(`key %q { policy = "read" }`, lockKey), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, tok.SecretID).ReadLockAndRecord(context.Background(), lockKey, recordKey)
	if consul.KindOf(err) != consul.KindPermissionDenied {
		t.Fatalf("reading a record the token may not read: %v (kind %s), want permission denied", err, consul.KindOf(err))
	}
}

func TestRewriteKeyKeepingHolder_keepsSessionValueAndLockIndex(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	session, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, Name: "holder"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(session, nil) })
	// Acquire twice with a release between: LockIndex 2.
	for range 2 {
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: session, Value: []byte("job-data")}, nil); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		if ok, _, err := c.KV().Release(&api.KVPair{Key: key, Session: session, Value: []byte("job-data")}, nil); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: session, Value: []byte("job-data")}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	pair, err := c.ReadKeyConsistent(ctx, key)
	if err != nil || pair.LockIndex != 3 || pair.Flags != 0 {
		t.Fatalf("before: %+v %v", pair, err)
	}

	ok, err := c.RewriteKeyKeepingHolder(ctx, pair, lockmodel.LockFlagValue, pair.Value)
	if err != nil || !ok {
		t.Fatalf("RewriteKeyKeepingHolder: %v %v", ok, err)
	}
	after, err := c.ReadKeyConsistent(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if after.Flags != lockmodel.LockFlagValue || after.Session != session || after.LockIndex != 3 || string(after.Value) != "job-data" {
		t.Fatalf("after rewrite: %+v; want flags set and session, LockIndex 3 and value kept", after)
	}

	// A stale read loses: the key moved on since pair was read.
	ok, err = c.RewriteKeyKeepingHolder(ctx, pair, 0, pair.Value)
	if err != nil || ok {
		t.Fatalf("rewrite from a stale read: ok=%v err=%v; want false, nil", ok, err)
	}
}

// TestDeleteKeyIfIndex: a stale index deletes nothing; the current one
// deletes the (released) key.
func TestDeleteKeyIfIndex(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	session, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, Name: "holder"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(session, nil) })
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: session, Flags: lockmodel.LockFlagValue, Value: []byte("v")}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	pair, _ := c.ReadKeyConsistent(ctx, key)
	if ok, _, err := c.KV().Release(&api.KVPair{Key: key, Session: session, Flags: pair.Flags, Value: pair.Value}, nil); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	released, _ := c.ReadKeyConsistent(ctx, key)
	if released.Session != "" || released.Flags != lockmodel.LockFlagValue || string(released.Value) != "v" || released.LockIndex != 1 {
		t.Fatalf("after release: %+v; want no session, flags, value and LockIndex kept", released)
	}
	if ok, err := c.DeleteKeyIfIndex(ctx, key, pair.ModifyIndex); err != nil || ok {
		t.Fatalf("delete with a stale index: ok=%v err=%v; want false, nil", ok, err)
	}
	if ok, err := c.DeleteKeyIfIndex(ctx, key, released.ModifyIndex); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if gone, _ := c.ReadKeyConsistent(ctx, key); gone != nil {
		t.Fatalf("key still there: %+v", gone)
	}
}
