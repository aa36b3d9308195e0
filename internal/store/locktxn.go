package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// KeyAction is what a LockChange does to the lock key.
type KeyAction int

const (
	// KeyLeave writes nothing to the key (an adopted key).
	KeyLeave KeyAction = iota
	// KeyCreate creates the key create-only (CAS 0).
	KeyCreate
	// KeyGet reads the key in the transaction; the transaction fails when
	// the key does not exist.
	KeyGet
	// KeyRewrite rewrites the key read as LockChange.KeyPair, keeping its
	// holder (see RewriteKeyKeepingHolder).
	KeyRewrite
	// KeyDelete deletes the key if its ModifyIndex is still KeyIndex.
	KeyDelete
)

// RecordAction is what a LockChange does to the registry record.
type RecordAction int

const (
	// RecordLeave writes nothing to the record.
	RecordLeave RecordAction = iota
	// RecordPut writes Record if the record's ModifyIndex is still
	// RecordIndex (0 = create only).
	RecordPut
	// RecordDelete deletes the record if its ModifyIndex is still
	// RecordIndex (0 = whatever it is).
	RecordDelete
)

// LockChange is one change of a lock (its registry record and its key,
// and the check that its session profile exists) as one Consul
// transaction: all of it happens, or none of it.
type LockChange struct {
	// ProfileKey, when set, is read in the transaction, which fails when
	// the session profile record does not exist.
	ProfileKey string

	RecordKey   string
	Record      RecordAction
	RecordValue []byte
	RecordIndex uint64

	Key      string
	KeyOp    KeyAction
	Flags    uint64
	Value    []byte
	KeyPair  *api.KVPair // KeyRewrite: the key as read
	KeyIndex uint64      // KeyDelete

	// AlsoDelete are keys deleted in the same transaction, whatever their
	// index (a deleted lock's pause record); absent ones are no error.
	AlsoDelete []string
}

// LockChangeResult is what a LockChange found. When OK is false nothing was
// written and the flags say which part failed (more than one may).
type LockChangeResult struct {
	OK bool
	// Profile is the session profile record (OK, ProfileKey set).
	Profile *api.KVPair
	// RecordIndex is the record's new ModifyIndex (OK, RecordPut).
	RecordIndex uint64
	// Key is the key as written or read (OK, KeyCreate, KeyGet, KeyRewrite).
	Key *api.KVPair

	ProfileMissing bool
	RecordConflict bool
	KeyConflict    bool
}

