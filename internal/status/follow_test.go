package status

import (
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

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestStatusWatch_aListingWhoseIndexWentBackIsReadAgainFromIndex0: when
// the X-Consul-Index of a listing goes back (an agent restarted with a
// lower index, a snapshot restored), -watch reads it again from index 0,
// Consul's blocking-query rule (consul.Follower), not by blocking on the
// lower index. The real agent answers through a proxy that lowers the
// index of one answer of the lock keys' listing to 1.
func TestStatusWatch_aListingWhoseIndexWentBackIsReadAgainFromIndex0(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	l := f.lock(lockmodel.Lock{Name: "job", SessionDefaults: "strict"}, false)
	s := f.session("15s", "0s", "release")

	keys := "/v1/kv/" + f.prefix
	var (
		mu              sync.Mutex
		armed, lowered  bool
		reported        bool
		indexAfterLower = make(chan string, 1)
	)
	target, _ := url.Parse("http://" + agent.Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		mu.Lock()
		defer mu.Unlock()
		q := resp.Request.URL
		if armed && !lowered && strings.HasPrefix(q.Path, keys) && q.Query().Get("index") != "" {
			resp.Header.Set("X-Consul-Index", "1")
			lowered = true
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if lowered && !reported && strings.HasPrefix(r.URL.Path, keys) {
			reported = true
			indexAfterLower <- r.URL.Query().Get("index")
		}
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // after the watch stops (its blocking queries)
	t.Setenv("CONSUL_HTTP_ADDR", strings.TrimPrefix(srv.URL, "http://"))

	pr := f.watch(nil)
	pr.next(t) // the first frame: every listing answered, the watches block

	mu.Lock()
	armed = true
	mu.Unlock()
	f.acquire(l, s, time.Now()) // the blocking listing of the lock keys returns, index lowered
	select {
	case idx := <-indexAfterLower:
		if idx != "" {
			t.Errorf("after its index went back to 1, the lock keys were listed with ?index=%s, want no index (a read from 0)", idx)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no listing of the lock keys after the lowered answer")
	}
}
