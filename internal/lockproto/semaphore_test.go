package lockproto

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// semaphoreFixture is a semaphore (limit 2) on a fresh prefix, and a
// management client.
func semaphoreFixture(t *testing.T) (*consul.Client, lockmodel.Lock) {
	t.Helper()
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.UniquePrefix(t.Name())
	return c, lockmodel.Lock{Name: "sem", Prefix: prefix, Key: prefix + "/" + lockmodel.LockKeyName, Limit: 2}
}

func semaphoreProfile(lockDelay time.Duration) lockmodel.Profile {
	return lockmodel.SessionProfile{Name: "sem", TTL: 10 * time.Second, LockDelay: lockDelay,
		Behavior: lockmodel.BehaviorDelete, NodeChecks: []string{}}.Resolve()
}

func newSession(ctx context.Context, t *testing.T, c *consul.Client, node string, p lockmodel.Profile) *Session {
	t.Helper()
	s, err := CreateSession(ctx, c, t.Name(), node, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DestroySession(context.Background(), c, s.ID) })
	return s
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Issue 22, hole 3: the fencing token of a semaphore admission is the
// admission's own write, so it grows from admission to admission also when
// the holder value never changes (the ephemeral lock's fixed `value`).
// Contender A created its key before B but is admitted after B: A's token
// must be above B's. Before the fix, A's admission rewrote an identical
// entry, Consul kept its ModifyIndex, and A got its key's creation index,
// below B's token. The data source and status read the contender key's
// ModifyIndex: it must be the same token.
func TestSemaphore_tokenIsTheAdmissionsOwnWriteWithAFixedValue(t *testing.T) {
	c, l := semaphoreFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, ok := New(c, l, time.Second, discardLog(), Settings{}).(*semaphore)
	if !ok {
		t.Fatal("New did not return the semaphore protocol for a lock with limit > 1")
	}
	fixed := func() []byte { return []byte("deploy from CI") }
	a := newSession(ctx, t, c, "", semaphoreProfile(time.Second))
	b := newSession(ctx, t, c, "", semaphoreProfile(time.Second))

	// A creates its contender key first (as a contender does before it
	// waits), then B is admitted, then A.
	if _, ok, err := lockKey(ctx, c, &api.KVPair{Key: m.contenderKey(a), Value: fixed(), Session: a.ID, Flags: lockmodel.SemaphoreFlagValue}); err != nil || !ok {
		t.Fatalf("create A's contender key: %v, %v", ok, err)
	}
	gb, err := m.Acquire(ctx, b, fixed)
	if err != nil {
		t.Fatal(err)
	}
	ga, err := m.Acquire(ctx, a, fixed)
	if err != nil {
		t.Fatal(err)
	}
	if ga.FencingToken <= gb.FencingToken {
		t.Fatalf("A admitted after B got fencing token %d, not above B's %d: the token went backwards", ga.FencingToken, gb.FencingToken)
	}

	// Every reader reports the same token: the contender key's ModifyIndex,
	// which is also the holder table's write of the last admission.
	view, err := store.New(c).ReadLock(ctx, l.Key, true)
	if err != nil {
		t.Fatal(err)
	}
	if view.Pair.ModifyIndex != ga.FencingToken {
		t.Errorf("holder table ModifyIndex %d, want A's admission %d", view.Pair.ModifyIndex, ga.FencingToken)
	}
	want := map[string]uint64{a.ID: ga.FencingToken, b.ID: gb.FencingToken}
	if view.Semaphore == nil || len(view.Semaphore.Holders) != 2 {
		t.Fatalf("semaphore view %+v; want two holders", view.Semaphore)
	}
	for _, h := range view.Semaphore.Holders {
		if h.ModifyIndex != want[h.Session] {
			t.Errorf("holder %s: contender key ModifyIndex %d, want its grant's token %d", h.Session, h.ModifyIndex, want[h.Session])
		}
		if string(h.Value) != "deploy from CI" {
			t.Errorf("holder %s: value %q, want the fixed value unchanged", h.Session, h.Value)
		}
	}
}

