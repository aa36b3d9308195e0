package lockproto

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A waiter that loses the race for a freed key (another session locked it
// between the waiter's read and its lock transaction) waits on the new
// holder from the consistent read that told it so: its next read blocks at
// that read's index instead of reading the same state again at once.
func TestMutex_aLostRaceWaitsFromItsOwnConsistentRead(t *testing.T) {
	_, key, ctx := holdTest(t)
	direct := agent.Client()
	session := func(name string) string {
		t.Helper()
		id, _, err := direct.Session().Create(&api.SessionEntry{Name: name, TTL: "10s", LockDelay: time.Nanosecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = direct.Session().Destroy(id, nil) })
		return id
	}
	first, winner := session("first"), session("winner")
	lock := func(id string) *api.KVPair {
		t.Helper()
		pair := &api.KVPair{Key: key, Session: id, Flags: lockmodel.LockFlagValue}
		if ok, _, err := direct.KV().Acquire(pair, nil); err != nil || !ok {
			t.Fatalf("acquire %s for %s: %v %v", key, id, ok, err)
		}
		got, _, err := direct.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	lock(first)

	proxy := testenv.NewRequestLog(t, agent.Addr)
	var won *api.KVPair
	var once sync.Once
	proxy.Before(func(method, path string) {
		if method == http.MethodPut && path == "/v1/txn" {
			once.Do(func() { won = lock(winner) }) // the race, lost on purpose
		}
	})
	c, err := consul.New(consul.Settings{Address: proxy.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	p := holdProfile()
	waiter := newSession(ctx, t, c, "", p)
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := New(c, holdLock(key), p.LockDelay, discardLog(), Settings{}).Acquire(actx, waiter, func() []byte { return []byte(t.Name()) })
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err == nil {
			t.Error("the waiter acquired the lock the winner holds")
		}
	}()

	proxy.WaitKeyReads(t, key, 2) // the waiter blocks on the first holder
	if _, _, err := direct.KV().Release(&api.KVPair{Key: key, Session: first, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	// Wake-up, the refused lock, its consistent read, then the wait.
	reads := proxy.WaitKeyReads(t, key, 4)
	consistentAt := -1
	for i, r := range reads {
		if i >= 2 && r.Query.Has("consistent") {
			consistentAt = i
			break
		}
	}
	if consistentAt < 0 || consistentAt+1 >= len(reads) {
		t.Fatalf("no consistent read after the refused lock followed by a wait; reads: %v", reads)
	}
	next, want := reads[consistentAt+1], strconv.FormatUint(won.ModifyIndex, 10)
	if got := next.Query.Get("index"); got != want {
		t.Fatalf("after the lost race the waiter read %s: want a blocking read at the winner's index %s (reads: %v)", next, want, reads)
	}
}

// A runner's mutex value carries its session's lock-delay, as a
// semaphore holder's does: a waiter learns it from the key it already
// reads instead of reading the holder's session (one request less per
// waiter at every hand-over; at 100 waiters, 100 requests).
func TestMutex_waiterLearnsTheHoldersLockDelayFromItsValue(t *testing.T) {
	c, key, ctx := holdTest(t)
	p, lock := holdProfile(), holdLock(key)
	value := func() []byte {
		v, _ := json.Marshal(lockmodel.HolderValue{Node: agent.NodeName, PID: 1, Started: time.Now().UTC()})
		return v
	}
	held := newSession(ctx, t, c, "", p)
	proto := New(c, lock, p.LockDelay, discardLog(), Settings{})
	var written []byte
	if _, err := proto.Acquire(ctx, held, func() []byte { written = value(); return written }); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := proto.Release(context.Background(), held, written); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if d, ok := lockmodel.HolderLockDelay(pair.Value); !ok || d != 15*time.Second {
		t.Fatalf("holder value %s: want lock_delay 15s (the session's), got %s %v", pair.Value, d, ok)
	}

	proxy := testenv.NewRequestLog(t, agent.Addr)
	pc, err := consul.New(consul.Settings{Address: proxy.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	waiter := newSession(ctx, t, pc, "", p)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := New(pc, lock, p.LockDelay, discardLog(), Settings{}).Acquire(wctx, waiter, value)
		done <- err
	}()
	proxy.WaitKeyReads(t, key, 2) // waiting on the holder
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the waiter acquired a held lock")
	}
	for _, r := range proxy.Requests() {
		if r.Path == "/v1/session/info/"+held.ID {
			t.Fatalf("the waiter read the holder's session (%s) for a lock-delay its value carries", r)
		}
	}
}

// holdProfile is the profile the protocol tests' sessions are created
// from: TTL 10s, lock-delay 15s.
func holdProfile() lockmodel.Profile {
	return lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second}.Resolve()
}

// holdLock is a mutex whose waiters race on key.
func holdLock(key string) lockmodel.Lock {
	return lockmodel.Lock{Name: "hold", Prefix: key, Key: key, Limit: 1}
}
