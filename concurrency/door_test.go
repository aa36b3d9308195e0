package concurrency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The door (internal/libhold, acquireHeld): a lock held through a session
// of its own, renewed, watched and judged per hold, released and destroyed
// by Unlock. These tests were lockproto's Hold's, whose job the door took.

// DoorAgent points at the Consul agent of the package's tests. The agent
// is started by the external test package's TestMain (main_test.go; a test
// binary has one TestMain), which these internal tests cannot see: its
// init (libhold_test.go) sets DoorAgent to its own agent variable.
var DoorAgent **testenv.Agent

// doorAgent is the running agent.
func doorAgent(t testing.TB) *testenv.Agent {
	t.Helper()
	if DoorAgent == nil || *DoorAgent == nil {
		t.Fatal("no Consul agent: DoorAgent is set by the external test package (libhold_test.go)")
	}
	return *DoorAgent
}

// doorSpec is a test's hold: the lock and profile the door takes, and the
// options.
type doorSpec struct {
	Lock    lockmodel.Lock
	Profile lockmodel.Profile
	libhold.Options
}

// doorOptions are the options most tests set.
func doorOptions(t *testing.T, key string) doorSpec {
	return doorSpec{
		Lock:    lockmodel.Lock{Name: "hold", Prefix: key, Key: key, Limit: 1},
		Profile: lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second}.Resolve(),
		Options: libhold.Options{
			SessionName: t.Name(),
			Grace:       time.Second,
			Value:       func() []byte { return []byte(t.Name()) },
			Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
	}
}

// acquireDoor holds o through the door.
func acquireDoor(ctx context.Context, c *consul.Client, o doorSpec) (libhold.Held, error) {
	return libhold.Acquire(ctx, c, o.Lock, o.Profile, o.Options)
}

// doorTest is a client with the management token, a key of the test's own
// and a context bounded to a minute.
func doorTest(t *testing.T) (*consul.Client, string, context.Context) {
	agent := doorAgent(t)
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, testenv.UniquePrefix(t.Name()) + "/.lock", ctx
}

// unlock ends h (Unlock) and fails the test on an error.
func unlock(t *testing.T, h libhold.Held) {
	t.Helper()
	if err := h.Unlock(context.Background()); err != nil {
		t.Errorf("unlock: %v", err)
	}
}

// A hold is the lock acquired with a txn lock op (its fencing token is the
// key's ModifyIndex), Done closes when the key is taken away, and Unlock
// releases the key before it destroys the session, so the next holder
// does not wait for the lock-delay.
func TestDoor_acquiresNoticesLossAndReleasesBeforeDestroying(t *testing.T) {
	agent := doorAgent(t)
	c, key, ctx := doorTest(t)

	h, err := acquireDoor(ctx, c, doorOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	kv := agent.Client().KV()
	pair, _, err := kv.Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != h.Session().ID || pair.ModifyIndex != h.Grant().FencingToken ||
		pair.Flags != lockmodel.LockFlagValue {
		t.Fatalf("key after the door's Acquire: %+v (%v); hold %+v", pair, err, h.Grant())
	}
	unlock(t, h)
	pair, _, _ = kv.Get(key, &api.QueryOptions{RequireConsistent: true})
	if pair == nil || pair.Session != "" {
		t.Fatalf("key after Release: %+v; want it released and kept", pair)
	}
	// Released, not destroyed with the key held: no lock-delay for the
	// next holder, although the profile has 15s.
	start := time.Now()
	next, err := acquireDoor(ctx, c, doorOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the next hold waited %s: the release did not come before the destroy", waited)
	}
	if next.Grant().FencingToken <= h.Grant().FencingToken {
		t.Fatalf("fencing token %d, not above the previous hold's %d", next.Grant().FencingToken, h.Grant().FencingToken)
	}

	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Lost not closed after the key was deleted")
	}
	if next.Reason() == "" {
		t.Fatal("no reason given for the loss")
	}
	unlock(t, next)
}

