package concurrency_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Orphan leaves the session and its lock to another process (etcd's
// Session.Orphan): Done is closed with ErrSessionOrphaned, the key stays
// held by the live session, no renewal is sent after it, and Close still
// releases the key and ends the session.
func TestSession_orphanKeepsTheSessionAndItsLock(t *testing.T) {
	const every = time.Second
	ctx := context.Background()
	counter, client := newRenewCounter(t)
	s, err := concurrency.NewSession(ctx, client, concurrency.WithTTL(30*time.Second), concurrency.WithLockDelay(0),
		concurrency.WithRenewEvery(every))
	must(t, err)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	m, err := concurrency.NewMutex(s, key)
	must(t, err)
	must(t, m.Lock(ctx))
	<-counter.renewed // renewing before the orphan

	s.Orphan()
	orphaned := time.Now()
	waitClosed(t, s.Done(), "the session's Done")
	waitClosed(t, m.Done(), "the mutex's Done")
	if !errors.Is(s.Err(), concurrency.ErrSessionOrphaned) || !errors.Is(m.Err(), concurrency.ErrSessionOrphaned) {
		t.Errorf("after Orphan: session Err %v, mutex Err %v; want ErrSessionOrphaned", s.Err(), m.Err())
	}

	kv, sessions := agent.Client().KV(), agent.Client().Session()
	consistent := &api.QueryOptions{RequireConsistent: true}
	pair, _, err := kv.Get(key, consistent)
	must(t, err)
	if pair == nil || pair.Session != s.ID() {
		t.Fatalf("after Orphan: key %s is %+v, want it held by session %s", key, pair, s.ID())
	}
	// Three renewal intervals: a renewal still sent would be answered
	// after Orphan returned (a busy machine can only delay one, so this
	// cannot fail wrongly; a renewal Orphan cancelled in flight reaches
	// the proxy, if at all, with its context ended, and is not answered
	// 200).
	time.Sleep(3 * every)
	_, seen := counter.seen()
	for _, r := range seen {
		if r.at.After(orphaned) && r.status == http.StatusOK {
			t.Errorf("a renewal reached Consul at %s, after Orphan returned at %s", r.at.Format(time.StampMilli), orphaned.Format(time.StampMilli))
		}
	}
	entry, _, err := sessions.Info(s.ID(), consistent)
	must(t, err)
	if entry == nil {
		t.Fatal("the orphaned session was destroyed")
	}

	must(t, s.Close(ctx))
	pair, _, err = kv.Get(key, consistent)
	must(t, err)
	if pair != nil && pair.Session != "" {
		t.Errorf("after Close: key still held by session %s", pair.Session)
	}
	entry, _, err = sessions.Info(s.ID(), consistent)
	must(t, err)
	if entry != nil {
		t.Error("after Close: the session still exists")
	}
}
