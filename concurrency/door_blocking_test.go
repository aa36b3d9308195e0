package concurrency

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// blockedPrefix is a prefix of the test's own and a blocking key beside
// it, written (as a pause record would be).
func blockedPrefix(t *testing.T) (prefix, block string) {
	t.Helper()
	prefix = testenv.UniquePrefix(t.Name())
	block = prefix + "-pause"
	if _, err := doorAgent(t).Client().KV().Put(&api.KVPair{Key: block, Value: []byte("paused")}, nil); err != nil {
		t.Fatal(err)
	}
	return prefix, block
}

// queuedFixture is a queued mutex on a fresh prefix and a management
// client.
func queuedFixture(t *testing.T) (*consul.Client, lockmodel.Lock) {
	t.Helper()
	agent := doorAgent(t)
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.UniquePrefix(t.Name())
	return c, lockmodel.Lock{Name: "q", Prefix: prefix, Key: prefix + "/" + lockmodel.LockKeyName, Limit: 1, Waiters: lockmodel.WaitersQueue}
}

// semaphoreProfile is a semaphore holder's profile (behavior delete, no
// node checks) with lockDelay.
func semaphoreProfile(lockDelay time.Duration) lockmodel.Profile {
	return lockmodel.SessionProfile{Name: "sem", TTL: 10 * time.Second, LockDelay: lockDelay,
		Behavior: lockmodel.BehaviorDelete, NodeChecks: []string{}}.Resolve()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
	}
}

// With a blocking key (Settings.BlockingKey, the runner's pause record) an
// acquisition reads the key in its own transaction: while the key exists
// the door's Acquire returns ErrBlocked and the lock is given up at once
// (nobody holds it), for a racing mutex, a queued one and a semaphore;
// once the key is gone the same hold acquires.
func TestDoor_blockingKeyRefusesTheAcquisitionWhileItExists(t *testing.T) {
	for _, tc := range []struct {
		name string
		lock func(prefix string) lockmodel.Lock
	}{
		{"race", func(p string) lockmodel.Lock {
			return lockmodel.Lock{Name: "b", Prefix: p, Key: p + "/.lock", Limit: 1}
		}},
		{"queue", func(p string) lockmodel.Lock {
			return lockmodel.Lock{Name: "b", Prefix: p, Key: p + "/.lock", Limit: 1, Waiters: lockmodel.WaitersQueue}
		}},
		{"semaphore", func(p string) lockmodel.Lock {
			return lockmodel.Lock{Name: "b", Prefix: p, Key: p + "/.lock", Limit: 2}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := doorAgent(t)
			c, _, ctx := doorTest(t)
			prefix, block := blockedPrefix(t)
			kv := agent.Client().KV()
			o := doorOptions(t, prefix+"/.lock")
			o.Lock = tc.lock(prefix)
			if o.Lock.IsSemaphore() {
				o.Profile = semaphoreProfile(time.Second)
			}
			o.Protocol.BlockingKey = block
			h, err := acquireDoor(ctx, c, o)
			if !errors.Is(err, lockproto.ErrBlocked) || h != nil {
				t.Fatalf("the door's Acquire while the blocking key exists = %v, %v; want ErrBlocked", h, err)
			}
			pair, _, err := kv.Get(o.Lock.Key, &api.QueryOptions{RequireConsistent: true})
			if err != nil || (pair != nil && pair.Session != "") {
				t.Fatalf("lock key after the refusal: %+v (%v); want it not held", pair, err)
			}
			if o.Lock.IsSemaphore() && pair != nil {
				if st, err := lockmodel.DecodeSemaphoreState(pair.Value); err != nil || len(st.Holders) != 0 {
					t.Fatalf("holder table after the refusal: %s (%v); want no holder", pair.Value, err)
				}
			}
			if _, err := kv.Delete(block, nil); err != nil {
				t.Fatal(err)
			}
			h, err = acquireDoor(ctx, c, o)
			if err != nil {
				t.Fatalf("the door's Acquire once the blocking key is gone: %v", err)
			}
			unlock(t, h)
		})
	}
}

// A lock handed over while the blocking key exists: the previous holder's
// transaction took it for the first in line, which reads the key once,
// consistently, returns ErrBlocked and releases the lock without handing it
// on, so nobody holds it.
func TestDoorHandOff_aBlockingKeyStopsTheHandOff(t *testing.T) {
	agent := doorAgent(t)
	c, l := queuedFixture(t)
	l.Waiters = lockmodel.WaitersHandOff
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	block := l.Prefix + "-pause"
	kv := agent.Client().KV()
	o := doorOptions(t, l.Key)
	o.Lock = l
	o.Protocol.BlockingKey = block
	holder, err := acquireDoor(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	var session string
	go func() {
		h, err := acquireDoor(ctx, c, o)
		if h != nil {
			session = h.Session().ID
			unlock(t, h)
		}
		waiter <- err
	}()
	waitFor(t, func() bool {
		pairs, _, _ := kv.List(lockmodel.WaiterQueuePrefix(l), nil)
		return len(pairs) == 1
	})
	if _, err := kv.Put(&api.KVPair{Key: block, Value: []byte("paused")}, nil); err != nil {
		t.Fatal(err)
	}
	unlock(t, holder)
	if err := <-waiter; !errors.Is(err, lockproto.ErrBlocked) {
		t.Fatalf("the first in line's acquisition = %v (session %q); want ErrBlocked: the lock is not handed over while the key exists", err, session)
	}
	if pair, _, _ := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true}); pair == nil || pair.Session != "" {
		t.Fatalf("lock key %+v; want it released, held by nobody", pair)
	}
}

// The read of the blocking key needs key read only (a worker's token): a
// token that may read it is refused while it exists, with no 403; a
// token that may not read it is not told (the key is left out of the
// results, as Consul filters any read), so the runner adds the key only
// when it may read it.
func TestDoor_blockingKeyNeedsReadOnly(t *testing.T) {
	agent := doorAgent(t)
	_, _, ctx := doorTest(t)
	prefix, block := blockedPrefix(t)
	o := doorOptions(t, prefix+"/.lock")
	o.Protocol.BlockingKey = block
	for _, tc := range []struct {
		name    string
		rules   string
		blocked bool
	}{
		{"key read", fmt.Sprintf("key %q { policy = \"read\" }\n", block), true},
		{"no read", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := fmt.Sprintf("key %q { policy = \"write\" }\nsession_prefix \"\" { policy = \"write\" }\n", o.Lock.Key) + tc.rules
			tok, err := agent.MintToken(testenv.UniquePrefix(t.Name()), rules, 0)
			if err != nil {
				t.Fatal(err)
			}
			c, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
			if err != nil {
				t.Fatal(err)
			}
			h, err := acquireDoor(ctx, c, o)
			if tc.blocked != errors.Is(err, lockproto.ErrBlocked) || (!tc.blocked && err != nil) {
				t.Fatalf("the door's Acquire with %s on the blocking key = %v; want blocked %v and no other error", tc.name, err, tc.blocked)
			}
			if h != nil {
				unlock(t, h)
			}
		})
	}
}
