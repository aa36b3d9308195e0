package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// stallProxy stands between a controller and its agent and plays a frozen
// agent for chosen writes: a held write is answered to nobody until
// release, and is then sent to the agent whether or not the controller
// still waits for it, as an agent that resumes handles what sat in its
// socket. It can also refuse session creation (HTTP 500 "No cluster
// leader"), so that a replica cannot campaign again.
type stallProxy struct {
	srv    *httptest.Server
	rp     *httputil.ReverseProxy
	target *url.URL

	mu        sync.Mutex
	holdKey   string // a write of this key is held
	noSession bool
	held      []*heldWrite
	released  chan struct{}
}

// heldWrite is one write the proxy holds.
type heldWrite struct {
	method, uri string
	header      http.Header
	body        []byte
	gaveUp      chan struct{} // closed when the controller stopped waiting
	status      int           // the agent's answer once released
	answer      string
}

func newStallProxy(t *testing.T, a *testenv.Agent) *stallProxy {
	t.Helper()
	target, err := url.Parse(a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{rp: httputil.NewSingleHostReverseProxy(target), target: target, released: make(chan struct{})}
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() { p.release(); p.srv.Close() })
	return p
}

func (p *stallProxy) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *stallProxy) hold(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdKey = key
}

func (p *stallProxy) refuseSessions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noSession = true
}

// release sends every held write to the agent, in order, and stops
// holding.
func (p *stallProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.released:
		return
	default:
	}
	close(p.released)
	p.holdKey = ""
	for _, w := range p.held {
		req, err := http.NewRequest(w.method, p.target.Scheme+"://"+p.target.Host+w.uri, bytes.NewReader(w.body))
		if err != nil {
			w.answer = err.Error()
			continue
		}
		req.Header = w.header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.answer = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		w.status, w.answer = resp.StatusCode, string(b)
	}
}

// writes returns the writes held so far.
func (p *stallProxy) writes() []*heldWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*heldWrite(nil), p.held...)
}

func (p *stallProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.mu.Lock()
	if p.noSession && strings.HasPrefix(r.URL.Path, "/v1/session/create") {
		p.mu.Unlock()
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
		return
	}
	key := p.holdKey
	if key == "" || r.Method != http.MethodPut ||
		r.URL.Path != "/v1/kv/"+key && !(r.URL.Path == "/v1/txn" && bytes.Contains(body, []byte(`"Key":"`+key+`"`))) {
		p.mu.Unlock()
		p.rp.ServeHTTP(w, r)
		return
	}
	hw := &heldWrite{method: r.Method, uri: r.URL.RequestURI(), header: r.Header.Clone(), body: body, gaveUp: make(chan struct{})}
	p.held = append(p.held, hw)
	p.mu.Unlock()
	select {
	case <-r.Context().Done():
		close(hw.gaveUp)
	case <-p.released:
		http.Error(w, "held", http.StatusServiceUnavailable)
	}
}

// Issue 22, hole 1: a write a controller sent while it led, stalled in a
// frozen agent, must not be applied after another replica took over. A
// replica re-creates a deleted lock key; its write stalls; Terraform
// destroys the lock (the declaration goes, the key is already gone); the
// replica loses the leader key and another replica leads; then the stalled
// write reaches Consul. Before the fix the create-only write was applied
// then: a resurrected lock key that nothing would remove, and the old
// leader was still waiting on it after the new one had taken over.
func TestLeadership_aStalledWriteIsNotAppliedAfterAnotherReplicaTookOver(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	proxy := newStallProxy(t, agent)
	c1 := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true, addr: proxy.addr()})
	eventually(t, 30*time.Second, func() error {
		if !c1.IsLeader() {
			return fmt.Errorf("the first replica does not lead")
		}
		if h.get(l.Key) == nil {
			return fmt.Errorf("the leader did not create the lock key")
		}
		return nil
	})
	c2 := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true})

	// The leader's write re-creating the deleted key stalls.
	proxy.hold(l.Key)
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if len(proxy.writes()) == 0 {
			return fmt.Errorf("the leader sent no write re-creating %s", l.Key)
		}
		return nil
	})
	// Terraform destroys the lock: the declaration goes.
	if _, err := h.api.KV().Delete(lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), nil); err != nil {
		t.Fatal(err)
	}
	// The leader loses the leader key (deleted out of band, so no
	// lock-delay) and cannot campaign again; the second replica leads.
	proxy.refuseSessions()
	if _, err := h.api.KV().Delete(c1.LeaderKey(), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if c1.IsLeader() || !c2.IsLeader() {
			return fmt.Errorf("leaders: first %v, second %v; want the second only", c1.IsLeader(), c2.IsLeader())
		}
		return nil
	})
	// The old leader's requests were cancelled when its term ended; the
	// proxy hears of it when the connection closes, hence the wait.
	for i, w := range proxy.writes() {
		select {
		case <-w.gaveUp:
		case <-time.After(5 * time.Second):
			t.Errorf("write %d (%s %s) of the old leader is still in flight after another replica took over", i, w.method, w.uri)
		}
	}

	// The stalled writes reach Consul.
	proxy.release()
	for i, w := range proxy.writes() {
		t.Logf("held write %d: %s %s -> %d %s", i, w.method, w.uri, w.status, strings.TrimSpace(w.answer))
	}
	if p := h.get(l.Key); p != nil {
		t.Fatalf("the old leader's stalled write was applied after another replica took over: %s re-created (ModifyIndex %d) for a destroyed lock", l.Key, p.ModifyIndex)
	}
	for i, w := range proxy.writes() {
		if w.status == 0 {
			t.Errorf("held write %d never reached Consul (%s); the test proved nothing", i, w.answer)
		}
	}
}

