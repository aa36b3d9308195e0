package provider

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

const lockDSAddr = "data.consullock_lock.test"

// lockDSConfig reads key through the data source with token configured
// explicitly in the provider block, so the test proves what that token
// allows and not what the environment's management token does.
func lockDSConfig(token, key, extra string) string {
	return fmt.Sprintf(`
provider "consullock" {
  token = %q
}

data "consullock_lock" "test" {
  key = %q
%s}
`, token, key, extra)
}

// Least-privilege rule snippets for reader tokens.
func keyReadRule(key string) string {
	return fmt.Sprintf("key %q {\n  policy = \"read\"\n}\n", key)
}

func keyPrefixReadRule(prefix string) string {
	return fmt.Sprintf("key_prefix %q {\n  policy = \"read\"\n}\n", prefix)
}

// sessionReadRule allows reading sessions on the agent's node: session
// rules match node names, not session names.
func sessionReadRule() string {
	return fmt.Sprintf("session %q {\n  policy = \"read\"\n}\n", agent.NodeName)
}

func mintTestToken(t *testing.T, role, prefix, rules string) string {
	t.Helper()
	tok, err := agent.MintToken(policyName(role, prefix), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

func lockDSCheck(attr string, check knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(lockDSAddr, tfjsonpath.New(attr), check)
}

func lockDSNull(attrs ...string) []statecheck.StateCheck {
	checks := make([]statecheck.StateCheck, 0, len(attrs))
	for _, a := range attrs {
		checks = append(checks, lockDSCheck(a, knownvalue.Null()))
	}
	return checks
}

// sessionAttrs are the attributes that describe the holding session.
var sessionAttrs = []string{
	"session", "node", "session_name", "session_ttl", "session_lock_delay", "session_behavior",
	"session_node_checks", "session_service_checks",
}

// stringIs compares with a value known only when the step runs.
func stringIs(want func() string) knownvalue.Check {
	return knownvalue.StringFunc(func(v string) error {
		if w := want(); v != w {
			return fmt.Errorf("got %q, want %q", v, w)
		}
		return nil
	})
}

func stringList(items ...string) knownvalue.Check {
	checks := make([]knownvalue.Check, 0, len(items))
	for _, s := range items {
		checks = append(checks, knownvalue.StringExact(s))
	}
	return knownvalue.ListExact(checks)
}

func concat(groups ...[]statecheck.StateCheck) []statecheck.StateCheck {
	return slices.Concat(groups...)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestAccLockDataSource_absentKeyIsNotAnError(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/.lock"
	reader := mintTestToken(t, "reader", prefix, keyReadRule(key)+sessionReadRule())
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: lockDSConfig(reader, key, ""),
			ConfigStateChecks: concat([]statecheck.StateCheck{
				lockDSCheck("key", knownvalue.StringExact(key)),
				lockDSCheck("consistent", knownvalue.Bool(true)),
				lockDSCheck("exists", knownvalue.Bool(false)),
				lockDSCheck("held", knownvalue.Bool(false)),
				lockDSCheck("known_leader", knownvalue.Bool(true)),
				lockDSCheck("last_contact", knownvalue.StringExact("0s")),
			}, lockDSNull(sessionAttrs...), lockDSNull("value", "value_base64", "lock_index", "fencing_token", "modify_index", "create_index",
				"flags", "limit", "holders")),
		}},
	})
}

