package lockproto

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// requestLog is a proxy in front of the agent that records the requests
// of the client behind it and can act before one is forwarded.
type requestLog struct {
	addr string
	mu   sync.Mutex
	reqs []loggedRequest
	// before, when set, runs before a request is forwarded.
	before func(method, path string)
}

type loggedRequest struct {
	method, path string
	query        url.Values
	remote       string // the client's end of the connection
}

func newRequestLog(t *testing.T) *requestLog {
	t.Helper()
	target, err := url.Parse("http://" + agent.Addr)
	if err != nil {
		t.Fatal(err)
	}
	l := &requestLog{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, loggedRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), remote: r.RemoteAddr})
		before := l.before
		l.mu.Unlock()
		if before != nil {
			before(r.Method, r.URL.Path)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	l.addr = strings.TrimPrefix(srv.URL, "http://")
	return l
}

// keyReads are the reads of key logged so far.
func (l *requestLog) keyReads(key string) []loggedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedRequest
	for _, r := range l.reqs {
		if r.method == http.MethodGet && r.path == "/v1/kv/"+key {
			out = append(out, r)
		}
	}
	return out
}

// waitKeyReads waits until n reads of key have been logged.
func (l *requestLog) waitKeyReads(t *testing.T, key string, n int) []loggedRequest {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if reads := l.keyReads(key); len(reads) >= n {
			return reads
		}
	}
	t.Fatalf("%d reads of %s not seen; logged: %+v", n, key, l.keyReads(key))
	return nil
}

func (r loggedRequest) String() string { return r.method + " " + r.path + "?" + r.query.Encode() }

// A waiter that loses the race for a freed key (another session locked it
// between the waiter's read and its lock transaction) waits on the new
// holder from the consistent read that told it so: its next read blocks at
// that read's index instead of reading the same state again at once.
func TestMutex_aLostRaceWaitsFromItsOwnConsistentRead(t *testing.T) {
	_, key, ctx := holdTest(t)
	direct := agent.Client()
	session := func(name string) string {
		t.Helper()
		id, _, err := direct.Session().Create(&api.SessionEntry{Name: name, TTL: "10s", LockDelay: time.Nanosecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = direct.Session().Destroy(id, nil) })
		return id
	}
	first, winner := session("first"), session("winner")
	lock := func(id string) *api.KVPair {
		t.Helper()
		pair := &api.KVPair{Key: key, Session: id, Flags: lockmodel.LockFlagValue}
		if ok, _, err := direct.KV().Acquire(pair, nil); err != nil || !ok {
			t.Fatalf("acquire %s for %s: %v %v", key, id, ok, err)
		}
		got, _, err := direct.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	lock(first)

	proxy := newRequestLog(t)
	var won *api.KVPair
	var once sync.Once
	proxy.before = func(method, path string) {
		if method == http.MethodPut && path == "/v1/txn" {
			once.Do(func() { won = lock(winner) }) // the race, lost on purpose
		}
	}
	c, err := consul.New(consul.Settings{Address: proxy.addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	p := holdProfile()
	waiter := newSession(ctx, t, c, "", p)
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := New(c, holdLock(key), p.LockDelay, discardLog(), Settings{}).Acquire(actx, waiter, func() []byte { return []byte(t.Name()) })
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err == nil {
			t.Error("the waiter acquired the lock the winner holds")
		}
	}()

	proxy.waitKeyReads(t, key, 2) // the waiter blocks on the first holder
	if _, _, err := direct.KV().Release(&api.KVPair{Key: key, Session: first, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	// Wake-up, the refused lock, its consistent read, then the wait.
	reads := proxy.waitKeyReads(t, key, 4)
	consistentAt := -1
	for i, r := range reads {
		if i >= 2 && r.query.Has("consistent") {
			consistentAt = i
			break
		}
	}
	if consistentAt < 0 || consistentAt+1 >= len(reads) {
		t.Fatalf("no consistent read after the refused lock followed by a wait; reads: %v", reads)
	}
	next, want := reads[consistentAt+1], strconv.FormatUint(won.ModifyIndex, 10)
	if got := next.query.Get("index"); got != want {
		t.Fatalf("after the lost race the waiter read %s: want a blocking read at the winner's index %s (reads: %v)", next, want, reads)
	}
}

// A runner's mutex value carries its session's lock-delay, as a
// semaphore holder's does: a waiter learns it from the key it already
// reads instead of reading the holder's session (one request less per
// waiter at every hand-over; at 100 waiters, 100 requests).
func TestMutex_waiterLearnsTheHoldersLockDelayFromItsValue(t *testing.T) {
	c, key, ctx := holdTest(t)
	p, lock := holdProfile(), holdLock(key)
	value := func() []byte {
		v, _ := json.Marshal(lockmodel.HolderValue{Node: agent.NodeName, PID: 1, Started: time.Now().UTC()})
		return v
	}
	held := newSession(ctx, t, c, "", p)
	proto := New(c, lock, p.LockDelay, discardLog(), Settings{})
	var written []byte
	if _, err := proto.Acquire(ctx, held, func() []byte { written = value(); return written }); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := proto.Release(context.Background(), held, written); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if d, ok := lockmodel.HolderLockDelay(pair.Value); !ok || d != 15*time.Second {
		t.Fatalf("holder value %s: want lock_delay 15s (the session's), got %s %v", pair.Value, d, ok)
	}

	proxy := newRequestLog(t)
	pc, err := consul.New(consul.Settings{Address: proxy.addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	waiter := newSession(ctx, t, pc, "", p)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := New(pc, lock, p.LockDelay, discardLog(), Settings{}).Acquire(wctx, waiter, value)
		done <- err
	}()
	proxy.waitKeyReads(t, key, 2) // waiting on the holder
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the waiter acquired a held lock")
	}
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	for _, r := range proxy.reqs {
		if r.path == "/v1/session/info/"+held.ID {
			t.Fatalf("the waiter read the holder's session (%s) for a lock-delay its value carries", r)
		}
	}
}

// holdProfile is the profile the protocol tests' sessions are created
// from: TTL 10s, lock-delay 15s.
func holdProfile() lockmodel.Profile {
	return lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second}.Resolve()
}

// holdLock is a mutex whose waiters race on key.
func holdLock(key string) lockmodel.Lock {
	return lockmodel.Lock{Name: "hold", Prefix: key, Key: key, Limit: 1}
}
