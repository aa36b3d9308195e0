package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// Lock key writes for the consullock_lock resource. Keys are written with
// check-and-set so that a holder acquiring or releasing at the same moment is
// never overwritten: a lost CAS returns ok == false and the caller reads
// again.

// LockAndRecord is a lock key and the lock's registry record as one
// consistent read saw them.
type LockAndRecord struct {
	// Key is the lock key; nil when it does not exist.
	Key *api.KVPair
	// Record is the registry record; nil when it does not exist.
	Record *StoredRecord
}

// ReadLockAndRecord reads lockKey and recordKey consistently, in one
// read-only transaction shared with the other reads waiting at the same
// moment (ReadBatcher): a refresh of ten locks costs one Consul request.
//
// Consul drops what the token may not read from a transaction's results
// instead of refusing it; a dropped result is reported as
// consul.KindPermissionDenied naming the key, never as a missing key, so that no
// caller removes state on a guess.
func (c Store) ReadLockAndRecord(ctx context.Context, lockKey, recordKey string) (*LockAndRecord, error) {
	op := fmt.Sprintf("read lock key %s and registry record %s", lockKey, recordKey)
	got, err := c.readKeys(ctx, op, "reading a lock needs permission 'key:read' on its key and on its registry record", lockKey, recordKey)
	if err != nil {
		return nil, err
	}
	out := &LockAndRecord{Key: got[lockKey]}
	if p := got[recordKey]; p != nil {
		out.Record = &StoredRecord{Key: p.Key, Value: p.Value, ModifyIndex: p.ModifyIndex}
	}
	return out, nil
}

// ReadRecord reads one registry record consistently, batched like
// ReadLockAndRecord; nil when it does not exist.
func (c Store) ReadRecord(ctx context.Context, key string) (*StoredRecord, error) {
	got, err := c.readKeys(ctx, "read registry record "+key, "reading a registry record needs permission 'key:read' on it", key)
	if err != nil {
		return nil, err
	}
	p := got[key]
	if p == nil {
		return nil, nil
	}
	return &StoredRecord{Key: p.Key, Value: p.Value, ModifyIndex: p.ModifyIndex}, nil
}

// readKeys reads keys through the client's ReadBatcher. The map has every
// key: nil when it does not exist. A key hidden by ACLs is an error.
func (c Store) readKeys(ctx context.Context, op, need string, keys ...string) (map[string]*api.KVPair, error) {
	seen, err := c.Reads().Get(ctx, keys...)
	if err != nil {
		// The error is shared by every read of the batch: name this one's
		// keys on a copy.
		if e := (*consul.Error)(nil); errors.As(err, &e) {
			named := *e
			named.Op = op
			return nil, &named
		}
		return nil, err
	}
	out := make(map[string]*api.KVPair, len(keys))
	for _, k := range keys {
		p, ok := seen[k]
		if !ok {
			return nil, hiddenKey(op, k, need)
		}
		// get-or-empty answers a missing key with an entry that was never
		// created: CreateIndex 0.
		if p.CreateIndex != 0 {
			out[k] = p
		} else {
			out[k] = nil
		}
	}
	return out, nil
}

// ReadKeyConsistent reads one key with ?consistent; nil when it does not
// exist.
func (c Store) ReadKeyConsistent(ctx context.Context, key string) (*api.KVPair, error) {
	pair, _, err := c.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "read key "+key, err)
	}
	return pair, nil
}

// CreateKeyOnly writes key with flags and value only if it does not exist
// (CAS index 0). created is false when the key already exists. A create
// whose answer was lost counts as done when the key reads back as written.
func (c Store) CreateKeyOnly(ctx context.Context, key string, flags uint64, value []byte) (created bool, err error) {
	return consul.SettleCAS(func() (bool, error) {
		ok, _, err := c.KV().CAS(&api.KVPair{Key: key, Flags: flags, Value: value, ModifyIndex: 0}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return false, c.Classify(ctx, "create key "+key, err)
		}
		return ok, nil
	}, c.lookCAS(ctx, key, 0, func(p *api.KVPair) bool {
		return p.Flags == flags && bytes.Equal(p.Value, value) && p.Session == ""
	}))
}

// lookCAS reads key after an unanswered check-and-set, for SettleCAS.
func (c Store) lookCAS(ctx context.Context, key string, expectIndex uint64, written func(*api.KVPair) bool) func() (consul.WriteOutcome, error) {
	return func() (consul.WriteOutcome, error) {
		pair, err := c.ReadKeyConsistent(ctx, key)
		if err != nil {
			return 0, err
		}
		return consul.CASOutcome(pair, expectIndex, written), nil
	}
}

