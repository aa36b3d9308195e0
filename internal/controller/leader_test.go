package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// outageProxy forwards HTTP to an agent and fails on demand: "down" drops
// every connection at once and answers none, as a stopped agent's port
// does; "renewals" answers session renewals with Consul's HTTP 500 "No
// cluster leader" and passes everything else (the session cannot be
// renewed while reads work).
type outageProxy struct {
	srv *httptest.Server
	rp  *httputil.ReverseProxy

	mu   sync.Mutex
	mode string
}

func newOutageProxy(t *testing.T, a *testenv.Agent) *outageProxy {
	t.Helper()
	target, err := url.Parse(a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{rp: httputil.NewSingleHostReverseProxy(target), mode: "pass"}
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *outageProxy) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *outageProxy) set(mode string) {
	p.mu.Lock()
	p.mode = mode
	p.mu.Unlock()
	if mode == "down" {
		p.srv.CloseClientConnections()
	}
}

func (p *outageProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	switch {
	case mode == "down":
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		http.Error(w, "down", http.StatusBadGateway)
	case mode == "renewals" && strings.HasPrefix(r.URL.Path, "/v1/session/renew/"):
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// Issue 12, section 4 (controller HA): a leader whose session cannot be
// renewed for longer than its TTL while the process keeps running must
// become leader again and act again once Consul answers: first when only
// renewals fail (reads work), then when the agent is down altogether and
// comes back restarted. Before the fix the first outage left it leader of
// a re-won key that never acted again (acting stayed false), holding the
// key so that no other replica could act either.
func TestLeader_actsAgainAfterItsSessionCouldNotBeRenewedForLongerThanTheTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	own, err := testenv.Start(ctx, testenv.Options{NodeName: "consullock-leader-outage"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	h := newHarness(t, own)
	declare := func() lockmodel.Lock {
		return h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	}
	l := declare()
	proxy := newOutageProxy(t, own)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true, addr: proxy.addr()})
	actsAgain := func(after string) {
		t.Helper()
		eventually(t, 90*time.Second, func() error {
			if !c.IsLeader() {
				return fmt.Errorf("%s: not leader again", after)
			}
			if p := h.get(l.Key); p == nil || p.Flags != lockmodel.LockFlagValue {
				return fmt.Errorf("%s: leader, but the deleted lock key was not created again: the controller does not act", after)
			}
			return nil
		})
	}
	actsAgain("at start")

	// 1. Renewals fail for two TTLs; reads keep working.
	proxy.set("renewals")
	stepped := steppedDown(c, 2*LeaderSessionTTL)
	proxy.set("pass")
	if !stepped {
		t.Fatal("failing renewals for two TTLs did not end the leadership; the test proves nothing")
	}
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	actsAgain("after renewals failed for two TTLs")

	// 2. The agent is down for two TTLs and comes back restarted (a dev
	// agent loses its state).
	proxy.set("down")
	stepped = steppedDown(c, 2*LeaderSessionTTL)
	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	h.api = own.Client()
	declare()
	proxy.set("pass")
	actsAgain("after the agent was down for two TTLs and restarted")
	if !stepped {
		t.Error("the agent outage did not end the leadership; the test proved nothing")
	}
}

// steppedDown watches c for d and reports whether it stopped leading at
// some point. It polls: leadership changes raise no event a test can wait
// on.
func steppedDown(c *running, d time.Duration) bool {
	stepped := false
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		stepped = stepped || !c.IsLeader()
	}
	return stepped
}

// The leader profile satisfies the stop rule: a leader cut off from its
// agent stops acting before another replica can take over.
func TestLeader_profileStopsBeforeATakeOver(t *testing.T) {
	r := lockmodel.NewStopRule(leaderProfile, LeaderGrace)
	if !r.Feasible() {
		t.Fatalf("leader profile: %s", r.Verdict())
	}
	if r.DeadBy()+r.Margin > r.TakeOverAfter() {
		t.Fatalf("a cut-off leader stops acting %s after its last renewal; another may lead from %s", r.DeadBy(), r.TakeOverAfter())
	}
}

// The leader holds its key with a session as leaderProfile declares
// (through the public library), writes who leads and in which mode into
// the key, logs the acquisition's fencing token, and on shutdown releases
// the key (no lock-delay for the next replica) and destroys the session.
func TestLeader_holdsItsKeyAsTheLeaderProfileSays(t *testing.T) {
	h := newHarness(t, agent)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true, configure: func(cfg *Config) { cfg.Identity = "replica-a" }})
	var pair *api.KVPair
	eventually(t, 30*time.Second, func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader")
		}
		if pair = h.get(c.LeaderKey()); pair == nil || pair.Session == "" {
			return fmt.Errorf("the leader key %s is not held", c.LeaderKey())
		}
		return nil
	})
	var value map[string]any
	if err := json.Unmarshal(pair.Value, &value); err != nil {
		t.Fatalf("leader value %q: %v", pair.Value, err)
	}
	if want := map[string]any{"identity": "replica-a", "mode": string(compliance.ModeRepair)}; !reflect.DeepEqual(value, want) {
		t.Errorf("leader value %v, want %v", value, want)
	}
	if pair.Flags != lockmodel.LockFlagValue {
		t.Errorf("leader key flags %#x, want api.Lock's %#x", pair.Flags, lockmodel.LockFlagValue)
	}
	s, _, err := h.api.Session().Info(pair.Session, nil)
	if err != nil || s == nil {
		t.Fatalf("the leader's session %s: %v, %v", pair.Session, s, err)
	}
	if s.Name != "consullock-controller" || s.TTL != leaderProfile.TTL.String() || s.LockDelay != leaderProfile.LockDelay ||
		s.Behavior != string(lockmodel.BehaviorRelease) {
		t.Errorf("leader session name %q, TTL %s, lock-delay %s, behavior %s; want consullock-controller, %s, %s, release",
			s.Name, s.TTL, s.LockDelay, s.Behavior, leaderProfile.TTL, leaderProfile.LockDelay)
	}
	if len(c.logs.lines(`"msg":"became leader"`, `"session":"`+pair.Session+`"`, fmt.Sprintf(`"fencing_token":%d`, pair.ModifyIndex))) == 0 {
		t.Errorf("no \"became leader\" line with session %s and fencing_token %d:\n%s", pair.Session, pair.ModifyIndex, c.logs.String())
	}

	c.stop()
	if len(c.logs.lines(`"msg":"released leadership"`)) == 0 {
		t.Error("the leader did not log releasing its leadership")
	}
	if p := h.get(c.LeaderKey()); p == nil || p.Session != "" {
		t.Errorf("after shutdown the leader key is %+v; want it released (present, no session)", p)
	}
	if s, _, err := h.api.Session().Info(pair.Session, nil); err != nil || s != nil {
		t.Errorf("after shutdown the leader's session is %v (%v); want it destroyed", s, err)
	}
}