// TestAccLockDataSource_apiLockHolder reads a mutex held through Consul's
// own api.Lock with a token that may only read the key and the sessions on
// the holder's node.
func TestAccLockDataSource_apiLockHolder(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	key := lockmodel.DefaultLockKey(prefix)
	holderValue, err := json.Marshal(lockmodel.HolderValue{
		Node: "worker-1", PID: 4242, Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Lock: "nightly-report",
	})
	if err != nil {
		t.Fatal(err)
	}
	holder := agent.ClientWithToken(mintHolderToken(t, prefix))
	lock, err := holder.LockOpts(&api.LockOptions{
		Key: key, Value: holderValue, SessionName: "nightly-report", SessionTTL: "15s", LockDelay: 5 * time.Second, LockTryOnce: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if leaderCh, err := lock.Lock(nil); err != nil || leaderCh == nil {
		t.Fatalf("api.Lock did not acquire a fresh key: %v", err)
	}
	t.Cleanup(func() {
		_ = lock.Unlock()
		_ = lock.Destroy()
	})
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("api.Lock key after Lock: %+v, %v", pair, err)
	}

	reader := mintTestToken(t, "reader", prefix, keyReadRule(key)+sessionReadRule())
	held := func(consistent bool) []statecheck.StateCheck {
		return concat([]statecheck.StateCheck{
			lockDSCheck("key", knownvalue.StringExact(key)),
			lockDSCheck("consistent", knownvalue.Bool(consistent)),
			lockDSCheck("exists", knownvalue.Bool(true)),
			lockDSCheck("held", knownvalue.Bool(true)),
			lockDSCheck("session", knownvalue.StringExact(pair.Session)),
			lockDSCheck("node", knownvalue.StringExact(agent.NodeName)),
			lockDSCheck("value", knownvalue.StringExact(string(holderValue))),
			lockDSCheck("value_base64", knownvalue.StringExact(b64(string(holderValue)))),
			lockDSCheck("lock_index", knownvalue.Int64Exact(1)),
			lockDSCheck("modify_index", knownvalue.Int64Exact(int64(pair.ModifyIndex))),
			lockDSCheck("fencing_token", knownvalue.Int64Exact(int64(pair.ModifyIndex))),
			lockDSCheck("create_index", knownvalue.Int64Exact(int64(pair.CreateIndex))),
			lockDSCheck("flags", knownvalue.StringExact("0x2ddccbc058a50c18")),
			lockDSCheck("session_name", knownvalue.StringExact("nightly-report")),
			lockDSCheck("session_ttl", knownvalue.StringExact("15s")),
			lockDSCheck("session_lock_delay", knownvalue.StringExact("5s")),
			lockDSCheck("session_behavior", knownvalue.StringExact("release")),
			lockDSCheck("session_node_checks", stringList("serfHealth")),
			lockDSCheck("session_service_checks", stringList()),
			lockDSCheck("known_leader", knownvalue.Bool(true)),
			lockDSCheck("last_contact", knownvalue.StringExact("0s")),
		}, lockDSNull("limit", "holders"))
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: lockDSConfig(reader, key, ""), ConfigStateChecks: held(true)},
			{Config: lockDSConfig(reader, key, "  consistent = false\n"), ConfigStateChecks: held(false)},
		},
	})
}

// TestAccLockDataSource_rawSessionDetails covers the session attributes a
// raw ?acquire= holder can set: extra node and service checks, behavior
// delete, LockDelay 0 and a binary value.
func TestAccLockDataSource_rawSessionDetails(t *testing.T) {
	// Pause for the parallel phase before the session's TTL starts: a
	// ParallelTest after it can resume long after the session expired.
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/leader"
	suffix := strings.ReplaceAll(policyName("x", prefix), "x-", "")
	nodeCheck := "lockds-node-" + suffix
	serviceID := "lockds-svc-" + suffix
	mgmt := agent.Client().Agent()
	if err := mgmt.CheckRegister(&api.AgentCheckRegistration{
		ID: nodeCheck, Name: "lock guard", AgentServiceCheck: api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.CheckDeregister(nodeCheck) })
	if err := mgmt.ServiceRegister(&api.AgentServiceRegistration{
		ID: serviceID, Name: serviceID, Check: &api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.ServiceDeregister(serviceID) })
	serviceCheck := "service:" + serviceID
	waitCatalogPassing(t, nodeCheck, serviceCheck)

	holder := newProtoClient(t, mintHolderToken(t, prefix))
	session := holder.createSession(protoSession{
		Name: "raw-holder", TTL: "120s", LockDelay: "0s", Behavior: "delete",
		NodeChecks: []string{"serfHealth", nodeCheck}, ServiceChecks: []protoServiceCheck{{ID: serviceCheck}},
	})
	t.Cleanup(func() { _, _, _ = holder.do(http.MethodPut, "/v1/session/destroy/"+session, nil) })
	binary := []byte{0xff, 0x00, 0x01}
	if !holder.acquire(key, session, binary) {
		t.Fatal("acquire of a fresh key answered false")
	}

	reader := mintTestToken(t, "reader", prefix, keyReadRule(key)+sessionReadRule())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: lockDSConfig(reader, key, ""),
			ConfigStateChecks: concat([]statecheck.StateCheck{
				lockDSCheck("held", knownvalue.Bool(true)),
				lockDSCheck("session", knownvalue.StringExact(session)),
				lockDSCheck("node", knownvalue.StringExact(agent.NodeName)),
				lockDSCheck("value", knownvalue.Null()),
				lockDSCheck("value_base64", knownvalue.StringExact(base64.StdEncoding.EncodeToString(binary))),
				lockDSCheck("flags", knownvalue.StringExact("0x0000000000000000")),
				lockDSCheck("session_name", knownvalue.StringExact("raw-holder")),
				lockDSCheck("session_ttl", knownvalue.StringExact("2m0s")),
				lockDSCheck("session_lock_delay", knownvalue.StringExact("0s")),
				lockDSCheck("session_behavior", knownvalue.StringExact("delete")),
				lockDSCheck("session_node_checks", stringList("serfHealth", nodeCheck)),
				lockDSCheck("session_service_checks", stringList(serviceCheck)),
			}, lockDSNull("limit", "holders")),
		}},
	})
}