// RewriteKeyKeepingHolder sets the flags and value of pair's key if the key
// is unchanged since pair was read (its ModifyIndex), keeping the holder.
//
// A plain KV write keeps the holding session but resets LockIndex, the
// holder's fencing token. So a held key is rewritten as the holder's own
// re-acquire, in one transaction (check-index, then lock with the holder's
// session), which Consul performs without changing Session or LockIndex. An
// unheld key is written with a plain CAS. ok is false when the key changed
// in between; read it again and retry.
func (c Store) RewriteKeyKeepingHolder(ctx context.Context, pair *api.KVPair, flags uint64, value []byte) (ok bool, err error) {
	op := "rewrite key " + pair.Key
	// A rewrite whose answer was lost counts as done when the key reads
	// back as written, with the same holder.
	look := c.lookCAS(ctx, pair.Key, pair.ModifyIndex, func(p *api.KVPair) bool {
		return p.Flags == flags && bytes.Equal(p.Value, value) && p.Session == pair.Session
	})
	if pair.Session == "" {
		return consul.SettleCAS(func() (bool, error) {
			ok, _, err := c.KV().CAS(&api.KVPair{Key: pair.Key, Flags: flags, Value: value, ModifyIndex: pair.ModifyIndex}, (&api.WriteOptions{}).WithContext(ctx))
			if err != nil {
				return false, c.Classify(ctx, op, err)
			}
			return ok, nil
		}, look)
	}
	ops := api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: pair.Key, Index: pair.ModifyIndex},
		{Verb: api.KVLock, Key: pair.Key, Flags: flags, Value: value, Session: pair.Session},
	}
	return consul.SettleCAS(func() (bool, error) {
		ok, resp, err := c.writeTxn(ctx, ops)
		if err != nil {
			return false, c.Classify(ctx, op, err)
		}
		if !ok {
			if e := consul.TxnError(op, resp.Errors); e.Kind == consul.KindPermissionDenied {
				return false, e
			}
			// Stale index, session gone, lock taken: the key moved on.
			return false, nil
		}
		return true, nil
	}, look)
}

// DeleteKeyIfIndex deletes key if its ModifyIndex is still index; index 0
// deletes unconditionally. Deleting a missing key succeeds.
func (c Store) DeleteKeyIfIndex(ctx context.Context, key string, index uint64) (ok bool, err error) {
	op := "delete key " + key
	if index == 0 {
		if _, err := c.KV().Delete(key, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return false, c.Classify(ctx, op, err)
		}
		return true, nil
	}
	// A delete whose answer was lost counts as done when the key is gone.
	return consul.SettleCAS(func() (bool, error) {
		ok, _, err := c.KV().DeleteCAS(&api.KVPair{Key: key, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return false, c.Classify(ctx, op, err)
		}
		return ok, nil
	}, func() (consul.WriteOutcome, error) {
		pair, err := c.ReadKeyConsistent(ctx, key)
		switch {
		case err != nil:
			return 0, err
		case pair == nil:
			return consul.OutcomeApplied, nil
		case pair.ModifyIndex == index:
			return consul.OutcomeNotApplied, nil
		default:
			return consul.OutcomeOverwritten, nil
		}
	})
}

// EndHolderSessions destroys the holders' sessions, one by one, and returns
// those it ended (with their lock-delay, read first when unknown). Ending a
// session, unlike releasing its key, puts every key it held under its
// lock-delay: Consul keys the delay by key name, so it holds even when the
// key is deleted next, and no one acquires the key until the holder's
// runner has had lock_delay to stop its command. A session already gone is
// skipped.
//
// Destroying a session needs 'session:write' on its node: a denial stops
// at that holder, with an error naming the rule to grant and the sessions
// already ended, so that the caller deletes nothing.
func (c Store) EndHolderSessions(ctx context.Context, holders []HolderSession) ([]HolderSession, error) {
	var ended []HolderSession
	for _, h := range holders {
		op := "end " + h.Holder.String() + " holding the lock"
		if h.LockDelay < 0 {
			entry, _, err := c.Session().Info(h.Session, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			if err != nil {
				return ended, c.Classify(ctx, op, err)
			}
			if entry == nil {
				continue
			}
			h.LockDelay = entry.LockDelay
		}
		if _, err := c.Session().Destroy(h.Session, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			e := c.Classify(ctx, op, err)
			if e.Kind == consul.KindNotFound {
				continue
			}
			if e.Kind == consul.KindPermissionDenied {
				e.Message = fmt.Sprintf("%s. Ending a holder's session needs permission 'session:write' on its node: "+
					"session_prefix %q { policy = \"write\" } (or session %q) in the provider token's policy. %s",
					e.Message, h.Node, h.Node, endedSoFar(ended))
				e.Permission, e.Resource = "", ""
			}
			return ended, e
		}
		ended = append(ended, h)
	}
	return ended, nil
}

// endedSoFar says which sessions were ended before a failure, and that
// nothing was deleted.
func endedSoFar(ended []HolderSession) string {
	if len(ended) == 0 {
		return "No session was ended and nothing was deleted."
	}
	return fmt.Sprintf("Already ended: %s; nothing was deleted.", DescribeHolders(ended))
}
