package consul

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
)

// txnRefusals maps Consul's words for a refused transaction op to their
// kind, in the order TxnError ranks them when a transaction lists several:
// first what a retry cannot fix, then what the lock protocol waits out.
// This is the one place that reads Consul's text of a transaction error;
// the texts are Consul 1.16's (TestTxnError_realAgentKinds).
var txnRefusals = []struct {
	kind    Kind
	phrases []string
}{
	{KindPermissionDenied, []string{"Permission denied", "lacks permission"}},
	{KindSessionInvalid, []string{"invalid session"}},
	{KindLockDelay, []string{"due to lock delay"}},
	{KindHeld, []string{"lock is already held", "failed session check", "failed to check session", "failed to unlock key"}},
	{KindStaleIndex, []string{"index is stale", "failed index check", "failed to check index", `" exists`}},
}

// txnRank is the rank of kind in txnRefusals; other kinds rank last.
func txnRank(kind Kind) int {
	for i, r := range txnRefusals {
		if r.kind == kind {
			return i
		}
	}
	return len(txnRefusals)
}

// txnOpKind is the kind of one op's refusal; KindValidation when Consul's
// words are none of the above.
func txnOpKind(what string) Kind {
	for _, r := range txnRefusals {
		for _, p := range r.phrases {
			if strings.Contains(what, p) {
				return r.kind
			}
		}
	}
	return KindValidation
}

// TxnError turns a transaction's error list (HTTP 409: Consul rolled it
// back) into an *Error whose kind says why: KindPermissionDenied (with the
// permission and resource Consul named), KindSessionInvalid, KindLockDelay,
// KindHeld, KindStaleIndex, or KindValidation for any other refusal. With
// several refusals the kind is the first of that list; Message carries
// Consul's words for every op.
func TxnError(op string, errs api.TxnErrors) *Error {
	msgs := make([]string, 0, len(errs))
	kind := KindValidation
	for _, e := range errs {
		msgs = append(msgs, fmt.Sprintf("operation %d: %s", e.OpIndex, e.What))
		if k := txnOpKind(e.What); txnRank(k) < txnRank(kind) {
			kind = k
		}
	}
	out := &Error{Kind: kind, Op: op, StatusCode: 409, Message: strings.Join(msgs, "; ")}
	if kind == KindPermissionDenied {
		if m := lacksPermission.FindStringSubmatch(out.Message); m != nil {
			out.Permission, out.Resource = m[1], m[2]
		}
	}
	return out
}

// WriteTxn runs a transaction that writes. Unlike api.Txn, which reports a
// refused request (403 ACL not found, 500 no leader) as bare text, it keeps
// the HTTP status, so that Classify tells an expired token or a transient
// error from the rest. ok is false when Consul rolled the transaction back
// (HTTP 409); resp then lists why (TxnError reads it).
func (c *Client) WriteTxn(ctx context.Context, txn api.TxnOps) (ok bool, resp *api.TxnResponse, err error) {
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
