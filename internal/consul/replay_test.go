package consul

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

func TestReplaySafe(t *testing.T) {
	tests := []struct {
		method, path, body string
		safe               bool
	}{
		{"GET", "/v1/kv/a?consistent", "", true},
		{"PUT", "/v1/kv/a", "v", true},
		{"PUT", "/v1/kv/a?acquire=s", "v", true},
		{"PUT", "/v1/kv/a?cas=0", "v", false},
		{"PUT", "/v1/kv/a?release=s", "v", false},
		{"DELETE", "/v1/kv/a", "", true},
		{"DELETE", "/v1/kv/a?cas=7", "", false},
		{"PUT", "/v1/txn", `[{"KV":{"Verb":"get-or-empty","Key":"a"}},{"KV":{"Verb":"get","Key":"b"}}]`, true},
		{"PUT", "/v1/txn", `[{"KV":{"Verb":"cas","Key":"a","Index":0}}]`, false},
		{"PUT", "/v1/txn", `[{"KV":{"Verb":"check-index","Key":"a","Index":3}},{"KV":{"Verb":"lock","Key":"a","Session":"s"}}]`, false},
		{"PUT", "/v1/txn", `[{"KV":{"Verb":"lock","Key":"a","Session":"s"}}]`, true},
		{"PUT", "/v1/txn", `[{"KV":{"Verb":"set","Key":"a"}}]`, false},
		{"PUT", "/v1/txn", `not json`, false},
		{"PUT", "/v1/session/create", `{}`, false},
		{"PUT", "/v1/session/renew/abc", "", true},
		{"PUT", "/v1/session/destroy/abc", "", true},
		{"PUT", "/v1/acl/token", `{}`, false},
		{"PUT", "/v1/acl/policy", `{}`, false},
		{"PUT", "/v1/acl/role", `{}`, false},
		{"PUT", "/v1/acl/token/6b6a2f8e-3c1d-4b7e-9a55-0c2b1d9e7f10", `{}`, true},
		{"PUT", "/v1/acl/policy/6b6a2f8e-3c1d-4b7e-9a55-0c2b1d9e7f10", `{}`, true},
		{"DELETE", "/v1/acl/token/6b6a2f8e-3c1d-4b7e-9a55-0c2b1d9e7f10", "", true},
		{"PUT", "/v1/acl/token/6b6a2f8e-3c1d-4b7e-9a55-0c2b1d9e7f10/clone", `{}`, false},
		{"POST", "/v1/acl/login", `{}`, false},
		{"PUT", "/v1/acl/bootstrap", "", false},
		{"PUT", "/v1/agent/check/pass/x", "", true},
		{"PUT", "/v1/event/fire/deploy", "", false},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, "http://127.0.0.1:8500"+tt.path, bytes.NewBufferString(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := replaySafe(req); got != tt.safe {
			t.Errorf("%s %s %s: replay safe = %v, want %v", tt.method, tt.path, tt.body, got, tt.safe)
		}
	}
}

// TestRetryPolicy_unsafeWriteOnlyWhenNotApplied: a write that is not safe to
// send twice is retried only when Consul cannot have applied it.
func TestRetryPolicy_unsafeWriteOnlyWhenNotApplied(t *testing.T) {
	policy := retryPolicy(DefaultRetry)
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	tests := []struct {
		name               string
		resp               *http.Response
		err                error
		safeRetry, unsafeR bool
	}{
		{"connection refused", nil, dial, true, true},
		{"reset after sending", nil, read, true, false},
		{"EOF after sending", nil, io.EOF, true, false},
		{"429", response(429, ""), nil, true, true},
		{"503", response(503, ""), nil, true, true},
		{"502 from a proxy", response(502, ""), nil, true, false},
		{"504 from a proxy", response(504, ""), nil, true, false},
		{"no leader", response(500, "No cluster leader"), nil, true, true},
		{"no servers", response(500, "No known Consul servers"), nil, true, true},
		{"rpc EOF", response(500, "rpc error making call: EOF"), nil, true, false},
		{"rpc stream closed", response(500, "rpc error making call: stream closed"), nil, true, false},
		{"leadership lost", response(500, "leadership lost while committing log"), nil, true, false},
		{"not the leader", response(500, "rpc error making call: node is not the leader"), nil, true, false},
		{"apply on a server no longer the leader", response(500, "rpc error making call: rpc error making call: apply failed: node is not the leader"), nil, true, true},
		{"validation", response(500, "Invalid Session TTL"), nil, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, safe := range []bool{true, false} {
				want := tt.safeRetry
				if !safe {
					want = tt.unsafeR
				}
				ctx := withReplaySafety(withStart(context.Background()), safe)
				if got, _ := policy(ctx, tt.resp, tt.err); got != want {
					t.Errorf("replay safe %v: retry = %v, want %v", safe, got, want)
				}
			}
		})
	}
}

func TestCASOutcome(t *testing.T) {
	written := func(p *api.KVPair) bool { return string(p.Value) == "mine" }
	tests := []struct {
		name   string
		pair   *api.KVPair
		expect uint64
		want   WriteOutcome
	}{
		{"create not applied", nil, 0, OutcomeNotApplied},
		{"create applied", &api.KVPair{ModifyIndex: 9, Value: []byte("mine")}, 0, OutcomeApplied},
		{"created by another", &api.KVPair{ModifyIndex: 9, Value: []byte("theirs")}, 0, OutcomeOverwritten},
		{"update not applied", &api.KVPair{ModifyIndex: 5, Value: []byte("old")}, 5, OutcomeNotApplied},
		{"update applied", &api.KVPair{ModifyIndex: 9, Value: []byte("mine")}, 5, OutcomeApplied},
		{"updated by another", &api.KVPair{ModifyIndex: 9, Value: []byte("theirs")}, 5, OutcomeOverwritten},
		{"deleted by another", nil, 5, OutcomeOverwritten},
	}
	for _, tt := range tests {
		if got := CASOutcome(tt.pair, tt.expect, written); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// lossyClient talks to the agent through a proxy that loses the answer to
// the first request drop matches.
func lossyClient(t *testing.T, drop func(*http.Request, []byte) bool) *Client {
	t.Helper()
	srv := testenv.LossyProxy(t, agent.HTTPAddr(), drop)
	c, err := New(Settings{Address: srv.URL, Token: agent.ManagementToken,
		Retry: RetrySettings{MaxAttempts: 3, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSessionCreate_notSentTwice: Consul names a new session on every
// create, so a create whose answer is lost is reported, not sent again.
func TestSessionCreate_notSentTwice(t *testing.T) {
	name := "lost-answer-" + testenv.NewUUID()[:8]
	c := lossyClient(t, testenv.PutTo("/v1/session/create"))
	_, _, err := c.Session().Create(&api.SessionEntry{Name: name, TTL: "30s"}, nil)
	sessions, _, lerr := agent.Client().Session().List(&api.QueryOptions{RequireConsistent: true})
	if lerr != nil {
		t.Fatal(lerr)
	}
	var found int
	for _, s := range sessions {
		if s.Name == name {
			found++
			_, _ = agent.Client().Session().Destroy(s.ID, nil)
		}
	}
	if found != 1 {
		t.Fatalf("%d sessions named %s after one create whose answer was lost; want 1", found, name)
	}
	if err == nil {
		t.Fatal("a session create whose answer was lost reported success without an ID it could know")
	}
	if KindOf(err) != KindTransient {
		t.Errorf("error kind %v (%v); want transient", KindOf(err), err)
	}
}
