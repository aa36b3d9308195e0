package store

import (
	"context"
	"errors"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

func TestRegistry_checkAndSetAgainstRealAgent(t *testing.T) {
	ctx := context.Background()
	reg := newClient(t, agent.ManagementToken).Registry(testenv.UniquePrefix(t.Name()))
	var conflict *ErrConflict

	index, err := reg.Put(ctx, lockmodel.KindLock, "a", []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	rec, found, err := reg.Get(ctx, lockmodel.KindLock, "a")
	if err != nil || !found || string(rec.Value) != "v1" || rec.ModifyIndex != index {
		t.Fatalf("Get = %+v, %v, %v; want v1 at the index Put returned (%d)", rec, found, err, index)
	}
	if _, err := reg.Put(ctx, lockmodel.KindLock, "a", []byte("v2"), 0); !errors.As(err, &conflict) {
		t.Fatalf("create-only Put over an existing record: %v, want a conflict", err)
	}
	next, err := reg.Put(ctx, lockmodel.KindLock, "a", []byte("v2"), index)
	if err != nil || next <= index {
		t.Fatalf("Put at the current index = %d, %v; want a higher index", next, err)
	}
	if err := reg.Delete(ctx, lockmodel.KindLock, "a", index); !errors.As(err, &conflict) {
		t.Fatalf("Delete at a stale index: %v, want a conflict", err)
	}
	if err := reg.Delete(ctx, lockmodel.KindLock, "a", next); err != nil {
		t.Fatal(err)
	}
	if err := reg.Delete(ctx, lockmodel.KindLock, "a", next); err != nil {
		t.Fatalf("deleting a record that is gone: %v, want nil", err)
	}

	weak, err := agent.MintToken("registry-read-only-"+testenv.NewUUID()[:8], `key_prefix "" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, weak.SecretID).Registry(reg.Prefix()).Put(ctx, lockmodel.KindLock, "b", []byte("x"), 0)
	if consul.KindOf(err) != consul.KindPermissionDenied {
		t.Fatalf("Put with a read-only token: kind %v (%v), want permission denied", consul.KindOf(err), err)
	}
}

// A record write with a token Consul does not know (expired, deleted) says
// so, as a lock change does: the provider then asks for a new token instead
// of reporting an unknown failure.
func TestRegistryPut_unknownTokenIsInvalidToken(t *testing.T) {
	reg := newClient(t, testenv.NewUUID()).Registry(testenv.UniquePrefix(t.Name()))
	_, err := reg.Put(context.Background(), lockmodel.KindSessionDefaults, "p", []byte(`{}`), 0)
	if consul.KindOf(err) != consul.KindInvalidToken {
		t.Fatalf("record write with an unknown token: %v (kind %s), want invalid token", err, consul.KindOf(err))
	}
}
