package consul

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// recordingServer answers like /v1/status/leader and keeps request headers.
func recordingServer(t *testing.T) (*httptest.Server, func() []http.Header) {
	t.Helper()
	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		_, _ = w.Write([]byte(`"127.0.0.1:8300"`))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), seen...)
	}
}

func TestClientSendsHeadersAndPinsTheResolvedToken(t *testing.T) {
	srv, seen := recordingServer(t)
	// The Consul api would fall back to these on its own; the resolved
	// token must win.
	t.Setenv(EnvToken, "from-environment")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvTokenFile, tokenFile)

	c, err := New(Settings{Address: srv.URL, Token: "from-attribute", Headers: map[string]string{"X-Proxy-Auth": "abc"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().LeaderWithQueryOptions(nil); err != nil {
		t.Fatal(err)
	}
	got := seen()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	if tok := got[0].Get("X-Consul-Token"); tok != "from-attribute" {
		t.Fatalf("X-Consul-Token = %q, want the attribute's token", tok)
	}
	if h := got[0].Get("X-Proxy-Auth"); h != "abc" {
		t.Fatalf("extra header = %q, want abc", h)
	}
}

func TestClientReadsTokenFile(t *testing.T) {
	srv, seen := recordingServer(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("  secret-from-file \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Settings{Address: srv.URL, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().LeaderWithQueryOptions(nil); err != nil {
		t.Fatal(err)
	}
	if len(seen()) != 1 {
		t.Fatalf("%d requests, want 1", len(seen()))
	}
	for _, h := range seen() {
		if tok := h.Get("X-Consul-Token"); tok != "secret-from-file" {
			t.Fatalf("X-Consul-Token = %q, want the file's token trimmed", tok)
		}
	}
}

func TestClientWithoutTokenSendsNone(t *testing.T) {
	srv, seen := recordingServer(t)
	t.Setenv(EnvToken, "from-environment")
	c, err := New(Settings{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, h := range seen() {
		if tok := h.Get("X-Consul-Token"); tok != "" {
			t.Fatalf("anonymous client sent X-Consul-Token %q", tok)
		}
	}
}

// errAndResponse is a RoundTripper that answers like go-retryablehttp
// when its retry policy ends a request with an error after a response
// came (a context cancelled as the answer arrived): both.
type errAndResponse struct{ closed bool }

func (e *errAndResponse) RoundTrip(req *http.Request) (*http.Response, error) {
	body := &closeRecorder{Reader: strings.NewReader("{}"), closed: &e.closed}
	return &http.Response{StatusCode: http.StatusOK, Body: body, Request: req}, context.Canceled
}

type closeRecorder struct {
	io.Reader
	closed *bool
}

func (c *closeRecorder) Close() error { *c.closed = true; return nil }

// A response that comes with an error is closed and not handed to
// net/http, which would print "RoundTripper returned a response & error;
// ignoring response" on the runner's stderr, outside its log.
func TestStartTransport_aResponseWithAnErrorIsClosedNotPassedOn(t *testing.T) {
	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	next := &errAndResponse{}
	client := &http.Client{Transport: &startTransport{next: next}}
	resp, err := client.Get("http://127.0.0.1:1/v1/kv/x")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("want the error")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if logged.Len() > 0 {
		t.Errorf("net/http logged %q", logged.String())
	}
	if !next.closed {
		t.Error("the response's body was not closed")
	}
}