// Issue 22, hole 2: a waiter counts a dead holder's own lock-delay, learnt
// from what the holder wrote into its contender key (readable with the key
// read a worker token has), not its own declared one. The holder's session
// lives on another node, so the waiter's worker token cannot read it; the
// holder's profile has lock_delay 8s, the waiter's 1s (lock_delay lowered
// while the holder runs on). Before the fix the waiter took the dead
// holder's slot 1s after it saw the session end, while the holder, which
// stops its command by its own 8s, could still be running it.
func TestSemaphore_waiterCountsADeadHoldersOwnLockDelay(t *testing.T) {
	c, l := semaphoreFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const holderDelay, waiterDelay = 8 * time.Second, time.Second

	elsewhere := "elsewhere-" + strings.ToLower(testenv.NewUUID()[:8])
	if _, err := agent.Client().Catalog().Register(&api.CatalogRegistration{Node: elsewhere, Address: "192.0.2.1"}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = agent.Client().Catalog().Deregister(&api.CatalogDeregistration{Node: elsewhere}, nil)
	})
	holderValue := func() []byte {
		v, _ := json.Marshal(lockmodel.HolderValue{Node: elsewhere, PID: 1, Started: time.Now().UTC(), Lock: l.Name})
		return v
	}
	holders := New(c, l, holderDelay, discardLog(), Settings{})
	h1 := newSession(ctx, t, c, elsewhere, semaphoreProfile(holderDelay))
	h2 := newSession(ctx, t, c, elsewhere, semaphoreProfile(holderDelay))
	for _, s := range []*Session{h1, h2} {
		if _, err := holders.Acquire(ctx, s, holderValue); err != nil {
			t.Fatal(err)
		}
	}
	pair, _, err := agent.Client().KV().Get(l.Prefix+"/"+h1.ID, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read h1's contender key: %+v, %v", pair, err)
	}
	if d, ok := lockmodel.HolderLockDelay(pair.Value); !ok || d != holderDelay {
		t.Fatalf("h1's contender key %s says lock_delay %s (%v); want %s", pair.Value, d, ok, holderDelay)
	}

	// The waiter: a worker token, key write on the prefix and session
	// write on the agent's node only.
	rules := fmt.Sprintf("key_prefix %q { policy = \"write\" }\nsession_prefix %q { policy = \"write\" }\n",
		l.Prefix+"/", agent.NodeName)
	tok, err := agent.MintToken("worker-"+testenv.NewUUID()[:8], rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := consul.New(consul.Settings{Address: agent.Addr, Token: tok.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sessionLockDelay(ctx, wc, h1.ID); ok {
		t.Fatal("the worker token reads the holder's session: the test needs one that cannot")
	}
	waiting := make(chan struct{})
	log := slog.New(&messageHandler{msg: "waiting for a semaphore slot", seen: waiting})
	w := newSession(ctx, t, wc, "", semaphoreProfile(waiterDelay))
	type result struct {
		g   Grant
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := New(wc, l, waiterDelay, log, Settings{}).Acquire(ctx, w, holderValue)
		done <- result{g, time.Now(), err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("the waiter got a slot while both were held: %+v", r)
	}

	// h1's session ends out of band (its node failed, say): its contender
	// key goes with it (behavior delete).
	ended := time.Now()
	if _, err := agent.Client().Session().Destroy(h1.ID, nil); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if waited := r.at.Sub(ended); waited < holderDelay {
		t.Fatalf("the waiter took the dead holder's slot %s after its session ended, before the holder's own lock_delay %s "+
			"(the waiter's is %s): the holder's command may still have been running", waited.Round(time.Millisecond), holderDelay, waiterDelay)
	}
}

// messageHandler closes seen the first time a record with message msg is
// logged.
type messageHandler struct {
	msg  string
	seen chan struct{}
	done bool
}

func (h *messageHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *messageHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg && !h.done {
		h.done = true
		close(h.seen)
	}
	return nil
}

func (h *messageHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *messageHandler) WithGroup(string) slog.Handler      { return h }
