package concurrency_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
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

// renewCounter forwards HTTP to the agent and counts session renewals.
type renewCounter struct {
	rp       *httputil.ReverseProxy
	renewals atomic.Int32
}

func (p *renewCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
		p.renewals.Add(1)
	}
	p.rp.ServeHTTP(w, r)
}

// WithRenewEvery: the session is renewed at the interval given, here half
// the TTL (Consul's api.Lock interval, above a declared profile's
// renew_every range), not the default third: two renewals in the first
// 12s of a 10s-TTL session, where the default would send three. The
// session lives on past its TTL.
func TestWithRenewEvery_setsTheRenewalInterval(t *testing.T) {
	ctx := context.Background()
	target, err := url.Parse(agent.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	counter := &renewCounter{rp: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(counter)
	defer srv.Close()
	client, err := api.NewClient(&api.Config{Address: strings.TrimPrefix(srv.URL, "http://"), Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	s, err := concurrency.NewSession(ctx, client, concurrency.WithTTL(10*time.Second), concurrency.WithLockDelay(0),
		concurrency.WithRenewEvery(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	time.Sleep(12 * time.Second)
	if n := counter.renewals.Load(); n != 2 {
		t.Errorf("%d renewals in the first 12s with WithRenewEvery(5s), want 2 (at 5s and 10s)", n)
	}
	if err := s.Err(); err != nil {
		t.Errorf("the session ended: %v", err)
	}
	entry, _, err := agent.Client().Session().Info(s.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if entry == nil {
		t.Error("the session is gone from Consul after 12s of renewals every 5s")
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
