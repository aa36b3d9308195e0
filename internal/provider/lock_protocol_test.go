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

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

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

// release is PUT /v1/kv/<key>?release=<session> with value as body. Like
// acquire, a release writes its body as the key's value (api.Lock.Unlock
// sends its value back): a release without a body empties the value.
func (c *protoClient) release(key, session string, value []byte) bool {
	c.t.Helper()
	out, _, err := c.do(http.MethodPut, "/v1/kv/"+key+"?release="+url.QueryEscape(session), value)
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
	if !a.release(key, sa, []byte("a")) {
		t.Fatal("release by the holder answered false")
	}
	pair := a.readKey(key)
	if pair.Session != "" || pair.LockIndex != 1 || string(pair.Value) != "a" {
		t.Fatalf("after a release that sends the value back: %+v; want no session, LockIndex 1, value kept", pair)
	}
	// A release writes its body: without one, the value is emptied.
	if !a.acquire(key, sa, []byte("a")) {
		t.Fatal("re-acquire of a free key by the same session answered false")
	}
	if !a.release(key, sa, nil) {
		t.Fatal("release by the holder answered false")
	}
	if pair := a.readKey(key); pair.Session != "" || pair.LockIndex != 2 || len(pair.Value) != 0 {
		t.Fatalf("after a release without a body: %+v; want no session, LockIndex 2 (re-acquiring a free key counts), empty value", pair)
	}
	if !b.acquire(key, sb, []byte("b")) {
		t.Fatal("acquire right after a release answered false: a release must set no lock-delay")
	}
	a.destroy(sa) // sa holds nothing now: no lock-delay anywhere
	if got := a.readKey(key); got.Session != sb || got.LockIndex != 3 {
		t.Fatalf("after hand-over: %+v; want held by %s with LockIndex 3", got, sb)
	}
	b.destroy(sb)
	sc := a.createSession(protoSession{LockDelay: "0s"})
	defer a.destroy(sc)
	if a.acquire(key, sc, nil) {
		t.Fatal("acquire right after destroying the holder (LockDelay 30s) answered true; want false during lock-delay")
	}
}

