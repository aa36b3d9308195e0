package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// The run ledger in Consul (lockmodel ledger.go decides, this file writes):
// one record per lock at <registry>/runs/<lock>, read consistently and
// written only by the lock's holder, in transactions that check the
// holder's session on the lock key. Two writes per attempt: BeginRun
// before the command starts, FinishRunAndRelease with the release; after a
// loss, CASLedger records the outcome by check-and-set instead.

// ErrLedgerChanged: the ledger was written by someone else since it was
// read (its check-and-set lost). Nothing was written; read it again and
// decide again.
var ErrLedgerChanged = errors.New("run ledger changed since it was read")

// ErrLedgerInvalid: the ledger to write is one a reader would refuse
// (record.EncodeLedger); nothing was sent.
var ErrLedgerInvalid = errors.New("run ledger not written")

// CASLedger writes l at key with a check-and-set on index, the ledger's
// ModifyIndex as read: the one ledger write no session fences, an
// attempt's outcome recorded after its holder lost the lock (runonce
// RecordAfterLoss). It is ErrLedgerChanged when the ledger was written
// since index, and an error wrapping ErrLedgerInvalid when l does not
// encode; Consul's errors are returned as they are (an answer lost may
// hide a write that committed: read again to know).
func (c Store) CASLedger(ctx context.Context, key string, l ledger.Ledger, index uint64) error {
	value, err := record.EncodeLedger(l)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLedgerInvalid, err)
	}
	ok, _, err := c.KV().CAS(&api.KVPair{Key: key, Value: value, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(ctx))
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrLedgerChanged
	}
	return nil
}

// ReadLedger reads lock's ledger at key with ?consistent, and its
// ModifyIndex for the next write. An absent ledger is an empty one at
// index 0. A ledger that does not decode, or belongs to another lock, is an
// error naming the field: a runner must not run a command on a guess.
func (c Store) ReadLedger(ctx context.Context, key, lock string) (ledger.Ledger, uint64, error) {
	pair, err := c.ReadKeyConsistent(ctx, key)
	if err != nil {
		return ledger.Ledger{}, 0, err
	}
	return DecodeLedgerPair(key, lock, pair)
}

// DecodeLedgerPair is lock's ledger in pair, as read from key by a plain
// or blocking query, and its ModifyIndex: ReadLedger's rule for a read the
// caller made (nil is an empty ledger at index 0).
func DecodeLedgerPair(key, lock string, pair *api.KVPair) (ledger.Ledger, uint64, error) {
	if pair == nil {
		return ledger.Ledger{Lock: lock}, 0, nil
	}
	l, err := record.DecodeLedger(pair.Value)
	if err != nil {
		return ledger.Ledger{}, 0, fmt.Errorf("run ledger %s: %w", key, err)
	}
	if l.Lock != lock {
		return ledger.Ledger{}, 0, fmt.Errorf("run ledger %s belongs to lock %q, not %q", key, l.Lock, lock)
	}
	return l, pair.ModifyIndex, nil
}

// LedgerWrite is one guarded write of a lock's ledger by its holder.
type LedgerWrite struct {
	// Fence is the holder's (Hold.IsOwner): the write commits only while
	// its session holds the lock key (Fence.Op in the same transaction).
	Fence Fence
	// LedgerKey is the ledger's key; Index its ModifyIndex as read
	// (ReadLedger; 0 when it was absent): the write is a check-and-set.
	LedgerKey string
	Index     uint64
	// Ledger is what to write (lockmodel Begin/Finish, pruned).
	Ledger ledger.Ledger
}

// BeginRun records an attempt's start (or, for ledger.BeginExhausted
// with Changed, a crashed attempt and the run exhausted): one transaction with a check-session
// on the lock key and a check-and-set of the ledger. It returns the
// ledger's new ModifyIndex, for FinishRunAndRelease. Errors: ErrFenceLost
// (the session no longer holds the lock: do not run the command),
// ErrLedgerChanged, a permission denial (*consul.Error).
//
// A write whose answer is lost is settled by a consistent read, never sent
// blindly again: the ledger as written at a higher index is done; the
// ledger unchanged while the session still holds the lock is sent again;
// anything else is a conflict or a lost fence.
func (c Store) BeginRun(ctx context.Context, w LedgerWrite) (uint64, error) {
	value, err := record.EncodeLedger(w.Ledger)
	if err != nil {
		return 0, err
	}
	ops := api.KVTxnOps{
		w.Fence.Op(),
		{Verb: api.KVCAS, Key: w.LedgerKey, Value: value, Index: w.Index},
	}
	return c.ledgerTxn(ctx, "record the start of a run in "+w.LedgerKey, w, value, ops, false)
}

// RunRelease is the last write of an attempt: its outcome and the release.
type RunRelease struct {
	LedgerWrite
	// Flags and Value are written to the lock key by the release (Consul
	// writes a release's body and flags like any PUT): the key's current
	// ones, to keep them.
	Flags uint64
	Value []byte
}