// waitCatalogPassing waits until the agent has synced the given checks to
// the catalog as passing: a session can only be bound to passing checks.
func waitCatalogPassing(t *testing.T, checkIDs ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		checks, _, err := agent.Client().Health().Node(agent.NodeName, &api.QueryOptions{RequireConsistent: true})
		passing := 0
		for _, c := range checks {
			if slices.Contains(checkIDs, c.CheckID) && c.Status == api.HealthPassing {
				passing++
			}
		}
		if err == nil && passing == len(checkIDs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("checks %v not passing in the catalog after 15s (err %v)", checkIDs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAccLockDataSource_semaphoreHolders reads an api.Semaphore (what
// `consul lock -n 2` uses) held by two contenders, then by one.
func TestAccLockDataSource_semaphoreHolders(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	key := lockmodel.DefaultLockKey(prefix)
	holderClient := agent.ClientWithToken(mintHolderToken(t, prefix))
	acquire := func(value string) *api.Semaphore {
		sem, err := holderClient.SemaphoreOpts(&api.SemaphoreOptions{
			Prefix: prefix, Limit: 2, Value: []byte(value), SessionName: "sem-" + value, SemaphoreTryOnce: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if ch, err := sem.Acquire(nil); err != nil || ch == nil {
			t.Fatalf("api.Semaphore %s did not acquire a slot: %v", value, err)
		}
		t.Cleanup(func() { _ = sem.Release() })
		return sem
	}
	acquire("worker-a")
	semB := acquire("worker-b")

	// The contender keys <prefix>/<session> tell which session is which.
	pairs, _, err := agent.Client().KV().List(prefix+"/", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		session, value string
		token          uint64
	}
	var holders []holder
	for _, p := range pairs {
		if p.Session != "" {
			holders = append(holders, holder{p.Session, string(p.Value), p.ModifyIndex})
		}
	}
	slices.SortFunc(holders, func(a, b holder) int { return strings.Compare(a.session, b.session) })
	if len(holders) != 2 {
		t.Fatalf("want 2 contender keys with a session, got %+v", holders)
	}
	holderChecks := func(hs []holder) knownvalue.Check {
		checks := make([]knownvalue.Check, 0, len(hs))
		for _, h := range hs {
			checks = append(checks, knownvalue.ObjectExact(map[string]knownvalue.Check{
				"session":       knownvalue.StringExact(h.session),
				"node":          knownvalue.StringExact(agent.NodeName),
				"value":         knownvalue.StringExact(h.value),
				"value_base64":  knownvalue.StringExact(b64(h.value)),
				"lock_index":    knownvalue.Int64Exact(1),
				"fencing_token": knownvalue.Int64Exact(int64(h.token)),
			}))
		}
		return knownvalue.ListExact(checks)
	}
	var remaining []holder
	tableHolds := func(hs *[]holder) knownvalue.Check {
		return knownvalue.StringFunc(func(v string) error {
			var state lockmodel.SemaphoreState
			if err := json.Unmarshal([]byte(v), &state); err != nil {
				return err
			}
			if state.Limit != 2 || len(state.Holders) != len(*hs) {
				return fmt.Errorf("holder table %s: want limit 2 and %d holders", v, len(*hs))
			}
			return nil
		})
	}

	reader := mintTestToken(t, "reader", prefix, keyPrefixReadRule(prefix+"/")+sessionReadRule())
	lockOnly := mintTestToken(t, "lockonly", prefix, keyReadRule(key)+sessionReadRule())
	common := func(hs *[]holder) []statecheck.StateCheck {
		return concat([]statecheck.StateCheck{
			lockDSCheck("exists", knownvalue.Bool(true)),
			lockDSCheck("flags", knownvalue.StringExact("0xe0f69a2baa414de0")),
			lockDSCheck("limit", knownvalue.Int64Exact(2)),
			lockDSCheck("value", tableHolds(hs)),
			lockDSCheck("lock_index", knownvalue.Int64Exact(0)),
			lockDSCheck("known_leader", knownvalue.Bool(true)),
		}, lockDSNull(sessionAttrs...))
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: lockDSConfig(reader, key, ""),
				ConfigStateChecks: concat(common(&holders), []statecheck.StateCheck{
					lockDSCheck("held", knownvalue.Bool(true)),
					lockDSCheck("holders", holderChecks(holders)),
					lockDSCheck("fencing_token", knownvalue.Int64Exact(int64(max(holders[0].token, holders[1].token)))),
				}),
			},
			{
				PreConfig: func() {
					if err := semB.Release(); err != nil {
						t.Fatal(err)
					}
					for _, h := range holders {
						if h.value != "worker-b" {
							remaining = append(remaining, h)
						}
					}
				},
				Config: lockDSConfig(reader, key, ""),
				ConfigStateChecks: concat(common(&remaining), []statecheck.StateCheck{
					lockDSCheck("held", knownvalue.Bool(true)),
					lockDSCheck("holders", knownvalue.ListSizeExact(1)),
					lockDSCheck("fencing_token", knownvalue.Int64Func(func(v int64) error {
						if len(remaining) != 1 || v != int64(remaining[0].token) {
							return fmt.Errorf("fencing_token %d; want the remaining holder's %+v", v, remaining)
						}
						return nil
					})),
					lockDSCheck("holders", knownvalue.ListPartial(map[int]knownvalue.Check{0: knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"value": knownvalue.StringExact("worker-a"),
						"node":  knownvalue.StringExact(agent.NodeName),
					})})),
				}),
			},
			{
				// Without key_prefix read the contender keys are hidden:
				// a clear error, never "no holders".
				Config:      lockDSConfig(lockOnly, key, ""),
				ExpectError: regexp.MustCompile(`key:read`),
			},
		},
	})
}

// TestAccLockDataSource_tokenWithoutPermissionGetsClearError shows that a
// token with less than key read on the key and session read on the holder's
// node gets an error naming the missing permission.
func TestAccLockDataSource_tokenWithoutPermissionGetsClearError(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/leader"
	holder := newProtoClient(t, mintHolderToken(t, prefix))
	session := holder.createSession(protoSession{Name: "holder", LockDelay: "0s"})
	t.Cleanup(func() { _, _, _ = holder.do(http.MethodPut, "/v1/session/destroy/"+session, nil) })
	if !holder.acquire(key, session, []byte("x")) {
		t.Fatal("acquire of a fresh key answered false")
	}
	noKeyRead := mintTestToken(t, "nokey", prefix, sessionReadRule())
	noSessionRead := mintTestToken(t, "nosession", prefix, keyReadRule(key))
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: lockDSConfig(noKeyRead, key, ""), ExpectError: regexp.MustCompile(`(?s)Cannot Read Lock.*key:read`)},
			{Config: lockDSConfig(noSessionRead, key, ""), ExpectError: regexp.MustCompile(`(?s)Cannot Read Lock.*session:read`)},
		},
	})
}

