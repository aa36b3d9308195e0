package lockproto

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// blockedPrefix is a prefix of the test's own and a blocking key beside
// it, written (as a pause record would be).
func blockedPrefix(t *testing.T) (prefix, block string) {
	t.Helper()
	prefix = testenv.UniquePrefix(t.Name())
	block = prefix + "-pause"
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: block, Value: []byte("paused")}, nil); err != nil {
		t.Fatal(err)
	}
	return prefix, block
}

// With a blocking key (WithBlockingKey, the runner's pause record) an
// acquisition reads the key in its own transaction: while the key exists
// AcquireHold returns ErrBlocked and the lock is given up at once (nobody
// holds it), for a racing mutex, a queued one and a semaphore; once the
// key is gone the same hold acquires.
func TestHold_blockingKeyRefusesTheAcquisitionWhileItExists(t *testing.T) {
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
			c, _, ctx := holdTest(t)
			prefix, block := blockedPrefix(t)
			kv := agent.Client().KV()
			o := holdOptions(t, prefix+"/.lock")
			o.Lock = tc.lock(prefix)
			if o.Lock.IsSemaphore() {
				o.Profile = semaphoreProfile(time.Second)
			}
			h, err := acquireHold(ctx, c, o, WithBlockingKey(block))
			if !errors.Is(err, ErrBlocked) || h != nil {
				t.Fatalf("AcquireHold while the blocking key exists = %v, %v; want ErrBlocked", h, err)
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
			h, err = acquireHold(ctx, c, o, WithBlockingKey(block))
			if err != nil {
				t.Fatalf("AcquireHold once the blocking key is gone: %v", err)
			}
			unlock(t, h)
		})
	}
}

// A lock handed over while the blocking key exists: the previous holder's
// transaction took it for the first in line, which reads the key once,
// consistently, returns ErrBlocked and releases the lock without handing it
// on, so nobody holds it.
func TestHoldHandOff_aBlockingKeyStopsTheHandOff(t *testing.T) {
	c, l := queuedFixture(t)
	l.Waiters = lockmodel.WaitersHandOff
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	block := l.Prefix + "-pause"
	kv := agent.Client().KV()
	o := holdOptions(t, l.Key)
	o.Lock = l
	holder, err := acquireHold(ctx, c, o, WithBlockingKey(block))
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	var session string
	go func() {
		h, err := acquireHold(ctx, c, o, WithBlockingKey(block))
		if h != nil {
			session = h.Session.ID
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
	if err := <-waiter; !errors.Is(err, ErrBlocked) {
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
func TestHold_blockingKeyNeedsReadOnly(t *testing.T) {
	_, _, ctx := holdTest(t)
	prefix, block := blockedPrefix(t)
	o := holdOptions(t, prefix+"/.lock")
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
			h, err := acquireHold(ctx, c, o, WithBlockingKey(block))
			if tc.blocked != errors.Is(err, ErrBlocked) || (!tc.blocked && err != nil) {
				t.Fatalf("AcquireHold with %s on the blocking key = %v; want blocked %v and no other error", tc.name, err, tc.blocked)
			}
			if h != nil {
				unlock(t, h)
			}
		})
	}
}