// FinishRunAndRelease records an attempt's outcome and releases the lock in
// one transaction: check-session on the lock key, check-and-set of the
// ledger, unlock of the lock key with its value and flags. No later holder
// can therefore acquire without seeing the outcome, and the release sets no
// lock-delay. It returns the ledger's new ModifyIndex. Errors as BeginRun's;
// on any error the lock was not released by this call.
func (c Store) FinishRunAndRelease(ctx context.Context, r RunRelease) (uint64, error) {
	value, err := record.EncodeLedger(r.Ledger)
	if err != nil {
		return 0, err
	}
	ops := api.KVTxnOps{
		r.Fence.Op(),
		{Verb: api.KVCAS, Key: r.LedgerKey, Value: value, Index: r.Index},
		{Verb: api.KVUnlock, Key: r.Fence.Key, Session: r.Fence.Session, Flags: r.Flags, Value: r.Value},
	}
	return c.ledgerTxn(ctx, "record the outcome of a run in "+r.LedgerKey+" and release "+r.Fence.Key, r.LedgerWrite, value, ops, true)
}

// ledgerTxn runs a guarded ledger write (ops: check-session first, the
// ledger's check-and-set second) and settles a lost answer.
func (c Store) ledgerTxn(ctx context.Context, op string, w LedgerWrite, value []byte, ops api.KVTxnOps, releases bool) (uint64, error) {
	var index uint64
	var refused error // why Consul rolled the transaction back
	ok, err := consul.SettleCAS(func() (bool, error) {
		ok, resp, err := c.writeTxn(ctx, ops)
		if err != nil {
			return false, c.Classify(ctx, op, err)
		}
		if !ok {
			if e := consul.TxnError(op, resp.Errors); e.Kind == consul.KindPermissionDenied {
				return false, e
			}
			refused = ErrLedgerChanged
			for _, e := range resp.Errors {
				if e.OpIndex != 1 { // the check-session or the unlock
					refused = fmt.Errorf("%s: %w (%s held by session %s: %s)", op, ErrFenceLost, w.Fence.Key, w.Fence.Session, e.What)
				}
			}
			return false, nil
		}
		for _, r := range resp.Results {
			if r != nil && r.KV != nil && r.KV.Key == w.LedgerKey {
				index = r.KV.ModifyIndex
			}
		}
		return true, nil
	}, func() (consul.WriteOutcome, error) {
		got, err := c.readKeys(ctx, op, "settling a ledger write needs permission 'key:read' on the ledger and the lock key", w.LedgerKey, w.Fence.Key)
		if err != nil {
			return 0, err
		}
		ledger, lock := got[w.LedgerKey], got[w.Fence.Key]
		held := lock != nil && lock.Session == w.Fence.Session
		written := ledger != nil && ledger.ModifyIndex > w.Index && bytes.Equal(ledger.Value, value)
		switch {
		case written && (!releases || !held):
			index = ledger.ModifyIndex
			return consul.OutcomeApplied, nil
		case !held:
			refused = fmt.Errorf("%s: %w (%s is no longer held by session %s)", op, ErrFenceLost, w.Fence.Key, w.Fence.Session)
			return consul.OutcomeOverwritten, nil
		}
		refused = ErrLedgerChanged
		return consul.CASOutcome(ledger, w.Index, func(*api.KVPair) bool { return false }), nil
	})
	if err != nil {
		return 0, err
	}
	if !ok {
		if refused == nil {
			refused = ErrLedgerChanged
		}
		return 0, refused
	}
	return index, nil
}

// EditLedger changes lock's ledger without holding the lock, for a writer
// whose change holds whatever the holder does (an operator's release, a
// run_once.overlap skip or replace): it reads the ledger consistently,
// applies edit, and writes the result with a check-and-set, reading and
// editing again after another writer's change, at most tries times. edit
// returns false to write nothing (then EditLedger reports false, nil).
// It reports whether the edit was written.
func (c Store) EditLedger(ctx context.Context, registry, lock string, tries int, edit func(ledger.Ledger) (ledger.Ledger, bool)) (bool, error) {
	key := record.RunLedgerKey(registry, lock)
	for range tries {
		l, index, err := c.ReadLedger(ctx, key, lock)
		if err != nil {
			return false, err
		}
		out, ok := edit(l)
		if !ok {
			return false, nil
		}
		value, err := record.EncodeLedger(out)
		if err != nil {
			return false, err
		}
		_, err = c.Registry(registry).Put(ctx, lockmodel.KindRuns, lock, value, index)
		if conflict := (*ErrConflict)(nil); errors.As(err, &conflict) {
			continue
		}
		return err == nil, err
	}
	return false, fmt.Errorf("%w: the run ledger %s kept changing (%d tries)", ErrLedgerChanged, key, tries)
}