// fakeLeaderlessConsul answers like a Consul server that has lost its
// leader: ?consistent reads fail with "No cluster leader", ?stale reads are
// served with X-Consul-KnownLeader: false. A single dev agent cannot lose
// its leader, so this is the one test against a stand-in.
type fakeLeaderlessConsul struct {
	mu       sync.Mutex
	requests []string
}

const (
	fakeKey     = "jobs/nightly/.lock"
	fakeSession = "6b6a2f8e-3c1d-4b7e-9a55-0c2b1d9e7f10"
)

func (f *fakeLeaderlessConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.URL.Path+"?"+r.URL.RawQuery)
	f.mu.Unlock()
	q := r.URL.Query()
	writeJSON := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Consul-Index", "42")
		w.Header().Set("X-Consul-KnownLeader", "false")
		w.Header().Set("X-Consul-LastContact", "12000")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.URL.Path == "/v1/status/leader":
		writeJSON("")
	case r.URL.Path == "/v1/acl/token/self":
		writeJSON(map[string]any{"AccessorID": "5e4c3b2a-1d0f-4e9d-8c7b-6a5f4e3d2c1b", "Description": "fake"})
	case q.Has("consistent"):
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
	case r.URL.Path == "/v1/kv/"+fakeKey && q.Has("stale"):
		writeJSON([]map[string]any{{
			"Key": fakeKey, "Session": fakeSession, "LockIndex": 7, "ModifyIndex": 40, "CreateIndex": 10,
			"Flags": lockmodel.LockFlagValue, "Value": b64("stale-holder"),
		}})
	case r.URL.Path == "/v1/session/info/"+fakeSession && q.Has("stale"):
		writeJSON([]map[string]any{{
			"ID": fakeSession, "Name": "nightly", "Node": "node-b", "LockDelay": int64(15 * time.Second), "Behavior": "release",
			"TTL": "30s", "NodeChecks": []string{"serfHealth"}, "ServiceChecks": nil, "CreateIndex": 9,
		}})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeLeaderlessConsul) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// TestAccLockDataSource_consistentReadWithoutLeaderFails: with no leader a
