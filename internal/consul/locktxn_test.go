package consul

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
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
	if _, err := newClient(t, tok.SecretID).ApplyLockChange(ctx, create); KindOf(err) != KindPermissionDenied {
		t.Fatalf("creation without key:write on the key: %v (kind %s), want permission denied", err, KindOf(err))
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
	if KindOf(err) != KindInvalidToken {
		t.Fatalf("lock change with an unknown token: %v (kind %s), want invalid token", err, KindOf(err))
	}
}
