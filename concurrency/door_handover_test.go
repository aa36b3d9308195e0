package concurrency

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The holder's watch starts blocking at the acquisition's index: the
// acquisition's own answer showed the key held there, so a first read
// answered at once would only repeat it (one request more on every
// hand-over, sent while the command starts).
func TestDoor_watchBlocksFromTheAcquisitionsIndex(t *testing.T) {
	agent := doorAgent(t)
	_, key, ctx := doorTest(t)
	proxy := testenv.NewRequestLog(t, doorAgent(t).Addr)
	c, err := consul.New(consul.Settings{Address: proxy.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	h, err := acquireDoor(ctx, c, doorOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, h)
	var watch []testenv.LoggedRequest
	for _, r := range proxy.WaitKeyReads(t, key, 2) {
		if r.Query.Has("consistent") {
			watch = append(watch, r)
		}
	}
	if len(watch) == 0 {
		t.Fatalf("no consistent read of %s after the acquisition; reads: %v", key, proxy.KeyReads(key))
	}
	want := strconv.FormatUint(h.Grant().FencingToken, 10)
	if got := watch[0].Query.Get("index"); got != want {
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
	proxy := testenv.NewRequestLog(t, doorAgent(t).Addr)
	client := func() *consul.Client {
		c, err := consul.New(consul.Settings{Address: proxy.Addr, Token: agent.ManagementToken})
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
	for len(proxy.KeyReads(key)) == 0 || !proxy.KeyReads(key)[len(proxy.KeyReads(key))-1].Query.Has("consistent") {
		time.Sleep(5 * time.Millisecond) // until the watch blocks
	}
	unlock(t, h)

	seen := map[string]bool{}
	for _, r := range proxy.Requests() {
		if r.Method == http.MethodPut && r.Path == "/v1/kv/"+key && r.Query.Has("release") {
			if !seen[r.Remote] {
				t.Fatalf("the release came over a new connection (%s); connections open before: %v", r.Remote, seen)
			}
			return
		}
		seen[r.Remote] = true
	}
	t.Fatalf("no release of %s seen", key)
}