// ApplyLockChange runs ch as one transaction. Permission denials are
// errors; a lost check-and-set, a missing profile or a missing key are
// reported in the result. A result with OK and an error means the change
// was applied but Consul hid part of the answer from the token.
func (c Store) ApplyLockChange(ctx context.Context, ch LockChange) (*LockChangeResult, error) {
	var ops api.KVTxnOps
	part := map[int]string{}
	add := func(name string, o ...*api.KVTxnOp) {
		for _, op := range o {
			part[len(ops)] = name
			ops = append(ops, op)
		}
	}
	if ch.ProfileKey != "" {
		add("profile", &api.KVTxnOp{Verb: api.KVGet, Key: ch.ProfileKey})
	}
	switch ch.Record {
	case RecordPut:
		add("record", &api.KVTxnOp{Verb: api.KVCAS, Key: ch.RecordKey, Value: ch.RecordValue, Index: ch.RecordIndex})
	case RecordDelete:
		if ch.RecordIndex == 0 {
			add("record", &api.KVTxnOp{Verb: api.KVDelete, Key: ch.RecordKey})
		} else {
			add("record", &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: ch.RecordKey, Index: ch.RecordIndex})
		}
	}
	switch ch.KeyOp {
	case KeyCreate:
		add("key", &api.KVTxnOp{Verb: api.KVCAS, Key: ch.Key, Flags: ch.Flags, Value: ch.Value, Index: 0})
	case KeyGet:
		add("key", &api.KVTxnOp{Verb: api.KVGet, Key: ch.Key})
	case KeyRewrite:
		add("key", rewriteOps(ch.KeyPair, ch.Flags, ch.Value)...)
	case KeyDelete:
		add("key", &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: ch.Key, Index: ch.KeyIndex})
	}
	for _, k := range ch.AlsoDelete {
		add("also", &api.KVTxnOp{Verb: api.KVDelete, Key: k})
	}
	op := fmt.Sprintf("change lock key %s and registry record %s", ch.Key, ch.RecordKey)
	if len(ops) == 0 {
		return &LockChangeResult{OK: true}, nil
	}
	ok, resp, err := c.writeTxn(ctx, ops)
	if err != nil {
		return nil, c.Classify(ctx, op, err)
	}
	res := &LockChangeResult{OK: ok}
	if !ok {
		if e := consul.TxnError(op, resp.Errors); e.Kind == consul.KindPermissionDenied {
			return nil, e
		}
		for _, e := range resp.Errors {
			switch part[e.OpIndex] {
			case "profile":
				res.ProfileMissing = true
			case "record":
				res.RecordConflict = true
			case "key":
				res.KeyConflict = true
			}
		}
		return res, nil
	}
	for _, r := range resp.Results {
		if r == nil || r.KV == nil {
			continue
		}
		p := r.KV
		switch p.Key {
		case ch.ProfileKey:
			res.Profile = p
		case ch.RecordKey:
			res.RecordIndex = p.ModifyIndex
		case ch.Key:
			res.Key = p
		}
	}
	// Consul filters what the token may not read from the results of a
	// transaction that it has applied: the change is made, and the caller
	// gets both the result and the error, to take the change back.
	if ch.ProfileKey != "" && res.Profile == nil {
		return res, hiddenKey(op, ch.ProfileKey, "checking a lock's session profile needs permission 'key:read' on its record")
	}
	if (ch.KeyOp == KeyGet || ch.KeyOp == KeyCreate || ch.KeyOp == KeyRewrite) && res.Key == nil {
		return res, hiddenKey(op, ch.Key, "changing a lock needs permission 'key:read' on its key")
	}
	return res, nil
}

// rewriteOps rewrites pair's key with flags and value, keeping its holder:
// a held key as the holder's own re-acquire (check-index, then lock with
// its session), which keeps Session and LockIndex; an unheld key by CAS.
func rewriteOps(pair *api.KVPair, flags uint64, value []byte) []*api.KVTxnOp {
	if pair.Session == "" {
		return []*api.KVTxnOp{{Verb: api.KVCAS, Key: pair.Key, Flags: flags, Value: value, Index: pair.ModifyIndex}}
	}
	return []*api.KVTxnOp{
		{Verb: api.KVCheckIndex, Key: pair.Key, Index: pair.ModifyIndex},
		{Verb: api.KVLock, Key: pair.Key, Flags: flags, Value: value, Session: pair.Session},
	}
}

// hiddenKey is the error for a key Consul dropped from a transaction's
// results because the token may not read it.
// need says who needs what, e.g. "reading a lock needs permission
// 'key:read' on its key".
func hiddenKey(op, key, need string) *consul.Error {
	return &consul.Error{
		Kind: consul.KindPermissionDenied,
		Op:   op,
		Message: fmt.Sprintf("Consul hid key %q from the token (results filtered by ACLs); %s, "+
			"e.g. key_prefix %q { policy = \"read\" }", key, need, key),
	}
}

// writeTxn runs a KV transaction that writes. Unlike api.KV.Txn, which
// reports a refused request (403 ACL not found, 500 no leader) as bare
// text, it keeps the HTTP status, so that consul.Classify tells an expired token
// or a transient error from the rest. ok is false when Consul rolled the
// transaction back (HTTP 409); resp then lists why (consul.TxnError reads it).
func (c Store) writeTxn(ctx context.Context, ops api.KVTxnOps) (ok bool, resp *api.TxnResponse, err error) {
	txn := make(api.TxnOps, 0, len(ops))
	for _, op := range ops {
		txn = append(txn, &api.TxnOp{KV: op})
	}
	return c.WriteTxn(ctx, txn)
}

