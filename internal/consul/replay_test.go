package consul

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
		{"rpc EOF", response(500, "rpc error making call: EOF"), nil, true, false},
		{"rpc stream closed", response(500, "rpc error making call: stream closed"), nil, true, false},
		{"leadership lost", response(500, "leadership lost while committing log"), nil, true, false},
		{"not the leader", response(500, "rpc error making call: node is not the leader"), nil, true, false},
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
		want   writeOutcome
	}{
		{"create not applied", nil, 0, outcomeNotApplied},
		{"create applied", &api.KVPair{ModifyIndex: 9, Value: []byte("mine")}, 0, outcomeApplied},
		{"created by another", &api.KVPair{ModifyIndex: 9, Value: []byte("theirs")}, 0, outcomeOverwritten},
		{"update not applied", &api.KVPair{ModifyIndex: 5, Value: []byte("old")}, 5, outcomeNotApplied},
		{"update applied", &api.KVPair{ModifyIndex: 9, Value: []byte("mine")}, 5, outcomeApplied},
		{"updated by another", &api.KVPair{ModifyIndex: 9, Value: []byte("theirs")}, 5, outcomeOverwritten},
		{"deleted by another", nil, 5, outcomeOverwritten},
	}
	for _, tt := range tests {
		if got := casOutcome(tt.pair, tt.expect, written); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// lossyProxy forwards every request to the real agent. The first request
// that drop matches is forwarded and answered by the agent, and then the
// connection to the client is closed without the answer: the write
// happened, the client cannot know. A real agent cannot be made to do this.
type lossyProxy struct {
	t      *testing.T
	drop   func(*http.Request, []byte) bool
	mu     sync.Mutex
	done   bool
	counts map[string]int
}

func newLossyProxy(t *testing.T, drop func(r *http.Request, body []byte) bool) *httptest.Server {
	p := &lossyProxy{t: t, drop: drop, counts: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, agent.HTTPAddr()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)

	p.mu.Lock()
	drop := !p.done && p.drop(r, body)
	if drop {
		p.done = true
	}
	p.mu.Unlock()
	if drop {
		hj, ok := w.(http.Hijacker)
		if !ok {
			p.t.Error("the test server's ResponseWriter cannot hijack")
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			p.t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func putTo(path string) func(*http.Request, []byte) bool {
	return func(r *http.Request, _ []byte) bool { return r.Method == http.MethodPut && r.URL.Path == path }
}

// lossyClient talks to the agent through a proxy that loses the answer to
// the first request drop matches.
func lossyClient(t *testing.T, drop func(*http.Request, []byte) bool) *Client {
	t.Helper()
	srv := newLossyProxy(t, drop)
	c, err := New(Settings{Address: srv.URL, Token: agent.ManagementToken,
		Retry: RetrySettings{MaxAttempts: 3, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateACLToken_lostAnswerLeavesExactlyOneToken(t *testing.T) {
	ctx := context.Background()
	description := "lost-answer " + testenv.NewUUID()
	c := lossyClient(t, putTo("/v1/acl/token"))
	got, err := c.CreateACLToken(ctx, &api.ACLToken{Description: description})
	if err != nil {
		t.Fatalf("create with a lost answer: %v", err)
	}
	tokens, _, err := agent.Client().ACL().TokenList(nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, tok := range tokens {
		if tok.Description == description {
			found = append(found, tok.AccessorID)
			t.Cleanup(func() { _, _ = agent.Client().ACL().TokenDelete(tok.AccessorID, nil) })
		}
	}
	if len(found) != 1 || found[0] != got.AccessorID {
		t.Fatalf("tokens with the description: %v; want exactly the one returned (%s)", found, got.AccessorID)
	}
	live, _, err := agent.Client().ACL().TokenRead(got.AccessorID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SecretID == "" || live.SecretID != got.SecretID {
		t.Fatal("the returned secret is not the live token's secret")
	}
}

func TestCreateACLPolicy_lostAnswerLeavesExactlyOnePolicy(t *testing.T) {
	ctx := context.Background()
	name := "lost-answer-" + testenv.NewUUID()[:8]
	c := lossyClient(t, putTo("/v1/acl/policy"))
	want := &api.ACLPolicy{Name: name, Description: "d", Rules: "key \"lost\" {\n  policy = \"read\"\n}\n"}
	got, err := c.CreateACLPolicy(ctx, want)
	if err != nil {
		t.Fatalf("create with a lost answer: %v", err)
	}
	t.Cleanup(func() { _, _ = agent.Client().ACL().PolicyDelete(got.ID, nil) })
	policies, _, err := agent.Client().ACL().PolicyList(nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range policies {
		if p.Name == name {
			found = append(found, p.ID)
		}
	}
	if len(found) != 1 || found[0] != got.ID {
		t.Fatalf("policies named %s: %v; want exactly the one returned (%s)", name, found, got.ID)
	}

	// A policy of that name that is not ours is still an error.
	other := *want
	other.Rules = "key \"other\" {\n  policy = \"read\"\n}\n"
	if _, err := newClient(t, agent.ManagementToken).CreateACLPolicy(ctx, &other); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating a second, different policy of the same name: %v; want already exists", err)
	}
}

func TestRegistryPut_lostAnswerIsNotAConflict(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.UniquePrefix(t.Name())
	reg := lossyClient(t, putTo("/v1/txn")).Registry(prefix)
	index, err := reg.Put(ctx, lockmodel.KindLock, "a", []byte("v1"), 0)
	if err != nil {
		t.Fatalf("create-only Put with a lost answer: %v; want success, not a conflict with itself", err)
	}
	pair, _, err := agent.Client().KV().Get(reg.Key(lockmodel.KindLock, "a"), &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || string(pair.Value) != "v1" || pair.ModifyIndex != index {
		t.Fatalf("record after Put: %+v, %v; want v1 at the returned index %d", pair, err, index)
	}

	// An update whose answer is lost, then a real conflict.
	reg2 := lossyClient(t, putTo("/v1/txn")).Registry(prefix)
	next, err := reg2.Put(ctx, lockmodel.KindLock, "a", []byte("v2"), index)
	if err != nil || next <= index {
		t.Fatalf("update Put with a lost answer: %d, %v; want success at a higher index", next, err)
	}
	var conflict *ErrConflict
	if _, err := reg2.Put(ctx, lockmodel.KindLock, "a", []byte("v3"), index); !errors.As(err, &conflict) {
		t.Fatalf("Put at a stale index: %v; want a conflict", err)
	}
}

func TestCreateKeyOnly_lostAnswerCountsAsCreated(t *testing.T) {
	ctx := context.Background()
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	c := lossyClient(t, func(r *http.Request, _ []byte) bool { return r.Method == http.MethodPut && r.URL.Query().Has("cas") })
	created, err := c.CreateKeyOnly(ctx, key, lockmodel.LockFlagValue, nil)
	if err != nil || !created {
		t.Fatalf("create-only with a lost answer: created %v, %v; want created", created, err)
	}
	if created, err := c.CreateKeyOnly(ctx, key, lockmodel.LockFlagValue, nil); err != nil || created {
		t.Fatalf("second create-only: created %v, %v; want false (exists)", created, err)
	}
}

// TestSessionCreate_notSentTwice: Consul names a new session on every
// create, so a create whose answer is lost is reported, not sent again.
func TestSessionCreate_notSentTwice(t *testing.T) {
	name := "lost-answer-" + testenv.NewUUID()[:8]
	c := lossyClient(t, putTo("/v1/session/create"))
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
