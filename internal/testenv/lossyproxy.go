package testenv

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// lossyProxy forwards every request to a real agent. The first request
// that drop matches is forwarded and answered by the agent, and then the
// connection to the client is closed without the answer: the write
// happened, the client cannot know. A real agent cannot be made to do this.
type lossyProxy struct {
	t      testing.TB
	target string
	drop   func(*http.Request, []byte) bool
	mu     sync.Mutex
	done   bool
	counts map[string]int
}

// LossyProxy is a proxy to the agent at target (http://host:port) that
// loses the answer to the first request drop matches, after the agent
// applied it: what a client sees when a connection drops mid-answer.
func LossyProxy(t testing.TB, target string, drop func(r *http.Request, body []byte) bool) *httptest.Server {
	p := &lossyProxy{t: t, target: target, drop: drop, counts: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
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

// PutTo matches a PUT to path, for LossyProxy.
func PutTo(path string) func(*http.Request, []byte) bool {
	return func(r *http.Request, _ []byte) bool { return r.Method == http.MethodPut && r.URL.Path == path }
}