// LockOp is what ApplyLock does with a consullock_lock declaration.
type LockOp int

const (
	// LockCreate writes the record, creates the key create-only (or adopts
	// a compatible existing key untouched) and checks the session profile,
	// in one transaction.
	LockCreate LockOp = iota
	// LockUpdate rewrites the record and, when it drifted, the key, keeping
	// its holder.
	LockUpdate
	// LockDelete deletes the record and the key, refusing a held lock
	// unless Force.
	LockDelete
)

// lockAttempts bounds the read-modify-write loops on a lock key, which lose
// only when a holder writes the key at the same moment.
const lockAttempts = 5

// LockApply is one apply of a lock declaration: what ApplyLock is asked.
type LockApply struct {
	Op LockOp
	// Lock is the normalised declaration.
	Lock lockmodel.Lock
	// ProfileKey is the record of the lock's session profile ("" for
	// none): create and update fail when it does not exist.
	ProfileKey string
	RecordKey  string
	// Record is the encoded declaration (create, update).
	Record []byte
	// RecordIndex is the record's ModifyIndex as the last refresh saw it:
	// update and delete write by check-and-set against it, so that a
	// concurrent apply elsewhere is reported instead of overwritten. 0 when
	// unknown: update then reads it, delete deletes whatever is there.
	RecordIndex uint64
	// KeyIndex is the key's ModifyIndex when the last refresh saw it
	// unheld (0 otherwise): delete then sends only its transaction.
	KeyIndex uint64
	// Force lets delete end the holders' sessions (force_destroy).
	Force bool
	// PauseKey is the lock's pause record: delete removes it in its own
	// transaction (no write of its own), so that a lock declared again
	// under the name does not start paused.
	PauseKey string
}

// LockApplied is what ApplyLock did.
type LockApplied struct {
	// Profile is the session profile record as read in the transaction
	// that wrote the record (create, update; nil without a profile).
	Profile *api.KVPair
	// RecordIndex is the record's new ModifyIndex (create, update).
	RecordIndex uint64
	// Key is the lock key as written or read (create, update).
	Key *api.KVPair
	// Adopted is set when create found a compatible key and left it as it
	// was (Key is that key).
	Adopted bool
	// ReplacedRecord is why an unreadable record was overwritten (create).
	ReplacedRecord error
	// RecordLeftFor is set when delete left the record in place because
	// it now declares another key: that key.
	RecordLeftFor string
	// Ended are the holder sessions delete ended (Force).
	Ended []HolderSession
	// PauseLeft is why delete left the pause record in place: the token
	// may not delete it (the lock and its record are deleted all the same).
	PauseLeft error
	// LeftBehind is set, with an error, when create wrote the lock and
	// then could not take it back.
	LeftBehind bool
}

// Why ApplyLock refused or gave up; the provider turns each into its
// diagnostic. Nothing was written when they are returned, except as
// LockApplied.LeftBehind says.
var (
	// ErrProfileMissing: the session profile record does not exist.
	ErrProfileMissing = errors.New("session profile not recorded")
	// ErrRecordChanged: the record was written by someone else at the same
	// moment (create), or since the last refresh (update).
	ErrRecordChanged = errors.New("registry record changed concurrently")
	// ErrKeyKeepsChanging: the key changed between every read and write.
	ErrKeyKeepsChanging = errors.New("lock key keeps changing")
)

// RecordClaimedError: create found the lock's name recorded for another key.
type RecordClaimedError struct{ RecordKey, DeclaredKey string }

func (e *RecordClaimedError) Error() string {
	return fmt.Sprintf("registry record %s declares key %q", e.RecordKey, e.DeclaredKey)
}

// NewerRecordError: the record was written by a newer consullock.
type NewerRecordError struct {
	RecordKey string
	Err       error
}

