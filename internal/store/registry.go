package store

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// Registry stores declaration records under the registry prefix, one key per
// object. Every write is check-and-set, so two concurrent applies cannot
// silently overwrite each other.
type Registry struct {
	client Store
	prefix string
}

// Registry returns the declaration store under prefix (already validated).
func (c Store) Registry(prefix string) *Registry {
	return &Registry{client: c, prefix: strings.Trim(prefix, "/")}
}

// Prefix returns the registry prefix.
func (r *Registry) Prefix() string { return r.prefix }

// Key returns the KV key of a record.
func (r *Registry) Key(kind, name string) string {
	return lockmodel.RegistryKey(r.prefix, kind, name)
}

// StoredRecord is a raw record with the index needed for CAS.
type StoredRecord struct {
	Key         string
	Value       []byte
	ModifyIndex uint64
}

// Get reads a record consistently. found is false when the key is absent.
func (r *Registry) Get(ctx context.Context, kind, name string) (rec StoredRecord, found bool, err error) {
	key := r.Key(kind, name)
	pair, err := r.client.ReadKeyConsistent(ctx, key)
	if err != nil || pair == nil {
		return StoredRecord{Key: key}, false, err
	}
	return StoredRecord{Key: key, Value: pair.Value, ModifyIndex: pair.ModifyIndex}, true, nil
}

// ErrConflict means a CAS write lost: someone else changed the record since
// it was read. Nothing was written.
type ErrConflict struct{ Key string }

func (e *ErrConflict) Error() string {
	return fmt.Sprintf("registry record %s was changed by someone else since it was read (check-and-set failed); nothing was overwritten: refresh and apply again", e.Key)
}

// Put writes a record if its ModifyIndex is still expectIndex (0 = create
// only). It returns the new ModifyIndex, from the same request: a
// one-operation transaction answers with the written pair. When the answer
// is lost, the record is read back: exactly this value written since
// expectIndex is success, not a conflict with itself.
func (r *Registry) Put(ctx context.Context, kind, name string, value []byte, expectIndex uint64) (uint64, error) {
	key := r.Key(kind, name)
	op := "write registry record " + key
	ops := api.KVTxnOps{{Verb: api.KVCAS, Key: key, Value: value, Index: expectIndex}}
	var index uint64
	ok, err := consul.SettleCAS(func() (bool, error) {
		ok, resp, err := r.client.writeTxn(ctx, ops)
		if err != nil {
			return false, r.client.Classify(ctx, op, err)
		}
		if !ok {
			if e := consul.TxnError(op, resp.Errors); e.Kind == consul.KindPermissionDenied {
				return false, e
			}
			return false, nil
		}
		if len(resp.Results) > 0 && resp.Results[0].KV != nil {
			index = resp.Results[0].KV.ModifyIndex
		}
		return true, nil
	}, func() (consul.WriteOutcome, error) {
		pair, err := r.client.ReadKeyConsistent(ctx, key)
		if err != nil {
			return 0, err
		}
		if pair != nil {
			index = pair.ModifyIndex
		}
		return consul.CASOutcome(pair, expectIndex, func(p *api.KVPair) bool { return bytes.Equal(p.Value, value) }), nil
	})
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &ErrConflict{Key: key}
	}
	return index, nil
}

// Delete removes a record if its ModifyIndex is still expectIndex (0 =
// unconditionally); a record that is already gone is not an error.
func (r *Registry) Delete(ctx context.Context, kind, name string, expectIndex uint64) error {
	key := r.Key(kind, name)
	ok, err := r.client.DeleteKeyIfIndex(ctx, key, expectIndex)
	if err != nil {
		return err
	}
	if !ok {
		if _, found, gerr := r.Get(ctx, kind, name); gerr == nil && !found {
			return nil
		}
		return &ErrConflict{Key: key}
	}
	return nil
}

// List returns every record of a kind, consistently, in one request.
func (r *Registry) List(ctx context.Context, kind string) ([]StoredRecord, uint64, error) {
	prefix := r.prefix + "/" + kind + "/"
	pairs, meta, err := r.client.KV().List(prefix, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, 0, r.client.Classify(ctx, "list registry "+prefix, err)
	}
	out := make([]StoredRecord, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, StoredRecord{Key: p.Key, Value: p.Value, ModifyIndex: p.ModifyIndex})
	}
	return out, meta.LastIndex, nil
}
