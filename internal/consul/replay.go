package consul

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
)

// A request whose answer was lost may or may not have been applied. Sending
// it again is only safe when twice has the effect of once: reads, full
// replacements, renewals, deletions by ID. A create that Consul names
// (token, policy, session) or a check-and-set is not: a second token, a
// policy "already exists", a second session, or a CAS that now "conflicts"
// with its own first attempt. Such requests are retried only when Consul
// cannot have applied them; callers that can find out what happened (by a
// client-chosen ID, a name, or the key's contents) do so in settle loops.

type replayKey struct{}

// withReplaySafety records in the request's context whether it may be sent
// again after it reached Consul; the retry policy reads it.
func withReplaySafety(ctx context.Context, safe bool) context.Context {
	return context.WithValue(ctx, replayKey{}, safe)
}

// replaySafeFrom is true unless the request was marked unsafe.
func replaySafeFrom(ctx context.Context) bool {
	safe, ok := ctx.Value(replayKey{}).(bool)
	return !ok || safe
}

// replaySafe decides whether req has the same effect when sent twice.
func replaySafe(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	p, q := req.URL.Path, req.URL.Query()
	switch {
	case strings.HasPrefix(p, "/v1/kv/"):
		// A second check-and-set fails against the first; a second
		// release by the same session answers false. Acquire by the
		// holding session answers true again and changes nothing.
		return !q.Has("cas") && !q.Has("release")
	case p == "/v1/txn":
		return replaySafeTxn(req)
	case strings.HasPrefix(p, "/v1/session/"):
		// Renew and destroy by ID are safe; create names a new session.
		return !strings.HasPrefix(p, "/v1/session/create")
	case strings.HasPrefix(p, "/v1/acl/"):
		// Updates and deletions by ID replace or remove one object; a
		// create (no ID in the path), clone, login or bootstrap makes a
		// new one.
		parts := strings.Split(strings.Trim(p, "/"), "/")
		return len(parts) == 4 && parts[3] != "" && parts[2] != "login" && parts[2] != "logout" && parts[2] != "bootstrap" &&
			parts[3] != "clone"
	case strings.HasPrefix(p, "/v1/agent/"), strings.HasPrefix(p, "/v1/catalog/"):
		// Registrations and check updates are keyed by ID.
		return true
	}
	return false
}

// replaySafeTxn reports whether a /v1/txn body holds only reads and checks,
// or only reads and acquires ("lock", which like ?acquire answers true again
// for the holding session). A check followed by a write is not: sent
// again, its check fails against its own first write.
func replaySafeTxn(req *http.Request) bool {
	if req.GetBody == nil {
		return req.Body == nil || req.Body == http.NoBody
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	var ops []map[string]struct{ Verb string }
	if err := json.NewDecoder(io.LimitReader(body, 1<<20)).Decode(&ops); err != nil {
		return false
	}
	checks, locks := false, false
	for _, op := range ops {
		for kind, o := range op {
			switch {
			case o.Verb == "get" || kind == "KV" && (o.Verb == "get-tree" || o.Verb == "get-or-empty"):
			case strings.HasPrefix(o.Verb, "check-"):
				checks = true
			case kind == "KV" && o.Verb == "lock":
				locks = true
			default:
				return false
			}
		}
	}
	return !(checks && locks)
}

// notSent reports a transport error that proves the request never reached
// Consul: the connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// notAppliedServerMessages are HTTP 500 bodies that say the agent could not
// hand the request to a Raft leader, so nothing was applied. "apply failed:
// node is not the leader" is Raft's ErrNotLeader from a server's apply
// (raftApply wraps it so): Raft answers it only to an entry a follower or
// candidate took off its apply queue, never appended; an entry appended
// and then cut off by a lost leadership answers "leadership lost". Others in
// transientMessages ("rpc error making call: EOF", timeouts,
// "leadership lost", a bare "node is not the leader") come after the
// request may have been applied.
var notAppliedServerMessages = []string{
	"No cluster leader",
	"Raft leader not found",
	"rpc error getting client",
	"connection refused",
	"No known Consul servers",
	"apply failed: node is not the leader",
}

// notApplied reports an answer that proves a write was not applied: rate
// limiting (429, 503 from Consul) or no leader to apply it. 502 and 504 come
// from proxies that may have forwarded the request.
func notApplied(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusInternalServerError:
		body := peekBody(resp)
		for _, m := range notAppliedServerMessages {
			if strings.Contains(body, m) {
				return true
			}
		}
	}
	return false
}

// MaxSettleAttempts bounds how often a write whose answer was lost is found
// not applied and sent again.
const MaxSettleAttempts = 3

// WriteOutcome is what a read after an unanswered write found.
type WriteOutcome int

const (
	// OutcomeApplied: the live state is exactly what was written.
	OutcomeApplied WriteOutcome = iota + 1
	// OutcomeNotApplied: the live state is still what the write expected.
	OutcomeNotApplied
	// OutcomeOverwritten: someone else changed it: a real conflict.
	OutcomeOverwritten
)

// SettleCAS runs a check-and-set write. When its answer is lost (a
// transient error), or it fails its check after an attempt whose answer was
// lost, look reads the live state: exactly what was written counts as done,
// unchanged is sent again, anything else is a real conflict (ok false).
func SettleCAS(write func() (ok bool, err error), look func() (WriteOutcome, error)) (bool, error) {
	var lost error
	for attempt := 1; ; attempt++ {
		ok, err := write()
		switch {
		case err == nil && (ok || lost == nil):
			return ok, nil
		case err != nil && KindOf(err) != KindTransient:
			return false, err
		case err != nil:
			lost = err
		}
		outcome, lerr := look()
		switch {
		case lerr != nil:
			return false, lost
		case outcome == OutcomeApplied:
			return true, nil
		case outcome == OutcomeNotApplied && attempt < MaxSettleAttempts:
			continue
		case outcome == OutcomeNotApplied:
			return false, lost
		default:
			return false, nil
		}
	}
}

// CASOutcome judges the live pair after an unanswered check-and-set that
// expected ModifyIndex expectIndex (0: the key did not exist) and would
// leave a pair for which written is true.
func CASOutcome(pair *api.KVPair, expectIndex uint64, written func(*api.KVPair) bool) WriteOutcome {
	switch {
	case pair == nil && expectIndex == 0, pair != nil && pair.ModifyIndex == expectIndex:
		return OutcomeNotApplied
	case pair != nil && pair.ModifyIndex > expectIndex && written(pair):
		return OutcomeApplied
	default:
		return OutcomeOverwritten
	}
}