func (e *NewerRecordError) Error() string {
	return fmt.Sprintf("registry record %s: %v", e.RecordKey, e.Err)
}
func (e *NewerRecordError) Unwrap() error { return e.Err }

// IncompatibleKeyError: create found a key Consul's lock clients cannot use
// as declared.
type IncompatibleKeyError struct {
	Pair *api.KVPair
	Err  error
}

func (e *IncompatibleKeyError) Error() string { return e.Err.Error() }
func (e *IncompatibleKeyError) Unwrap() error { return e.Err }

// UnusableSemaphoreKeyError: update found a semaphore key whose value
// api.Semaphore cannot use.
type UnusableSemaphoreKeyError struct {
	Key string
	Err error
}

func (e *UnusableSemaphoreKeyError) Error() string { return fmt.Sprintf("key %s: %v", e.Key, e.Err) }
func (e *UnusableSemaphoreKeyError) Unwrap() error { return e.Err }

// UnreadableProfileError: the session profile record cannot be decoded
// (create takes the lock back).
type UnreadableProfileError struct {
	Key string
	Err error
}

func (e *UnreadableProfileError) Error() string {
	return fmt.Sprintf("session profile %s: %v", e.Key, e.Err)
}
func (e *UnreadableProfileError) Unwrap() error { return e.Err }

// LockHeldError: delete found the lock held and Force was not set.
type LockHeldError struct{ Holders []HolderSession }

func (e *LockHeldError) Error() string { return "lock is held by " + DescribeHolders(e.Holders) }

// HolderSession is the session of a live holder of a lock key (or of a
// semaphore contender key listed in the holder table): what ending a
// holder needs.
type HolderSession struct {
	holder.Holder // its fencing token is not read
	Name          string
	// LockDelay is the session's lock-delay; -1 when it was not read.
	LockDelay time.Duration
}

// DescribeHolders names holders for a message.
func DescribeHolders(hs []HolderSession) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		name := ""
		if h.Name != "" {
			name = fmt.Sprintf(" (%q)", h.Name)
		}
		parts = append(parts, fmt.Sprintf("session %s%s on node %q", h.Session, name, h.Node))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return fmt.Sprintf("%d holders: %s", len(parts), strings.Join(parts, ", "))
}

// HolderSessions lists the live holders in a lock view: the mutex's
// session, or the semaphore's holders whose sessions still exist (their
// LockDelay unknown, -1, as the view did not read their sessions).
func (view *LockView) HolderSessions() []HolderSession {
	var out []HolderSession
	if view.Semaphore != nil {
		for _, h := range view.Semaphore.Holders {
			if !h.SessionGone {
				out = append(out, HolderSession{Holder: holder.Holder{Session: h.Session, Node: h.Node}, LockDelay: -1})
			}
		}
		return out
	}
	if s := view.Session; s != nil {
		out = append(out, HolderSession{Holder: holder.Holder{Session: s.ID, Node: s.Node}, Name: s.Name, LockDelay: s.LockDelay})
	}
	return out
}

// ApplyLock runs a lock's create, update or delete: the check-and-set loop
// of LockChange transactions, the reads between them, and the decisions
// they need (adopt a compatible key, take over a record of the same lock,
// rewrite a drifted key keeping its holder, end the holders' sessions on a
// forced delete). Refusals are the errors above; Consul's are *Error.
func (c Store) ApplyLock(ctx context.Context, a LockApply) (*LockApplied, error) {
	switch a.Op {
	case LockCreate:
		return c.createLock(ctx, a)
	case LockUpdate:
		return c.updateLock(ctx, a)
	case LockDelete:
		return c.deleteLock(ctx, a)
	}
	return nil, fmt.Errorf("unknown lock operation %d", a.Op)
}

// initialKeyValue is the value a new lock key is created with: empty for a
// mutex, an empty holder table for a semaphore.
func initialKeyValue(l lockmodel.Lock) []byte {
	if l.IsSemaphore() {
		return lockmodel.NewSemaphoreValue(l.Limit)
	}
	return nil
}

