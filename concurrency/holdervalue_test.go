package concurrency_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// WithHolderValue: the mutex's key holds the caller's value while held,
// as given (not a holder JSON object, so no lock_delay is added), and
// still after the release, which writes it again; f is called for the
// acquisition.
func TestWithHolderValue_isWrittenIntoTheKey(t *testing.T) {
	ctx := context.Background()
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	want := []byte(`{"identity":"replica-1","mode":"repair"}`)
	var calls atomic.Int32
	s, err := concurrency.NewSession(ctx, agent.Client(), concurrency.WithTTL(10*time.Second), concurrency.WithLockDelay(0),
		concurrency.WithHolderValue(func() []byte { calls.Add(1); return want }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	m, err := concurrency.NewMutex(s, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() == 0 {
		t.Error("the holder value function was not called for the acquisition")
	}
	read := func(when string) *api.KVPair {
		t.Helper()
		pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if pair == nil {
			t.Fatalf("%s: key %s is gone", when, key)
		}
		if !bytes.Equal(pair.Value, want) {
			t.Errorf("%s: key value %q, want %q", when, pair.Value, want)
		}
		return pair
	}
	if p := read("held"); p.Session != s.ID() {
		t.Errorf("held: key session %q, want %q", p.Session, s.ID())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p := read("released"); p.Session != "" {
		t.Errorf("released: key still held by session %q", p.Session)
	}
}

// renewCounter forwards HTTP to the agent and notes when each request
// creating a session and each renewal reached it, with Consul's status.
type renewCounter struct {
	rp      *httputil.ReverseProxy
	renewed chan struct{} // one send per renewal answered

	mu       sync.Mutex
	created  time.Time
	renewals []renewal
}

type renewal struct {
	at     time.Time
	status int
}

func (p *renewCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	if r.URL.Path == "/v1/session/create" {
		p.mu.Lock()
		p.created = at
		p.mu.Unlock()
	}
	if !strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
		p.rp.ServeHTTP(w, r)
		return
	}
	sw := &testenv.StatusRecorder{ResponseWriter: w, Status: http.StatusOK}
	p.rp.ServeHTTP(sw, r)
	p.mu.Lock()
	p.renewals = append(p.renewals, renewal{at: at, status: sw.Status})
	p.mu.Unlock()
	select {
	case p.renewed <- struct{}{}:
	default:
	}
}

// newRenewCounter is a renewCounter in front of the agent, and a client
// (management token) that talks to the agent through it; the proxy stops
// with the test. A request its client cancelled is not logged.
func newRenewCounter(t *testing.T) (*renewCounter, *api.Client) {
	t.Helper()
	target, err := url.Parse(agent.HTTPAddr())
	must(t, err)
	counter := &renewCounter{rp: httputil.NewSingleHostReverseProxy(target), renewed: make(chan struct{}, 64)}
	counter.rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(counter)
	t.Cleanup(srv.Close)
	client, err := api.NewClient(&api.Config{Address: strings.TrimPrefix(srv.URL, "http://"), Token: agent.ManagementToken})
	must(t, err)
	return counter, client
}

func (p *renewCounter) seen() (time.Time, []renewal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created, slices.Clone(p.renewals)
}

// WithRenewEvery: the session is renewed at the interval given, not the
// default third of the TTL. Asserted without depending on how busy the
// machine is: the renewal loop's timer never fires early, so a load can
// only lengthen the gaps the proxy sees, except by the transit of the
// earlier request, which a quarter of the interval covers (no gap below
// three quarters of it: not renewed twice as often); and the first
// renewal comes before the default interval (a fifth of it here) has
// passed once, which only a stall of 8s could upset.
func TestWithRenewEvery_setsTheRenewalInterval(t *testing.T) {
	const (
		ttl      = 30 * time.Second
		every    = 2 * time.Second
		renewals = 3
	)
	byDefault := lockmodel.DefaultRenewEvery(ttl)
	ctx := context.Background()
	counter, client := newRenewCounter(t)
	s, err := concurrency.NewSession(ctx, client, concurrency.WithTTL(ttl), concurrency.WithLockDelay(0),
		concurrency.WithRenewEvery(every))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()

	// A guard against a hang only: at the default interval the renewals
	// would all have come by renewals*byDefault.
	guard := time.NewTimer(renewals*byDefault + time.Minute)
	defer guard.Stop()
	for n := 0; n < renewals; n++ {
		select {
		case <-counter.renewed:
		case <-guard.C:
			t.Fatalf("%d of %d renewals came within %s", n, renewals, renewals*byDefault+time.Minute)
		}
	}

	created, seen := counter.seen()
	if created.IsZero() {
		t.Fatal("the proxy saw no session created")
	}
	gaps := make([]time.Duration, len(seen))
	prev := created
	for i, r := range seen {
		gaps[i] = r.at.Sub(prev).Round(time.Millisecond)
		if r.status != http.StatusOK {
			t.Errorf("renewal %d: HTTP %d, want 200 (a failed renewal is retried sooner)", i+1, r.status)
		}
		if gap := r.at.Sub(prev); gap < every*3/4 {
			t.Errorf("renewal %d came %s after the request before it; with WithRenewEvery(%s) no gap is below %s",
				i+1, gap.Round(time.Millisecond), every, every*3/4)
		}
		prev = r.at
	}
	t.Logf("from the session's creation, renewals came after %v", gaps)
	if first := seen[0].at.Sub(created); first >= byDefault {
		t.Errorf("the first renewal came %s after the session was created, not before the default interval (%s): WithRenewEvery(%s) was not applied",
			first.Round(time.Millisecond), byDefault, every)
	}
	if err := s.Err(); err != nil {
		t.Errorf("the session ended: %v", err)
	}
	entry, _, err := agent.Client().Session().Info(s.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if entry == nil {
		t.Error("the session is gone from Consul while renewed")
	}
}

// WithRenewEvery outside (0, TTL/2] is refused before a session is
// created, as is WithRenewEvery with WithProfile (the profile's
// renew_every applies).
func TestWithRenewEvery_refusesIntervalsAboveHalfTheTTL(t *testing.T) {
	ctx := context.Background()
	for _, d := range []time.Duration{-time.Second, 5*time.Second + time.Millisecond, 10 * time.Second} {
		s, err := concurrency.NewSession(ctx, agent.Client(), concurrency.WithTTL(10*time.Second), concurrency.WithRenewEvery(d))
		if err == nil {
			_ = s.Close(ctx)
			t.Errorf("WithRenewEvery(%s) with TTL 10s was accepted", d)
			continue
		}
		if !strings.Contains(err.Error(), "WithRenewEvery") {
			t.Errorf("WithRenewEvery(%s): error %q does not name the option", d, err)
		}
	}
	s, err := concurrency.NewSession(ctx, agent.Client(), concurrency.WithProfile("any"), concurrency.WithRenewEvery(time.Second))
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("WithRenewEvery with WithProfile was accepted")
	}
	if !strings.Contains(err.Error(), "WithRenewEvery") {
		t.Errorf("WithRenewEvery with WithProfile: error %q does not name the option", err)
	}
}
