package consul

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The texts are Consul 1.16's answers (TestTxnError_realAgentKinds
// produces each of them).
func TestTxnError_kinds(t *testing.T) {
	for _, tc := range []struct {
		verb, what string
		want       Kind
	}{
		{"lock", `failed to lock key "jobs/a/.lock", lock is already held`, KindHeld},
		{"check-session", `failed session check for key "jobs/a/.lock", current session "bd098ff7-d422-fb2a-8597-bfba66612fd6" != "67722cf9-73e9-0380-cf79-8cb9cfa7bf8a"`, KindHeld},
		{"check-session", `failed to check session, key "jobs/a/.lock" doesn't exist`, KindHeld},
		{"unlock", `failed to unlock key "jobs/a/.lock", lock isn't held, or is held by another session`, KindHeld},
		{"lock", `failed to lock key "jobs/a/.lock" due to lock delay`, KindLockDelay},
		{"cas", `failed to set key "jobs/a/.lock", index is stale`, KindStaleIndex},
		{"delete-cas", `failed to delete key "jobs/a/.lock", index is stale`, KindStaleIndex},
		{"check-index", `failed index check for key "jobs/a/.lock", current modify index 21 != 1`, KindStaleIndex},
		{"check-index", `failed to check index, key "jobs/a/.lock" doesn't exist`, KindStaleIndex},
		{"check-not-exists", `key "jobs/a/.lock" exists`, KindStaleIndex},
		{"lock", `invalid session "241e21e3-771c-436b-8c85-a8fe212e89ce"`, KindSessionInvalid},
		{"set", `Permission denied: token with AccessorID 'd90bab18-9393-8671-2d41-7d4548c6973b' lacks permission 'key:write' on "jobs/a/.lock"`, KindPermissionDenied},
		{"get", `key "jobs/a/.lock" doesn't exist`, KindValidation},
		{"lock", `missing session`, KindValidation},
	} {
		e := TxnError("op", api.TxnErrors{{OpIndex: 2, What: tc.what}})
		if e.Kind != tc.want || e.StatusCode != 409 {
			t.Errorf("%s %q: kind %s (HTTP %d), want %s (HTTP 409)", tc.verb, tc.what, e.Kind, e.StatusCode, tc.want)
		}
	}
}

func TestTxnError_permissionNamesTheGrant(t *testing.T) {
	e := TxnError("write", api.TxnErrors{{What: `Permission denied: token with AccessorID 'x' lacks permission 'key:write' on "jobs/a/.lock"`}})
	if e.Permission != "key:write" || e.Resource != "jobs/a/.lock" {
		t.Fatalf("permission %q on %q, want key:write on jobs/a/.lock", e.Permission, e.Resource)
	}
}

// With several refusals (Consul lists every ACL and lock-delay refusal of
// its pre-check), the kind is the one a retry cannot fix first: permission,
// then the session, then the ones the protocol waits out.
func TestTxnError_severalRefusals(t *testing.T) {
	denied := api.TxnError{OpIndex: 1, What: `Permission denied: token with AccessorID 'x' lacks permission 'key:write' on "q/e"`}
	delay := api.TxnError{OpIndex: 0, What: `failed to lock key "a/.lock" due to lock delay`}
	invalid := api.TxnError{OpIndex: 0, What: `invalid session "s"`}
	held := api.TxnError{OpIndex: 0, What: `failed to lock key "a/.lock", lock is already held`}
	stale := api.TxnError{OpIndex: 3, What: `failed to set key "a/.lock", index is stale`}
	other := api.TxnError{OpIndex: 3, What: `missing session`}
	for _, tc := range []struct {
		name string
		errs api.TxnErrors
		want Kind
	}{
		{"lock-delay and denied", api.TxnErrors{&delay, &denied}, KindPermissionDenied},
		{"invalid session and stale", api.TxnErrors{&invalid, &stale}, KindSessionInvalid},
		{"stale and lock-delay", api.TxnErrors{&stale, &delay}, KindLockDelay},
		{"stale and held", api.TxnErrors{&stale, &held}, KindHeld},
		{"other and stale", api.TxnErrors{&other, &stale}, KindStaleIndex},
		{"other", api.TxnErrors{&other}, KindValidation},
	} {
		if got := TxnError("op", tc.errs).Kind; got != tc.want {
			t.Errorf("%s: kind %s, want %s", tc.name, got, tc.want)
		}
	}
}

// An acquire outside a transaction with a session Consul no longer knows
// is answered HTTP 500 "invalid session": the same kind.
func TestClassify_invalidSessionOutsideATransaction(t *testing.T) {
	e := Classify("acquire", api.StatusError{Code: 500, Body: `raft apply failed: invalid session "a2d1365e-f6aa-4ead-91e5-ebf3e9035cef"`})
	assertKind(t, e, KindSessionInvalid)
}

func TestTxnError_realAgentKinds(t *testing.T) {
	ctx := t.Context()
	c := newClient(t, agent.ManagementToken)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	session := func(delay time.Duration) string {
		id, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, TTL: "30s", LockDelay: delay}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b := session(time.Minute), session(0)
	refusal := func(c *Client, ops ...*api.KVTxnOp) *Error {
		t.Helper()
		ok, resp, err := writeKVTxn(ctx, c, ops)
		if err != nil || ok {
			t.Fatalf("%+v: ok=%v err=%v, want a refusal", ops[0], ok, err)
		}
		return TxnError("txn", resp.Errors)
	}
	if ok, _, err := writeKVTxn(ctx, c, api.KVTxnOps{{Verb: api.KVLock, Key: key, Session: a}}); err != nil || !ok {
		t.Fatalf("lock with a: ok=%v err=%v", ok, err)
	}
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVLock, Key: key, Session: b}), KindHeld)
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: b}), KindHeld)
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVCAS, Key: key, Index: 1}), KindStaleIndex)
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: 1}), KindStaleIndex)
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVLock, Key: key + "-other", Session: testenv.NewUUID()}), KindSessionInvalid)
	if _, err := c.Session().Destroy(a, nil); err != nil {
		t.Fatal(err)
	}
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVLock, Key: key, Session: b}), KindLockDelay)
	tok, err := agent.MintToken("txnerror-"+testenv.NewUUID()[:8], `key_prefix "unrelated" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := refusal(newClient(t, tok.SecretID), &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: []byte("x")})
	assertKind(t, e, KindPermissionDenied)
	if e.Permission != "key:write" || e.Resource != key {
		t.Fatalf("permission %q on %q, want key:write on %s", e.Permission, e.Resource, key)
	}
	assertKind(t, refusal(c, &api.KVTxnOp{Verb: api.KVGet, Key: key + "-missing"}), KindValidation)

	_, _, err = c.KV().Acquire(&api.KVPair{Key: key + "-acquire", Session: testenv.NewUUID()}, nil)
	assertKind(t, Classify("acquire", err), KindSessionInvalid)
}

// writeKVTxn is WriteTxn for KV ops.
func writeKVTxn(ctx context.Context, c *Client, ops api.KVTxnOps) (bool, *api.TxnResponse, error) {
	txn := make(api.TxnOps, 0, len(ops))
	for _, op := range ops {
		txn = append(txn, &api.TxnOp{KV: op})
	}
	return c.WriteTxn(ctx, txn)
}
