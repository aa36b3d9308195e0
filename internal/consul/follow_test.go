package consul

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestFollower_indexRule: Consul's rules for the next WaitIndex — the
// last answer's index, 0 after it went backwards or a query failed, never
// 0 once answered — and what counts as a change.
func TestFollower_indexRule(t *testing.T) {
	var f Follower
	steps := []struct {
		name        string
		fail        bool
		last        uint64
		wantIndex   uint64
		wantChanged bool
	}{
		{name: "first answer", last: 7, wantIndex: 7, wantChanged: true},
		{name: "timed out", last: 7, wantIndex: 7},
		{name: "moved", last: 9, wantIndex: 9, wantChanged: true},
		{name: "went backwards", last: 3, wantIndex: 0, wantChanged: true},
		{name: "after the reset", last: 3, wantIndex: 3, wantChanged: true},
		{name: "failed", fail: true, wantIndex: 0},
		{name: "after the failure", last: 3, wantIndex: 3, wantChanged: true},
	}
	for _, s := range steps {
		if s.fail {
			f.Failed()
		} else if got := f.Answered(s.last); got != s.wantChanged {
			t.Errorf("%s: changed %v, want %v", s.name, got, s.wantChanged)
		}
		if f.Index() != s.wantIndex {
			t.Errorf("%s: next index %d, want %d", s.name, f.Index(), s.wantIndex)
		}
	}
	var g Follower
	if !g.Answered(0) || g.Index() != 1 {
		t.Errorf("an answer with index 0: next index %d, want 1", g.Index())
	}
}

// TestFollower_backoff: consecutive failures wait 250ms doubling to 5s,
// each jittered to between half and all of it; an answer starts over.
func TestFollower_backoff(t *testing.T) {
	var f Follower
	for n, want := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		got := f.Failed()
		if got < want/2 || got > want || f.RetryIn() != got || f.Failures() != n+1 {
			t.Errorf("failure %d: pause %v (RetryIn %v, failures %d), want %v..%v", n+1, got, f.RetryIn(), f.Failures(), want/2, want)
		}
	}
	f.Answered(5)
	if got := f.Failed(); got > 250*time.Millisecond {
		t.Errorf("after an answer the first failure waits %v, want at most 250ms", got)
	}
}

// TestFollow_aFailedQueryIsFollowedByOneThatDoesNotBlock runs Follow on a
// real key through a proxy that fails the second blocking query with a
// 500: the query after it must start from index 0 (not block on the old
// index), and a change made after the failure must still be seen.
func TestFollow_aFailedQueryIsFollowedByOneThatDoesNotBlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := testenv.UniquePrefix(t.Name()) + "/k"
	c := newClient(t, agent.ManagementToken)
	if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		indexes []string
	)
	target, _ := url.Parse("http://" + agent.Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		indexes = append(indexes, r.URL.Query().Get("index"))
		n := len(indexes)
		mu.Unlock()
		if n == 2 {
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	pc, err := New(Settings{Address: strings.TrimPrefix(srv.URL, "http://"), Token: agent.ManagementToken, Retry: RetrySettings{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	f := &Follower{Wait: 10 * time.Second}
	var seen []string
	failed := 0
	err = Follow(ctx, f, func(o *api.QueryOptions) (*api.KVPair, *api.QueryMeta, error) {
		return pc.KV().Get(key, o)
	}, func(p *api.KVPair, err error) bool {
		if err != nil {
			failed++
			if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte("2")}, nil); err != nil {
				t.Error(err)
				return false
			}
			return true
		}
		if f.Changed() {
			seen = append(seen, string(p.Value))
		}
		return string(p.Value) != "2"
	})
	if err != nil {
		t.Fatalf("Follow: %v (saw %q)", err, seen)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != 1 || len(indexes) < 3 || indexes[0] != "" || indexes[1] == "" || indexes[2] != "" {
		t.Errorf("queries sent with index %q, %d failed; want the first and the one after the failure without an index", indexes, failed)
	}
	if strings.Join(seen, ",") != "1,2" {
		t.Errorf("values seen %q, want 1 then 2", seen)
	}
}
