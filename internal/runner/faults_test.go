package runner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// faultProxy sits between a runner and the agent and fails on demand:
// "noleader" answers every request with Consul's HTTP 500 "No cluster
// leader"; "partition" answers nothing and cuts requests in flight.
type faultProxy struct {
	srv   *httptest.Server
	proxy *httputil.ReverseProxy

	mu     sync.Mutex
	mode   string
	cut    chan struct{} // closed when a partition starts
	healed chan struct{} // closed when a partition ends

	noLeaderRenewals atomic.Int64
}

func newFaultProxy(t testing.TB) *faultProxy {
	t.Helper()
	target, err := url.Parse(agent.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{proxy: httputil.NewSingleHostReverseProxy(target), mode: "pass", cut: make(chan struct{}), healed: make(chan struct{})}
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() {
		p.set("pass")
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

// addr is host:port for CONSUL_HTTP_ADDR.
func (p *faultProxy) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *faultProxy) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == "partition" && p.mode != "partition" {
		close(p.cut)
		p.healed = make(chan struct{})
	}
	if mode != "partition" && p.mode == "partition" {
		close(p.healed)
		p.cut = make(chan struct{})
	}
	p.mode = mode
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	mode, cut, healed := p.mode, p.cut, p.healed
	p.mu.Unlock()
	switch mode {
	case "partition":
		select { // no answer while the partition lasts
		case <-r.Context().Done():
		case <-healed:
		}
		http.Error(w, "partitioned", http.StatusBadGateway)
		return
	case "noleader":
		if strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
			p.noLeaderRenewals.Add(1)
		}
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// Consul issue 1162: a spell without a leader shorter than the TTL is not
// lock loss. The runner rides it out and the child runs to its end.
func TestRun_ridesOutNoClusterLeaderShorterThanTTL(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, time.Second))
	proxy := newFaultProxy(t)
	record := filepath.Join(t.TempDir(), "record")
	run := startRunAt(t, "runner", proxy.addr(), runnerToken(t, prefix), []string{"-lock", l.Name},
		childArgs(record, "a", "-sleep", "12s")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")

	proxy.set("noleader")
	time.Sleep(4 * time.Second) // the no-leader spell: longer than renew_every (3.3s), shorter than the TTL (10s)
	proxy.set("pass")

	if code := run.wait(60 * time.Second); code != 0 {
		t.Fatalf("runner exited %d, want 0: a short spell without a leader is not lock loss", code)
	}
	if n := proxy.noLeaderRenewals.Load(); n == 0 {
		t.Fatal("no renewal met the no-leader spell; the test proved nothing")
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || runs[0].termed || !runs[0].ended {
		t.Fatalf("the child was disturbed: %+v", runs)
	}
}

// Consul issue 18271: a holder cut off from the cluster must notice. The
// partitioned runner stops its child within TTL + grace of its last
// renewal, before Consul can invalidate the session (2 x TTL) and another
// runner can take over; the two children never overlap.
func TestRun_partitionedHolderStopsChildBeforeTakeOver(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	profile := fastProfile(t, time.Second)
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	proxy := newFaultProxy(t)
	record := filepath.Join(t.TempDir(), "record")

	a := startRunAt(t, "partitioned runner", proxy.addr(), token, []string{"-lock", l.Name, "-grace", "2s"},
		childArgs(record, "a", "-sleep", "5m")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)

	partitioned := time.Now()
	proxy.set("partition")
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("partitioned runner exited %d, want %d (lock lost)", code, ExitLockLost)
	}
	if out := a.out.String(); !strings.Contains(out, "no successful session renewal") {
		t.Fatalf("the partitioned runner does not say why it gave up:\n%s", out)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[0].tag != "a" || runs[1].tag != "b" || !runs[0].termed || !runs[0].ended {
		t.Fatalf("runs = %+v", runs)
	}
	t.Logf("MEASURED partition: child a stopped %s after the partition (bound ttl + grace = %s); child b started %s after it",
		runs[0].end.Sub(partitioned).Round(time.Millisecond), profile.TTL+2*time.Second,
		runs[1].start.Sub(partitioned).Round(time.Millisecond))
	if !runs[0].end.Before(runs[1].start) {
		t.Fatalf("the partitioned holder's child was still running (until %s) when the next holder started (%s)", runs[0].end, runs[1].start)
	}
	if stopped := runs[0].end.Sub(partitioned); stopped > profile.TTL+2*time.Second+time.Second {
		t.Fatalf("the child was stopped %s after the partition; want within ttl + grace", stopped)
	}
}
