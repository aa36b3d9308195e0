package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// Fence is the condition a fenced write is committed under: Session holds
// Key (Consul's "check-session" transaction op). A zero Fence fences
// nothing.
type Fence struct {
	Key, Session string
}

// Op is the fence's transaction op (etcd's Mutex.IsOwner comparison):
// check-session, which fails the whole transaction unless Session holds
// Key at the moment it commits.
func (f Fence) Op() *api.KVTxnOp {
	return &api.KVTxnOp{Verb: api.KVCheckSession, Key: f.Key, Session: f.Session}
}

// ErrFenceLost: Consul refused a fenced write because the fence's session
// no longer holds its key.
var ErrFenceLost = errors.New("the fencing session no longer holds its key")

// FencedCAS writes pair check-and-set (pair.ModifyIndex; 0 = create only)
// in one transaction with the fence's check, so Consul commits it only
// while the fence holds, however late the request reaches the servers.
// ok is false with no error when the check-and-set lost; err wraps
// ErrFenceLost when the fence did not hold.
func (c Store) FencedCAS(ctx context.Context, f Fence, pair *api.KVPair) (ok bool, err error) {
	var ops api.KVTxnOps
	if f.Session != "" {
		ops = append(ops, f.Op())
	}
	write := len(ops)
	ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: pair.Key, Flags: pair.Flags, Value: pair.Value, Index: pair.ModifyIndex})
	op := "write key " + pair.Key
	ok, resp, err := c.writeTxn(ctx, ops)
	if err != nil {
		return false, c.Classify(ctx, op, err)
	}
	if ok {
		return true, nil
	}
	if e := consul.TxnError(op, resp.Errors); e.Kind == consul.KindPermissionDenied {
		return false, e
	}
	for _, e := range resp.Errors {
		if e.OpIndex != write {
			return false, fmt.Errorf("%s: %w (%s held by session %s: %s)", op, ErrFenceLost, f.Key, f.Session, e.What)
		}
	}
	return false, nil
}