// A hold takes a session its caller created, hands every observation to
// the caller's hook, and writes at release the value its winning attempt
// wrote, not a new one: what `consullock run` relies on.
func TestDoor_usesTheCallersSessionHookAndWinningValue(t *testing.T) {
	agent := doorAgent(t)
	c, key, ctx := doorTest(t)

	o := doorOptions(t, key)
	o.Profile = lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second, RenewEvery: 500 * time.Millisecond}.Resolve()
	s, err := lockproto.CreateSession(ctx, c, t.Name(), "", o.Profile)
	if err != nil {
		t.Fatal(err)
	}
	o.Session = s
	var calls int
	o.Value = func() []byte { calls++; return []byte(fmt.Sprintf("attempt %d", calls)) }
	seen := make(chan lockproto.Observation, 64)
	o.Observer = func(ob lockproto.Observation, held bool, _ time.Time) {
		select {
		case seen <- ob:
		default:
		}
	}

	h, err := acquireDoor(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	if h.Session() != s {
		t.Fatalf("hold session %+v, not the caller's %+v", h.Session(), s)
	}
	select {
	case ob := <-seen:
		if ob.Session != s.ID {
			t.Fatalf("observation about session %q, want %q", ob.Session, s.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the observer got nothing within 10s (renewal every 500ms)")
	}
	unlock(t, h)
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != "" || string(pair.Value) != string(h.Value()) || string(h.Value()) != "attempt 1" {
		t.Fatalf("key after Release: %+v (%v); want it released with the winning value %q", pair, err, h.Value())
	}
	if info, _, _ := agent.Client().Session().Info(s.ID, &api.QueryOptions{RequireConsistent: true}); info != nil {
		t.Fatalf("the caller's session %s survived Release", s.ID)
	}
}

// Settings.Try: an acquisition that finds the mutex key held by another
// session returns ErrLocked instead of waiting, and ends its session;
// the holder keeps the lock.
func TestDoor_withTryReturnsErrLockedWhenHeld(t *testing.T) {
	agent := doorAgent(t)
	c, key, ctx := doorTest(t)
	a, err := acquireDoor(ctx, c, doorOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, a)
	s, err := lockproto.CreateSession(ctx, c, t.Name()+" B", "", doorOptions(t, key).Profile)
	if err != nil {
		t.Fatal(err)
	}
	o := doorOptions(t, key)
	o.Session = s
	o.Protocol.Try = true
	b, err := acquireDoor(ctx, c, o)
	if !errors.Is(err, lockproto.ErrLocked) || b != nil {
		t.Fatalf("the door's Acquire with the key held, Try = %v, %v; want ErrLocked", b, err)
	}
	if info, _, err := agent.Client().Session().Info(s.ID, &api.QueryOptions{RequireConsistent: true}); err != nil || info != nil {
		t.Errorf("B's session after ErrLocked: %+v (%v); want it destroyed", info, err)
	}
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != a.Session().ID {
		t.Errorf("key after B's try: %+v (%v); want A's", pair, err)
	}
}

// Issue 44: deadlines counted from the last contact (the guard's kill-by,
// the outcome's deadlines) are on the monotonic clock, so that a step of
// the wall clock does not move them. The session's last contact keeps the
// monotonic reading of the time it was given (time.Time's String shows it
// as m=), from its creation on.
func TestDoor_lastContactKeepsTheMonotonicReading(t *testing.T) {
	// A session started has its creation as its last contact, never the
	// zero time. (Renewals go nowhere: port 1 refuses.)
	c, err := consul.New(consul.Settings{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	started := startSession(c, &lockproto.Session{ID: "unit", Created: created},
		lockmodel.SessionProfile{Name: "unit", TTL: 10 * time.Second}.Resolve(), newConfig(nil))
	got := started.lastContact()
	started.cancel(ErrSessionClosed)
	started.stopRenew()
	started.wg.Wait()
	if got.IsZero() || !got.Equal(created) || !strings.Contains(got.String(), " m=") {
		t.Fatalf("a session just started: lastContact() = %s, want its creation %s with its monotonic reading", got, created)
	}

	var s Session
	now := time.Now()
	s.storeContact(now)
	got = s.lastContact()
	if !got.Equal(now) || !strings.Contains(got.String(), " m=") {
		t.Fatalf("lastContact() = %s, want %s with its monotonic reading", got, now)
	}
	// Stripping the monotonic reading is what a wall-clock step moves:
	// time.Until(got) must not depend on the wall clock.
	if got.Round(0).String() == got.String() {
		t.Fatal("lastContact() has no monotonic reading")
	}
}
