package concurrency

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// requestLog is a proxy in front of the agent that records the requests
// of the client behind it.
type requestLog struct {
	addr string
	mu   sync.Mutex
	reqs []loggedRequest
}

type loggedRequest struct {
	method, path string
	query        url.Values
	remote       string // the client's end of the connection
}

func newRequestLog(t *testing.T) *requestLog {
	t.Helper()
	target, err := url.Parse("http://" + doorAgent(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	l := &requestLog{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, loggedRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), remote: r.RemoteAddr})
		l.mu.Unlock()
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

// The holder's watch starts blocking at the acquisition's index: the
// acquisition's own answer showed the key held there, so a first read
// answered at once would only repeat it (one request more on every
// hand-over, sent while the command starts).
func TestDoor_watchBlocksFromTheAcquisitionsIndex(t *testing.T) {
	agent := doorAgent(t)
	_, key, ctx := doorTest(t)
	proxy := newRequestLog(t)
	c, err := consul.New(consul.Settings{Address: proxy.addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	h, err := acquireDoor(ctx, c, doorOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, h)
	var watch []loggedRequest
	for _, r := range proxy.waitKeyReads(t, key, 2) {
		if r.query.Has("consistent") {
			watch = append(watch, r)
		}
	}
	if len(watch) == 0 {
		t.Fatalf("no consistent read of %s after the acquisition; reads: %v", key, proxy.keyReads(key))
	}
	want := strconv.FormatUint(h.Grant().FencingToken, 10)
	if got := watch[0].query.Get("index"); got != want {
		t.Fatalf("the watch's first read is %s: want it blocking at the acquisition's index %s", watch[0], want)
	}
}

// With a watch client of its own the hold's watch keeps its blocking query
// on its own connection, and the release goes over a connection the
// acquisition left idle: no new connection (a TCP, with TLS also a TLS,
// handshake) on the hand-over's path.
func TestDoor_releaseGoesOverAnIdleConnection(t *testing.T) {
	agent := doorAgent(t)
	_, key, ctx := doorTest(t)
	proxy := newRequestLog(t)
	client := func() *consul.Client {
		c, err := consul.New(consul.Settings{Address: proxy.addr, Token: agent.ManagementToken})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	o := doorOptions(t, key)
	o.Protocol.WatchClient = client()
	h, err := acquireDoor(ctx, client(), o)
	if err != nil {
		t.Fatal(err)
	}
	for len(proxy.keyReads(key)) == 0 || !proxy.keyReads(key)[len(proxy.keyReads(key))-1].query.Has("consistent") {
		time.Sleep(5 * time.Millisecond) // until the watch blocks
	}
	unlock(t, h)

	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range proxy.reqs {
		if r.method == http.MethodPut && r.path == "/v1/kv/"+key && r.query.Has("release") {
			if !seen[r.remote] {
				t.Fatalf("the release came over a new connection (%s); connections open before: %v", r.remote, seen)
			}
			return
		}
		seen[r.remote] = true
	}
	t.Fatalf("no release of %s seen", key)
}
