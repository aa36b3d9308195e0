package consul

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/hashicorp/consul/api"
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
func (c *Client) ApplyLockChange(ctx context.Context, ch LockChange) (*LockChangeResult, error) {
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
		if e := txnError(op, resp.Errors); e.Kind == KindPermissionDenied {
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
func hiddenKey(op, key, need string) *Error {
	return &Error{
		Kind: KindPermissionDenied,
		Op:   op,
		Message: fmt.Sprintf("Consul hid key %q from the token (results filtered by ACLs); %s, "+
			"e.g. key_prefix %q { policy = \"read\" }", key, need, key),
	}
}

// writeTxn runs a KV transaction that writes. Unlike api.KV.Txn, which
// reports a refused request (403 ACL not found, 500 no leader) as bare
// text, it keeps the HTTP status, so that Classify tells an expired token
// or a transient error from the rest. ok is false when Consul rolled the
// transaction back (HTTP 409); resp then lists why.
func (c *Client) writeTxn(ctx context.Context, ops api.KVTxnOps) (ok bool, resp *api.TxnResponse, err error) {
	txn := make(api.TxnOps, 0, len(ops))
	for _, op := range ops {
		txn = append(txn, &api.TxnOp{KV: op})
	}
	resp = &api.TxnResponse{}
	_, err = c.Raw().Write("/v1/txn", txn, resp, (&api.WriteOptions{}).WithContext(ctx))
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusConflict {
		resp = &api.TxnResponse{}
		if jerr := json.Unmarshal([]byte(se.Body), resp); jerr != nil {
			return false, nil, err
		}
		return false, resp, nil
	}
	if err != nil {
		return false, nil, err
	}
	return true, resp, nil
}