// createLock writes the record, creates the key create-only and checks the
// profile in one transaction. When the record or the key already exists,
// it reads both and decides (take over a record of the same lock, adopt a
// compatible key, refuse the rest) before writing again.
func (c Store) createLock(ctx context.Context, a LockApply) (*LockApplied, error) {
	l := a.Lock
	ch := LockChange{
		ProfileKey: a.ProfileKey,
		RecordKey:  a.RecordKey, Record: RecordPut, RecordValue: a.Record,
		Key: l.Key, KeyOp: KeyCreate, Flags: l.Flags(), Value: initialKeyValue(l),
	}
	out := &LockApplied{}
	var adopted *api.KVPair
	for attempt := 0; ; attempt++ {
		res, err := c.ApplyLockChange(ctx, ch)
		if err != nil {
			if res != nil && res.OK {
				out.LeftBehind = !c.undoCreate(ctx, ch, res, adopted)
			}
			return out, err
		}
		if res.ProfileMissing {
			return out, ErrProfileMissing
		}
		if res.OK {
			if a.ProfileKey != "" && res.Profile != nil {
				if _, err := record.DecodeSessionProfileRecord(res.Profile.Value); err != nil {
					out.LeftBehind = !c.undoCreate(ctx, ch, res, adopted)
					return out, &UnreadableProfileError{Key: res.Profile.Key, Err: err}
				}
			}
			out.Profile, out.RecordIndex, out.Key = res.Profile, res.RecordIndex, res.Key
			if adopted != nil {
				out.Key, out.Adopted = adopted, true
			}
			return out, nil
		}
		if attempt > 0 && res.RecordConflict {
			return out, ErrRecordChanged
		}
		if attempt == lockAttempts-1 {
			return out, ErrKeyKeepsChanging
		}
		// The record or the key exists: look at both, then decide.
		got, err := c.ReadLockAndRecord(ctx, l.Key, a.RecordKey)
		if err != nil {
			return out, err
		}
		ch.RecordIndex, out.ReplacedRecord, err = claimRecord(got.Record, l)
		if err != nil {
			return out, err
		}
		adopted, ch.KeyOp = nil, KeyCreate
		if got.Key != nil {
			if err := lockmodel.CheckCompatible(l, got.Key.Flags, got.Key.Value); err != nil {
				return out, &IncompatibleKeyError{Pair: got.Key, Err: err}
			}
			adopted, ch.KeyOp = got.Key, KeyLeave
		}
	}
}

// claimRecord checks that the lock's name is free in the registry (rec is
// nil), or already recorded for this same key (an earlier apply, or a key
// deleted out of band and now recreated), and returns the index to write
// the record at, and why an unreadable record is overwritten.
func claimRecord(rec *StoredRecord, l lockmodel.Lock) (index uint64, replaced, err error) {
	if rec == nil {
		return 0, nil, nil
	}
	decl, err := record.DecodeLockRecord(rec.Value)
	switch {
	case errors.Is(err, record.ErrNewerSchema):
		return 0, nil, &NewerRecordError{RecordKey: rec.Key, Err: err}
	case err != nil:
		return rec.ModifyIndex, err, nil
	case decl.Key != l.Key:
		return 0, nil, &RecordClaimedError{RecordKey: rec.Key, DeclaredKey: decl.Key}
	}
	return rec.ModifyIndex, nil, nil
}

// undoCreate takes back what a creation's transaction wrote when the lock
// must not stay declared after all (its session profile is unusable or
// hidden from the token): the key it created and the record, if the record
// is new, each only as long as nobody changed it since. It reports whether
// that worked.
func (c Store) undoCreate(ctx context.Context, ch LockChange, res *LockChangeResult, adopted *api.KVPair) bool {
	undo := LockChange{RecordKey: ch.RecordKey, Key: ch.Key}
	if ch.RecordIndex == 0 {
		undo.Record, undo.RecordIndex = RecordDelete, res.RecordIndex
	}
	if adopted == nil && res.Key != nil {
		undo.KeyOp, undo.KeyIndex = KeyDelete, res.Key.ModifyIndex
	}
	u, err := c.ApplyLockChange(ctx, undo)
	return err == nil && u.OK
}

