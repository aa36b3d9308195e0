package testenv

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequestLog is a proxy in front of an agent that records the requests of
// the client behind it (point the client at Addr) and can act before one
// is forwarded: for tests of which requests a protocol sends, in what
// order, over which connection.
type RequestLog struct {
	// Addr is the proxy's host:port.
	Addr string

	mu   sync.Mutex
	reqs []LoggedRequest
	// before, when set, runs before a request is forwarded.
	before func(method, path string)
}

// LoggedRequest is one request the proxy forwarded.
type LoggedRequest struct {
	Method, Path string
	Query        url.Values
	Remote       string // the client's end of the connection
}

func (r LoggedRequest) String() string { return r.Method + " " + r.Path + "?" + r.Query.Encode() }

// NewRequestLog starts a proxy to the agent at agentAddr, closed when the
// test ends.
func NewRequestLog(t testing.TB, agentAddr string) *RequestLog {
	t.Helper()
	target, err := url.Parse("http://" + agentAddr)
	if err != nil {
		t.Fatal(err)
	}
	l := &RequestLog{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, LoggedRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Remote: r.RemoteAddr})
		before := l.before
		l.mu.Unlock()
		if before != nil {
			before(r.Method, r.URL.Path)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	l.Addr = strings.TrimPrefix(srv.URL, "http://")
	return l
}

// Before has f run before each request is forwarded (nil: none).
func (l *RequestLog) Before(f func(method, path string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.before = f
}

// Requests are the requests logged so far.
func (l *RequestLog) Requests() []LoggedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LoggedRequest(nil), l.reqs...)
}

// KeyReads are the reads of KV key logged so far.
func (l *RequestLog) KeyReads(key string) []LoggedRequest {
	var out []LoggedRequest
	for _, r := range l.Requests() {
		if r.Method == http.MethodGet && r.Path == "/v1/kv/"+key {
			out = append(out, r)
		}
	}
	return out
}

// WaitKeyReads waits until n reads of key have been logged.
func (l *RequestLog) WaitKeyReads(t testing.TB, key string, n int) []LoggedRequest {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if reads := l.KeyReads(key); len(reads) >= n {
			return reads
		}
	}
	t.Fatalf("%d reads of %s not seen; logged: %+v", n, key, l.KeyReads(key))
	return nil
}
