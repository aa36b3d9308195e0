package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// This file holds the Consul lock protocol spoken over raw HTTP, the way the
// Consul documentation describes leader election: every contender creates a
// session and PUTs /v1/kv/<key>?acquire=<session>. The acceptance scenario in
// data_source_lock_test.go drives it step by step and confirms each step
// through the consullock_lock data source; the plain tests here repeat what
// needs no OpenTofu.

// protoClient is one contender: its own HTTP client and token.
type protoClient struct {
	t     testing.TB
	base  string
	token string
	http  *http.Client
}

func newProtoClient(t testing.TB, token string) *protoClient {
	return &protoClient{t: t, base: agent.HTTPAddr(), token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends one request and returns the body of a 200 answer; 404 returns
// (nil, 404, nil); any other status is an error with Consul's text.
func (c *protoClient) do(method, path string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("X-Consul-Token", c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return out, resp.StatusCode, nil
	case http.StatusNotFound:
		return nil, resp.StatusCode, nil
	default:
		return nil, resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(out)))
	}
}

// protoSession is the body of PUT /v1/session/create. Durations are
// strings so that "0s" is sent as written (the Go api drops a zero
// LockDelay and the server then applies 15s).
type protoSession struct {
	Name          string              `json:"Name,omitempty"`
	TTL           string              `json:"TTL,omitempty"`
	LockDelay     string              `json:"LockDelay,omitempty"`
	Behavior      string              `json:"Behavior,omitempty"`
	Checks        []string            `json:"Checks,omitempty"`
	NodeChecks    []string            `json:"NodeChecks,omitempty"`
	ServiceChecks []protoServiceCheck `json:"ServiceChecks,omitempty"`
}

type protoServiceCheck struct {
	ID string `json:"ID"`
}

// createSession creates a session on the agent's node and returns its ID.
func (c *protoClient) createSession(s protoSession) string {
	c.t.Helper()
	body, err := json.Marshal(s)
	if err != nil {
		c.t.Fatal(err)
	}
	out, _, err := c.do(http.MethodPut, "/v1/session/create", body)
	if err != nil {
		c.t.Fatalf("create session %+v: %v", s, err)
	}
	var created struct{ ID string }
	if err := json.Unmarshal(out, &created); err != nil || created.ID == "" {
		c.t.Fatalf("create session: unexpected answer %q (%v)", out, err)
	}
	return created.ID
}

// boolAnswer parses the true/false body that acquire and release answer
// with under HTTP 200.
func boolAnswer(out []byte) (bool, error) {
	switch strings.TrimSpace(string(out)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, fmt.Errorf("answer %q is neither true nor false", out)
	}
}

// tryAcquire is PUT /v1/kv/<key>?acquire=<session> with value as body.
func (c *protoClient) tryAcquire(key, session string, value []byte) (bool, error) {
	out, _, err := c.do(http.MethodPut, "/v1/kv/"+key+"?acquire="+url.QueryEscape(session), value)
	if err != nil {
		return false, err
	}
	return boolAnswer(out)
}

func (c *protoClient) acquire(key, session string, value []byte) bool {
	c.t.Helper()
	ok, err := c.tryAcquire(key, session, value)
	if err != nil {
		c.t.Fatalf("acquire %s with %s: %v", key, session, err)
	}
	return ok
}

// release is PUT /v1/kv/<key>?release=<session>.
func (c *protoClient) release(key, session string) bool {
	c.t.Helper()
	out, _, err := c.do(http.MethodPut, "/v1/kv/"+key+"?release="+url.QueryEscape(session), nil)
	if err != nil {
		c.t.Fatalf("release %s with %s: %v", key, session, err)
	}
	ok, err := boolAnswer(out)
	if err != nil {
		c.t.Fatalf("release %s: %v", key, err)
	}
	return ok
}

// destroy is PUT /v1/session/destroy/<session>.
func (c *protoClient) destroy(session string) {
	c.t.Helper()
	if _, _, err := c.do(http.MethodPut, "/v1/session/destroy/"+session, nil); err != nil {
		c.t.Fatalf("destroy session %s: %v", session, err)
	}
}

// protoPair is a KV entry as GET /v1/kv/<key> returns it.
type protoPair struct {
	Key         string
	Session     string
	LockIndex   uint64
	ModifyIndex uint64
	CreateIndex uint64
	Flags       uint64
	Value       []byte
}