// keyRewrite returns the value the existing key must have (a semaphore's
// holder table with the declared Limit; else its value as it is) and
// whether the key must be rewritten for it or for its flags.
func keyRewrite(l lockmodel.Lock, pair *api.KVPair) ([]byte, bool, error) {
	value := pair.Value
	if l.IsSemaphore() {
		var err error
		if value, err = lockmodel.SemaphoreValueWithLimit(pair.Value, l.Limit); err != nil {
			return nil, false, &UnusableSemaphoreKeyError{Key: l.Key, Err: err}
		}
	}
	return value, pair.Flags != l.Flags() || !bytes.Equal(value, pair.Value), nil
}

// updateLock rewrites the record and, when the key needs it, the key
// (keeping its holder), in one transaction. The usual change touches only
// the record: then the transaction reads the key to see it still matches,
// and nothing else is sent.
func (c Store) updateLock(ctx context.Context, a LockApply) (*LockApplied, error) {
	l := a.Lock
	knownIndex := a.RecordIndex != 0
	ch := LockChange{
		ProfileKey: a.ProfileKey,
		RecordKey:  a.RecordKey, Record: RecordPut, RecordValue: a.Record, RecordIndex: a.RecordIndex,
		Key: l.Key, KeyOp: KeyGet, Flags: l.Flags(),
	}
	out := &LockApplied{}
	needRead := !knownIndex
	for attempt := 0; ; attempt++ {
		if attempt == lockAttempts {
			return out, ErrKeyKeepsChanging
		}
		if needRead {
			got, err := c.ReadLockAndRecord(ctx, l.Key, a.RecordKey)
			if err != nil {
				return out, err
			}
			if !knownIndex {
				ch.RecordIndex = 0
				if got.Record != nil {
					ch.RecordIndex = got.Record.ModifyIndex
				}
			}
			ch.KeyOp, ch.KeyPair, ch.Value = KeyCreate, nil, initialKeyValue(l)
			if got.Key != nil {
				value, rewrite, err := keyRewrite(l, got.Key)
				if err != nil {
					return out, err
				}
				ch.KeyOp, ch.KeyPair, ch.Value = KeyGet, nil, nil
				if rewrite {
					ch.KeyOp, ch.KeyPair, ch.Value = KeyRewrite, got.Key, value
				}
			}
		}
		res, err := c.ApplyLockChange(ctx, ch)
		if err != nil {
			return out, err
		}
		if res.ProfileMissing {
			return out, ErrProfileMissing
		}
		if res.RecordConflict {
			return out, ErrRecordChanged
		}
		if !res.OK {
			needRead = true // the key moved on, or is gone: read it again
			continue
		}
		if ch.Record == RecordPut {
			out.RecordIndex, out.Profile = res.RecordIndex, res.Profile
		}
		out.Key = res.Key
		if ch.KeyOp != KeyGet {
			return out, nil
		}
		// The key was only read: it must already say what is declared.
		if _, rewrite, err := keyRewrite(l, res.Key); err != nil {
			return out, err
		} else if !rewrite {
			return out, nil
		}
		// It drifted since the refresh: the record is in place; now the key.
		ch.Record, ch.ProfileKey, needRead = RecordLeave, "", true
	}
}