// consistent read is an error, never stale data; consistent = false serves
// the stale answer and says so through known_leader and last_contact. Each
// read costs one KV request and one session request.
func TestAccLockDataSource_consistentReadWithoutLeaderFails(t *testing.T) {
	fake := &fakeLeaderlessConsul{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	config := func(extra string) string {
		return fmt.Sprintf(`
provider "consullock" {
  address = %q
  token   = "7d7b1c0e-0000-4000-8000-000000000001"
  retry = {
    max_attempts = 2
    min_wait     = "10ms"
    max_wait     = "20ms"
  }
}

data "consullock_lock" "test" {
  key = %q
%s}
`, srv.URL, fakeKey, extra)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      config(""),
				ExpectError: regexp.MustCompile(`No Consul Leader For A Consistent\s+Read`),
			},
			{
				PreConfig: func() {
					for _, req := range fake.seen() {
						if strings.Contains(req, "stale") {
							t.Fatalf("a consistent read fell back to a stale request: %s", req)
						}
					}
				},
				Config: config("  consistent = false\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					lockDSCheck("consistent", knownvalue.Bool(false)),
					lockDSCheck("known_leader", knownvalue.Bool(false)),
					lockDSCheck("last_contact", knownvalue.StringExact("12s")),
					lockDSCheck("held", knownvalue.Bool(true)),
					lockDSCheck("session", knownvalue.StringExact(fakeSession)),
					lockDSCheck("node", knownvalue.StringExact("node-b")),
					lockDSCheck("value", knownvalue.StringExact("stale-holder")),
					lockDSCheck("lock_index", knownvalue.Int64Exact(7)),
					lockDSCheck("modify_index", knownvalue.Int64Exact(40)),
					lockDSCheck("fencing_token", knownvalue.Int64Exact(40)),
					lockDSCheck("create_index", knownvalue.Int64Exact(10)),
					lockDSCheck("flags", knownvalue.StringExact("0x2ddccbc058a50c18")),
					lockDSCheck("session_ttl", knownvalue.StringExact("30s")),
					lockDSCheck("session_lock_delay", knownvalue.StringExact("15s")),
				},
			},
		},
	})
	var kv, sessions, other int
	for _, req := range fake.seen() {
		switch {
		case strings.HasPrefix(req, "/v1/kv/"):
			kv++
		case strings.HasPrefix(req, "/v1/session/"):
			sessions++
		case strings.HasPrefix(req, "/v1/status/leader"), strings.HasPrefix(req, "/v1/acl/token/self"):
		default:
			other++
		}
	}
	staleKV := 0
	for _, req := range fake.seen() {
		if strings.HasPrefix(req, "/v1/kv/") && strings.Contains(req, "stale") {
			staleKV++
		}
	}
	if staleKV == 0 || sessions != staleKV || other != 0 {
		t.Errorf("requests: %d KV (%d stale), %d session, %d other; want one session read per stale KV read and nothing else:\n%s",
			kv, staleKV, sessions, other, strings.Join(fake.seen(), "\n"))
	}
	t.Logf("requests per held-lock read: 1 KV + 1 session (%d stale reads, %d session reads)", staleKV, sessions)
}