// readKey reads key with ?consistent; nil when it does not exist.
func (c *protoClient) readKey(key string) *protoPair {
	c.t.Helper()
	out, status, err := c.do(http.MethodGet, "/v1/kv/"+key+"?consistent", nil)
	if err != nil {
		c.t.Fatalf("read %s: %v", key, err)
	}
	if status == http.StatusNotFound {
		return nil
	}
	var pairs []protoPair
	if err := json.Unmarshal(out, &pairs); err != nil || len(pairs) != 1 {
		c.t.Fatalf("read %s: unexpected answer %q (%v)", key, out, err)
	}
	return &pairs[0]
}

// race has every contender PUT ?acquire= at the same moment and returns
// which of them Consul answered true.
func race(t testing.TB, key string, contenders []*protoClient, sessions []string) []bool {
	t.Helper()
	won := make([]bool, len(contenders))
	errs := make([]error, len(contenders))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			won[i], errs[i] = contenders[i].tryAcquire(key, sessions[i], []byte("contender-"+sessions[i]))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("contender %d: %v", i, err)
		}
	}
	return won
}

// mintHolderToken returns a token with what a raw-protocol lock holder
// needs and no more: key write on the keys under prefix and session write
// on the agent's node (session rules match node names).
func mintHolderToken(t testing.TB, prefix string) string {
	t.Helper()
	tok, err := agent.MintToken(policyName("holder", prefix), fmt.Sprintf(`
key_prefix %q {
  policy = "write"
}
session %q {
  policy = "write"
}
`, prefix+"/", agent.NodeName), 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// policyName makes a unique ACL policy name from a test prefix.
func policyName(role, prefix string) string {
	return role + "-" + strings.NewReplacer("/", "-", ".", "-").Replace(prefix)
}

// TestLockProtocol_raceHasExactlyOneWinner races two sessions for a fresh
// key many times: every round exactly one acquire answers true, and the
// winner's LockIndex is 1.
func TestLockProtocol_raceHasExactlyOneWinner(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	token := mintHolderToken(t, prefix)
	a, b := newProtoClient(t, token), newProtoClient(t, token)
	const rounds = 25
	wins := [2]int{}
	for round := range rounds {
		key := fmt.Sprintf("%s/round-%d", prefix, round)
		sessions := []string{a.createSession(protoSession{LockDelay: "0s"}), b.createSession(protoSession{LockDelay: "0s"})}
		won := race(t, key, []*protoClient{a, b}, sessions)
		if won[0] == won[1] {
			t.Fatalf("round %d: acquire answered %v and %v; want exactly one true", round, won[0], won[1])
		}
		winner := sessions[0]
		if won[1] {
			winner = sessions[1]
			wins[1]++
		} else {
			wins[0]++
		}
		pair := a.readKey(key)
		if pair == nil || pair.Session != winner || pair.LockIndex != 1 {
			t.Fatalf("round %d: key after the race = %+v; want held by the winner %s with LockIndex 1", round, pair, winner)
		}
		a.destroy(sessions[0])
		b.destroy(sessions[1])
	}
	t.Logf("%d races, exactly one winner each: contender A won %d, contender B won %d", rounds, wins[0], wins[1])
}

// TestLockProtocol_releaseSetsNoLockDelay checks that ?release= frees the
// key at once even with a long LockDelay, and that it keeps LockIndex and
// the value, while destroying the holder instead blocks the next acquire.
func TestLockProtocol_releaseSetsNoLockDelay(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/leader"
	token := mintHolderToken(t, prefix)
	a, b := newProtoClient(t, token), newProtoClient(t, token)
	sa := a.createSession(protoSession{LockDelay: "30s"})
	sb := b.createSession(protoSession{LockDelay: "30s"})

	if !a.acquire(key, sa, []byte("a")) {
		t.Fatal("first acquire of a fresh key answered false")
	}
	if !a.release(key, sa) {
		t.Fatal("release by the holder answered false")
	}
	pair := a.readKey(key)
	if pair.Session != "" || pair.LockIndex != 1 || string(pair.Value) != "a" {
		t.Fatalf("after release: %+v; want no session, LockIndex 1, value kept", pair)
	}
	if !b.acquire(key, sb, []byte("b")) {
		t.Fatal("acquire right after a release answered false: a release must set no lock-delay")
	}
	a.destroy(sa) // sa holds nothing now: no lock-delay anywhere
	if got := a.readKey(key); got.Session != sb || got.LockIndex != 2 {
		t.Fatalf("after hand-over: %+v; want held by %s with LockIndex 2", got, sb)
	}
	b.destroy(sb)
	sc := a.createSession(protoSession{LockDelay: "0s"})
	defer a.destroy(sc)
	if a.acquire(key, sc, nil) {
		t.Fatal("acquire right after destroying the holder (LockDelay 30s) answered true; want false during lock-delay")
	}
}