// Issue 22, hole 1: a write that stalls while the replica still leads is
// given up after LeaderGrace and tried again, rather than left in flight
// (where a later take-over would find it). Before the fix the leader
// waited on its first write for as long as the agent held it.
func TestLeadership_aStalledWriteIsGivenUpAndTriedAgain(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("l"), Prefix: h.prefix + "/l"})
	proxy := newStallProxy(t, agent)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, ha: true, addr: proxy.addr()})
	eventually(t, 30*time.Second, func() error {
		if !c.IsLeader() || h.get(l.Key) == nil {
			return fmt.Errorf("the replica does not lead, or did not create the lock key")
		}
		return nil
	})
	proxy.hold(l.Key)
	if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		ws := proxy.writes()
		if len(ws) < 2 {
			return fmt.Errorf("%d write(s) re-creating %s sent; want the stalled one given up and a second", len(ws), l.Key)
		}
		select {
		case <-ws[0].gaveUp:
			return nil
		default:
			return fmt.Errorf("the first write is still in flight")
		}
	})
	if !c.IsLeader() {
		t.Fatal("the replica stopped leading; the test proves nothing")
	}
	proxy.release()
	eventually(t, 30*time.Second, func() error {
		if p := h.get(l.Key); p == nil || p.Flags != lockmodel.LockFlagValue {
			return fmt.Errorf("%s not re-created with the lock flags once the agent answered again", l.Key)
		}
		return nil
	})
}

// Issue 22, hole 1: ending a session and restoring ACL rules have no
// check-and-set on leadership in Consul; the controller must confirm with
// a consistent read, right before each, that its term still holds the
// leader key. Before the fix a replica whose term had ended sent both.
func TestLeadership_unfencedWritesAreNotSentWithoutTheLeaderKey(t *testing.T) {
	h := newHarness(t, agent)
	c, err := New(h.clientAt(agent.Addr, agent.ManagementToken, 1), Config{Mode: compliance.ModeEnforce, RegistryPrefix: h.registry, ApplyGrace: compliance.DefaultApplyGrace})
	if err != nil {
		t.Fatal(err)
	}
	// A term whose session does not hold the leader key: another
	// replica's session does.
	ours := h.session(api.SessionEntry{Name: "consullock-controller"}, true)
	theirs := h.session(api.SessionEntry{Name: "consullock-controller"}, true)
	h.acquire(c.LeaderKey(), theirs)
	stale := &term{ctx: context.Background(), fence: store.Fence{Key: c.LeaderKey(), Session: ours}}

	victim := h.session(api.SessionEntry{Name: "victim"}, true)
	if _, err := c.execute(stale, compliance.Decision{Kind: compliance.KindEndSession, Session: victim}); !errors.Is(err, errNotLeader) {
		t.Errorf("ending a session from an ended term: error %v, want errNotLeader", err)
	}
	if !h.sessionAlive(victim) {
		t.Error("a replica that does not hold the leader key ended a session")
	}

	p := h.createPolicy(h.name("p"), `key "a" { policy = "read" }`)
	d := compliance.Decision{Kind: compliance.KindRestoreACLRules, Policy: p.Name, PolicyID: p.ID, ModifyIndex: h.livePolicy(p.ID).ModifyIndex, Rules: widened}
	if _, err := c.execute(stale, d); !errors.Is(err, errNotLeader) {
		t.Errorf("restoring ACL rules from an ended term: error %v, want errNotLeader", err)
	}
	if got := h.livePolicy(p.ID).Rules; got != p.Rules {
		t.Errorf("a replica that does not hold the leader key rewrote policy %s: rules %q", p.Name, got)
	}

	key := h.prefix + "/fenced/.lock"
	rec := compliance.Decision{Kind: compliance.KindRecreateKey, Key: key, Flags: lockmodel.LockFlagValue}
	if _, err := c.execute(stale, rec); !errors.Is(err, store.ErrFenceLost) {
		t.Errorf("re-creating a lock key from an ended term: error %v, want ErrFenceLost", err)
	}
	if h.get(key) != nil {
		t.Error("a replica that does not hold the leader key created a lock key")
	}

	// The same writes from the term that holds the key go through.
	current := &term{ctx: context.Background(), fence: store.Fence{Key: c.LeaderKey(), Session: theirs}}
	if done, err := c.execute(current, compliance.Decision{Kind: compliance.KindEndSession, Session: victim}); err != nil || !done {
		t.Fatalf("ending a session as the leader: done %v, error %v", done, err)
	}
	if h.sessionAlive(victim) {
		t.Error("the leader's session end did not end the session")
	}
	if done, err := c.execute(current, rec); err != nil || !done {
		t.Fatalf("re-creating a lock key as the leader: done %v, error %v", done, err)
	}
	if p := h.get(key); p == nil || p.Flags != lockmodel.LockFlagValue {
		t.Errorf("the leader's fenced write did not create %s with the lock flags: %+v", key, p)
	}
	if done, err := c.execute(current, rec); err != nil || done {
		t.Errorf("re-creating an existing lock key as the leader: done %v, error %v; want a lost check-and-set", done, err)
	}
}