// TestAccLockDataSource_fencingTokenNeverGoesBack hands a mutex between two
// sessions through everything that sends LockIndex backwards: a deleted and
// re-created key (LockIndex starts again at 1) and a plain write (LockIndex
// 0). fencing_token must rise strictly at every hand-over and equal the
// Raft index of the acquisition, while lock_index reports Consul's
// LockIndex as it is.
func TestAccLockDataSource_fencingTokenNeverGoesBack(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	key := prefix + "/leader"
	holderToken := mintHolderToken(t, prefix)
	a, b := newProtoClient(t, holderToken), newProtoClient(t, holderToken)
	sa := a.createSession(protoSession{Name: "fence-a", LockDelay: "0s"})
	sb := b.createSession(protoSession{Name: "fence-b", LockDelay: "0s"})
	t.Cleanup(func() {
		_, _, _ = a.do(http.MethodPut, "/v1/session/destroy/"+sa, nil)
		_, _, _ = b.do(http.MethodPut, "/v1/session/destroy/"+sb, nil)
	})
	reader := mintTestToken(t, "reader", prefix, keyReadRule(key)+sessionReadRule())
	config := lockDSConfig(reader, key, "")

	var (
		acquiredAt uint64 // the key's ModifyIndex right after the acquisition
		lastToken  int64  // the token the previous step reported
		holder     string
	)
	// handTo releases the key if held, runs between (which may delete or
	// overwrite it), then has session s of c acquire it.
	handTo := func(c *protoClient, s string, between func()) func() {
		return func() {
			if pair := a.readKey(key); pair != nil && pair.Session != "" {
				if !a.release(key, pair.Session, []byte("released")) {
					t.Fatalf("release of %s by its holder %s answered false", key, pair.Session)
				}
			}
			if between != nil {
				between()
			}
			if !c.acquire(key, s, []byte("holder "+s)) {
				t.Fatalf("acquire of the free key %s by %s answered false", key, s)
			}
			pair := c.readKey(key)
			if pair == nil || pair.Session != s {
				t.Fatalf("key after acquire by %s: %+v", s, pair)
			}
			acquiredAt, holder = pair.ModifyIndex, s
		}
	}
	held := func(lockIndex int64) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			lockDSCheck("held", knownvalue.Bool(true)),
			lockDSCheck("session", stringIs(func() string { return holder })),
			lockDSCheck("lock_index", knownvalue.Int64Exact(lockIndex)),
			lockDSCheck("fencing_token", knownvalue.Int64Func(func(v int64) error {
				if v != int64(acquiredAt) {
					return fmt.Errorf("fencing_token %d; want the acquisition's index %d", v, acquiredAt)
				}
				if v <= lastToken {
					return fmt.Errorf("fencing_token %d after %d: it must rise at every hand-over", v, lastToken)
				}
				lastToken = v
				return nil
			})),
		}
	}
	deleteKey := func() {
		if _, _, err := a.do(http.MethodDelete, "/v1/kv/"+key, nil); err != nil {
			t.Fatal(err)
		}
	}
	plainWrite := func() {
		if _, _, err := a.do(http.MethodPut, "/v1/kv/"+key, []byte("plain write")); err != nil {
			t.Fatal(err)
		}
		if pair := a.readKey(key); pair == nil || pair.LockIndex != 0 {
			t.Fatalf("a plain write should reset LockIndex to 0: %+v", pair)
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{PreConfig: handTo(a, sa, nil), Config: config, ConfigStateChecks: held(1)},
			{PreConfig: handTo(b, sb, nil), Config: config, ConfigStateChecks: held(2)},
			{PreConfig: handTo(a, sa, nil), Config: config, ConfigStateChecks: held(3)},
			// Deleted (as `consul lock` does on exit) and re-created by
			// the next acquire: LockIndex starts again at 1.
			{PreConfig: handTo(b, sb, deleteKey), Config: config, ConfigStateChecks: held(1)},
			{PreConfig: handTo(a, sa, nil), Config: config, ConfigStateChecks: held(2)},
			// A plain write (a flag repair, a careless `consul kv put`)
			// resets LockIndex to 0; the next acquire makes it 1.
			{PreConfig: handTo(b, sb, plainWrite), Config: config, ConfigStateChecks: held(1)},
			// Unheld: no token.
			{
				PreConfig: func() {
					if !b.release(key, sb, nil) {
						t.Fatal("release answered false")
					}
				},
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					lockDSCheck("held", knownvalue.Bool(false)),
					lockDSCheck("lock_index", knownvalue.Int64Exact(1)),
					lockDSCheck("fencing_token", knownvalue.Null()),
				},
			},
		},
	})
}