// deleteLock deletes the record and the key in one transaction, by
// check-and-set on the key. When the key is as the last refresh saw it,
// unheld, that transaction is all it sends. A held lock is refused unless
// Force, which ends the holders' sessions first (EndHolderSessions: Consul
// then puts the key under their lock-delay, which a release would not).
// Other keys under the prefix are left alone.
func (c Store) deleteLock(ctx context.Context, a LockApply) (*LockApplied, error) {
	l := a.Lock
	ch := LockChange{RecordKey: a.RecordKey, Record: RecordDelete, RecordIndex: a.RecordIndex, Key: l.Key, KeyOp: KeyDelete, KeyIndex: a.KeyIndex}
	if a.PauseKey != "" {
		ch.AlsoDelete = []string{a.PauseKey}
	}
	out := &LockApplied{}
	for attempt := 0; attempt < lockAttempts; attempt++ {
		if ch.KeyIndex != 0 || ch.KeyOp == KeyLeave {
			res, err := c.ApplyLockChange(ctx, ch)
			var denied *consul.Error
			if len(ch.AlsoDelete) > 0 && errors.As(err, &denied) && denied.Kind == consul.KindPermissionDenied && denied.Resource == a.PauseKey {
				// The pause record alone is out of the token's reach: the
				// lock is deleted without it, and the caller says so.
				out.PauseLeft, ch.AlsoDelete = err, nil
				res, err = c.ApplyLockChange(ctx, ch)
			}
			if err != nil {
				return out, err
			}
			if res.OK {
				return out, nil
			}
			if res.RecordConflict {
				if err := c.recordStillOurs(ctx, &ch, l, out); err != nil {
					return out, err
				}
			}
		}
		view, err := c.ReadLock(ctx, l.Key, true)
		if err != nil {
			return out, err
		}
		if view.Pair == nil {
			ch.KeyOp, ch.KeyIndex = KeyLeave, 0
			continue
		}
		holders := view.HolderSessions()
		if len(holders) == 0 {
			ch.KeyOp, ch.KeyIndex = KeyDelete, view.Pair.ModifyIndex
			continue
		}
		if !a.Force {
			return out, &LockHeldError{Holders: holders}
		}
		ended, err := c.EndHolderSessions(ctx, holders)
		out.Ended = append(out.Ended, ended...)
		if err != nil {
			return out, err
		}
		if view.Semaphore != nil {
			// Consul puts no lock-delay on a semaphore slot: a waiting
			// `consullock run` keeps a dead holder's slot for its lock-delay
			// (lockmodel.SlotFreeAt), but only while the holder table lists
			// it. Deleting the table at once would let a waiter start on a
			// fresh one while the ended holders' commands still stop.
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(holdersTakeOverDelay(ended)):
			}
		}
		ch.KeyOp, ch.KeyIndex = KeyDelete, 0 // read the key again for its new ModifyIndex
	}
	return out, ErrKeyKeepsChanging
}

// holdersTakeOverDelay is the longest lock-delay a waiter counts for the
// ended holders (lockmodel.DeadHolderLockDelay each): the most
// Consul allows for a holder whose lock-delay is unknown.
func holdersTakeOverDelay(holders []HolderSession) time.Duration {
	var d time.Duration
	for _, h := range holders {
		var known []time.Duration // a negative LockDelay: not known
		if h.LockDelay >= 0 {
			known = append(known, h.LockDelay)
		}
		d = max(d, lockmodel.DeadHolderLockDelay(known...))
	}
	return d
}

// recordStillOurs is called when deleting the record by check-and-set
// failed: it reads the record and sets ch to delete it again at its new
// index when it still declares this lock's key, or to leave it when it is
// gone or declares another key (out.RecordLeftFor).
func (c Store) recordStillOurs(ctx context.Context, ch *LockChange, l lockmodel.Lock, out *LockApplied) error {
	rec, err := c.ReadRecord(ctx, ch.RecordKey)
	if err != nil {
		return err
	}
	if rec == nil {
		ch.Record = RecordLeave
		return nil
	}
	if decl, derr := record.DecodeLockRecord(rec.Value); derr == nil && decl.Key != l.Key {
		ch.Record, out.RecordLeftFor = RecordLeave, decl.Key
		return nil
	}
	ch.RecordIndex = rec.ModifyIndex
	return nil
}