// TestAccLockDataSource_protocolScenario walks the whole lock protocol with
// two raw-HTTP contenders on one key and confirms every step through the
// consullock_lock data source, read with a token that may only read the key
// and the sessions on the node. LockIndex is followed across all steps: +1
// on each hand-over, unchanged otherwise, and back to 1 only when the key is
// re-created (TestAccLockDataSource_fencingTokenNeverGoesBack follows the
// fencing token through that).
func TestAccLockDataSource_protocolScenario(t *testing.T) {
	const (
		lockDelay = 3 * time.Second
		ttl       = 10 * time.Second
		poll      = 50 * time.Millisecond
	)
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/leader"
	holderToken := mintHolderToken(t, prefix)
	a, b := newProtoClient(t, holderToken), newProtoClient(t, holderToken)
	reader := mintTestToken(t, "reader", prefix, keyReadRule(key)+sessionReadRule())
	config := lockDSConfig(reader, key, "")

	var (
		// winner and loser of the first race, with their sessions.
		winC, loseC *protoClient
		winS, loseS string
		// what the key should show now.
		holder, value string
		names         = map[string]string{}
		// the LockIndex the previous step saw, and the key's create_index.
		lastIndex, lastCreate int64
		checkID               string
	)
	var sessions []string
	t.Cleanup(func() {
		for _, s := range sessions {
			_, _, _ = a.do(http.MethodPut, "/v1/session/destroy/"+s, nil)
		}
	})
	newSession := func(c *protoClient, s protoSession) string {
		id := c.createSession(s)
		sessions = append(sessions, id)
		names[id] = s.Name
		return id
	}

	// lockIndex checks LockIndex against the previous step's.
	lockIndex := func(delta int64) statecheck.StateCheck {
		return lockDSCheck("lock_index", knownvalue.Int64Func(func(v int64) error {
			if v < lastIndex {
				return fmt.Errorf("lock_index moved backward: %d after %d", v, lastIndex)
			}
			if v != lastIndex+delta {
				return fmt.Errorf("lock_index %d after %d; want +%d", v, lastIndex, delta)
			}
			lastIndex = v
			return nil
		}))
	}
	heldBy := func(behavior, lockDelay string) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			lockDSCheck("exists", knownvalue.Bool(true)),
			lockDSCheck("held", knownvalue.Bool(true)),
			lockDSCheck("session", stringIs(func() string { return holder })),
			lockDSCheck("node", knownvalue.StringExact(agent.NodeName)),
			lockDSCheck("value", stringIs(func() string { return value })),
			lockDSCheck("session_name", stringIs(func() string { return names[holder] })),
			lockDSCheck("session_behavior", knownvalue.StringExact(behavior)),
			lockDSCheck("session_lock_delay", knownvalue.StringExact(lockDelay)),
			lockDSCheck("flags", knownvalue.StringExact("0x0000000000000000")),
		}
	}
	free := func() []statecheck.StateCheck {
		return concat([]statecheck.StateCheck{
			lockDSCheck("exists", knownvalue.Bool(true)),
			lockDSCheck("held", knownvalue.Bool(false)),
			lockDSCheck("value", stringIs(func() string { return value })),
		}, lockDSNull(sessionAttrs...))
	}
	// waitReleased polls until the key has no session and returns when.
	waitReleased := func(limit time.Duration) time.Time {
		deadline := time.Now().Add(limit)
		for {
			pair := a.readKey(key)
			if pair == nil || pair.Session == "" {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("key %s still held by %s after %s", key, pair.Session, limit)
			}
			time.Sleep(poll)
		}
	}
	var ttlStart time.Time

	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// Two sessions race with ?acquire=: exactly one gets true.
				PreConfig: func() {
					sa := newSession(a, protoSession{Name: "contender-a", LockDelay: lockDelay.String()})
					sb := newSession(b, protoSession{Name: "contender-b", LockDelay: lockDelay.String()})
					won := race(t, key, []*protoClient{a, b}, []string{sa, sb})
					if won[0] == won[1] {
						t.Fatalf("race: acquire answered %v and %v; want exactly one true", won[0], won[1])
					}
					winC, winS, loseC, loseS = a, sa, b, sb
					if won[1] {
						winC, winS, loseC, loseS = b, sb, a, sa
					}
					holder, value = winS, "contender-"+winS
					t.Logf("race: %s won, %s lost", names[winS], names[loseS])
				},
				Config: config,
				ConfigStateChecks: concat(heldBy("release", "3s"), []statecheck.StateCheck{
					lockIndex(1),
					lockDSCheck("session_ttl", knownvalue.Null()),
					lockDSCheck("session_node_checks", stringList("serfHealth")),
					lockDSCheck("session_service_checks", stringList()),
					lockDSCheck("create_index", knownvalue.Int64Func(func(v int64) error { lastCreate = v; return nil })),
				}),
			},
			{
				// The loser keeps getting false; the holder re-acquiring
				// gets true and LockIndex stays.
				PreConfig: func() {
					if loseC.acquire(key, loseS, []byte("loser")) {
						t.Fatal("the loser acquired a held key")
					}
					value = "renewed-by-" + winS
					if !winC.acquire(key, winS, []byte(value)) {
						t.Fatal("the holder's re-acquire answered false")
					}
				},
				Config:            config,
				ConfigStateChecks: concat(heldBy("release", "3s"), []statecheck.StateCheck{lockIndex(0)}),
			},
			{
				// ?release= frees the key at once; value and LockIndex stay.
				PreConfig: func() {
					// Send the value back, as api.Lock.Unlock does: a
					// release writes its body as the value.
					if !winC.release(key, winS, []byte(value)) {
						t.Fatal("release by the holder answered false")
					}
				},
				Config:            config,
				ConfigStateChecks: concat(free(), []statecheck.StateCheck{lockIndex(0)}),
			},
			{
				// A release sets no lock-delay: the other session's first
				// acquire succeeds, and LockIndex counts the hand-over.
				PreConfig: func() {
					value = "taken-over-by-" + loseS
					if !loseC.acquire(key, loseS, []byte(value)) {
						t.Fatal("first acquire after a release answered false: a release must not set a lock-delay")
					}
					holder = loseS
				},
				Config:            config,
				ConfigStateChecks: concat(heldBy("release", "3s"), []statecheck.StateCheck{lockIndex(1)}),
			},
			{
				// Destroying the holder's session puts the key under its
				// LockDelay: acquires answer false until it has passed.
				PreConfig: func() {
					destroyed := time.Now()
					loseC.destroy(loseS)
					refused := 0
					value = "after-lock-delay-" + winS
					for !winC.acquire(key, winS, []byte(value)) {
						refused++
						if time.Since(destroyed) > lockDelay+10*time.Second {
							t.Fatalf("key still refused %s after destroying its holder (LockDelay %s)", time.Since(destroyed), lockDelay)
						}
						time.Sleep(poll)
					}
					measured := time.Since(destroyed)
					t.Logf("MEASURED lock-delay: configured %s, first successful acquire %s after destroying the holder's session (%d acquires refused, polled every %s)",
						lockDelay, measured.Round(time.Millisecond), refused, poll)
					if refused == 0 || measured < lockDelay || measured >= lockDelay+2*time.Second {
						t.Fatalf("lock-delay measured %s with %d refusals; want >= %s and < %s", measured, refused, lockDelay, lockDelay+2*time.Second)
					}
					holder = winS
				},
				Config:            config,
				ConfigStateChecks: concat(heldBy("release", "3s"), []statecheck.StateCheck{lockIndex(1)}),
			},
			{
				// Hand over to a session with behavior delete.
				PreConfig: func() {
					if !winC.release(key, winS, nil) {
						t.Fatal("release answered false")
					}
					sd := newSession(a, protoSession{Name: "deleter", LockDelay: "0s", Behavior: "delete"})
					value = "held-by-deleter"
					if !a.acquire(key, sd, []byte(value)) {
						t.Fatal("acquire after release answered false")
					}
					holder = sd
				},
				Config:            config,
				ConfigStateChecks: concat(heldBy("delete", "0s"), []statecheck.StateCheck{lockIndex(1)}),
			},
			{
				// Invalidating a behavior=delete session removes the key.
				PreConfig: func() {
					a.destroy(holder)
					if pair := a.readKey(key); pair != nil {
						t.Fatalf("key still exists after its behavior=delete holder ended: %+v", pair)
					}
				},
				Config: config,
				ConfigStateChecks: concat([]statecheck.StateCheck{
					lockDSCheck("exists", knownvalue.Bool(false)),
					lockDSCheck("held", knownvalue.Bool(false)),
				}, lockDSNull(sessionAttrs...), lockDSNull("value", "lock_index", "create_index", "modify_index", "flags")),
			},
			{
				// A TTL session acquires the re-created key: LockIndex starts
				// again at 1, and create_index shows the key is new.
				PreConfig: func() {
					ttlStart = time.Now()
					st := newSession(a, protoSession{Name: "ttl-holder", TTL: ttl.String(), LockDelay: "0s"})
					value = "held-with-ttl"
					if !a.acquire(key, st, []byte(value)) {
						t.Fatal("acquire of the re-created key answered false")
					}
					holder = st
					lastIndex = 0
				},
				Config: config,
				ConfigStateChecks: concat(heldBy("release", "0s"), []statecheck.StateCheck{
					lockIndex(1),
					lockDSCheck("session_ttl", knownvalue.StringExact("10s")),
					lockDSCheck("create_index", knownvalue.Int64Func(func(v int64) error {
						if v <= lastCreate {
							return fmt.Errorf("create_index %d of the re-created key is not above %d", v, lastCreate)
						}
						return nil
					})),
				}),
			},
			{
				// Not renewed, the TTL session is invalidated within 2 x TTL
				// and the key released.
				PreConfig: func() {
					released := waitReleased(2*ttl + 15*time.Second)
					measured := released.Sub(ttlStart)
					t.Logf("MEASURED ttl-invalidation: TTL %s, key released %s after the session was created and never renewed (server bound 2 x TTL = %s; polled every %s)",
						ttl, measured.Round(time.Millisecond), 2*ttl, poll)
					if measured < ttl || measured > 2*ttl+5*time.Second {
						t.Fatalf("TTL invalidation after %s; want between %s and 2 x TTL + 5s slack", measured, ttl)
					}
				},
				Config:            config,
				ConfigStateChecks: concat(free(), []statecheck.StateCheck{lockIndex(0)}),
			},
			{
				// A session bound to a health check acquires ...
				PreConfig: func() {
					checkID = "lockproto-" + strings.ReplaceAll(policyName("x", prefix), "x-", "")
					mgmt := agent.Client().Agent()
					if err := mgmt.CheckRegister(&api.AgentCheckRegistration{
						ID: checkID, Name: "job guard", AgentServiceCheck: api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing},
					}); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = mgmt.CheckDeregister(checkID) })
					waitCatalogPassing(t, checkID)
					sc := newSession(a, protoSession{Name: "check-bound", LockDelay: "0s", Checks: []string{"serfHealth", checkID}})
					value = "held-while-healthy"
					if !a.acquire(key, sc, []byte(value)) {
						t.Fatal("acquire by the check-bound session answered false")
					}
					holder = sc
				},
				Config: config,
				ConfigStateChecks: concat(heldBy("release", "0s"), []statecheck.StateCheck{
					lockIndex(1),
					lockDSCheck("session_node_checks", stringIs2("serfHealth", func() string { return checkID })),
				}),
			},
			{
				// ... and loses the lock when the check goes critical.
				PreConfig: func() {
					failed := time.Now()
					if err := agent.Client().Agent().FailTTL(checkID, "simulated failure"); err != nil {
						t.Fatal(err)
					}
					released := waitReleased(15 * time.Second)
					t.Logf("MEASURED check-invalidation: key released %s after the bound check was set critical",
						released.Sub(failed).Round(time.Millisecond))
					entry, _, err := agent.Client().Session().Info(holder, &api.QueryOptions{RequireConsistent: true})
					if err != nil || entry != nil {
						t.Fatalf("session %s after its check went critical: %+v (%v); want it invalidated", holder, entry, err)
					}
				},
				Config:            config,
				ConfigStateChecks: concat(free(), []statecheck.StateCheck{lockIndex(0)}),
			},
		},
	})
}

// stringIs2 checks a two-element string list whose second element is known
// only when the step runs.
func stringIs2(first string, second func() string) knownvalue.Check {
	return knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(first), stringIs(second)})
}
