package lockproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

var agent *testenv.Agent

func TestMain(m *testing.M) {
	code := testenv.RunWithAgent(m, &agent)
	os.Exit(code)
}

// holdSpec is a test's hold: the lock and profile AcquireHold takes, and
// the options most tests set.
type holdSpec struct {
	Lock        lockmodel.Lock
	Profile     lockmodel.Profile
	SessionName string
	Session     *Session
	Grace       time.Duration
	Value       func() []byte
	Log         *slog.Logger
}

func holdOptions(t *testing.T, key string) holdSpec {
	return holdSpec{
		Lock:        lockmodel.Lock{Name: "hold", Prefix: key, Key: key, Limit: 1},
		Profile:     lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second}.Resolve(),
		SessionName: t.Name(),
		Grace:       time.Second,
		Value:       func() []byte { return []byte(t.Name()) },
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// acquireHold is AcquireHold of o, with extra options after o's.
func acquireHold(ctx context.Context, c *consul.Client, o holdSpec, extra ...HoldOption) (*Hold, error) {
	opts := []HoldOption{WithSessionName(o.SessionName), WithGrace(o.Grace), WithValue(o.Value), WithLogger(o.Log)}
	if o.Session != nil {
		opts = append(opts, WithSession(o.Session))
	}
	return AcquireHold(ctx, c, o.Lock, o.Profile, append(opts, extra...)...)
}

// holdTest is a client with the management token, a key of the test's own
// and a context bounded to a minute.
func holdTest(t *testing.T) (*consul.Client, string, context.Context) {
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, testenv.UniquePrefix(t.Name()) + "/.lock", ctx
}

// unlock ends h (Unlock) and fails the test on an error.
func unlock(t *testing.T, h *Hold) {
	t.Helper()
	if err := h.Unlock(context.Background()); err != nil {
		t.Errorf("unlock: %v", err)
	}
}

// A hold is the lock acquired with a txn lock op (its fencing token is the
// key's ModifyIndex), Done closes when the key is taken away, and Unlock
// releases the key before it destroys the session, so the next holder
// does not wait for the lock-delay.
func TestHold_acquiresNoticesLossAndReleasesBeforeDestroying(t *testing.T) {
	c, key, ctx := holdTest(t)

	h, err := acquireHold(ctx, c, holdOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	kv := agent.Client().KV()
	pair, _, err := kv.Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != h.Session.ID || pair.ModifyIndex != h.Grant.FencingToken ||
		pair.Flags != lockmodel.LockFlagValue {
		t.Fatalf("key after AcquireHold: %+v (%v); hold %+v", pair, err, h.Grant)
	}
	unlock(t, h)
	pair, _, _ = kv.Get(key, &api.QueryOptions{RequireConsistent: true})
	if pair == nil || pair.Session != "" {
		t.Fatalf("key after Release: %+v; want it released and kept", pair)
	}
	// Released, not destroyed with the key held: no lock-delay for the
	// next holder, although the profile has 15s.
	start := time.Now()
	next, err := acquireHold(ctx, c, holdOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the next hold waited %s: the release did not come before the destroy", waited)
	}
	if next.Grant.FencingToken <= h.Grant.FencingToken {
		t.Fatalf("fencing token %d, not above the previous hold's %d", next.Grant.FencingToken, h.Grant.FencingToken)
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

// A hold that waited longer than the stop rule lets a holder go without
// contact counts its contact from the renewals made while it waited, not
// from the session's creation: the ephemeral lock, which takes the session
// over, would otherwise report "Lock May Be Lost" on its first transient
// renewal failure after a long wait (issue 22).
func TestHold_lastContactIsTheLatestRenewalAfterALongWait(t *testing.T) {
	c, key, ctx := holdTest(t)

	// Another session holds the key for longer than LossAfter.
	other, _, err := agent.Client().Session().Create(&api.SessionEntry{TTL: "30s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Client().Session().Destroy(other, nil) //nolint:errcheck // the test's own session
	pair := &api.KVPair{Key: key, Session: other, Flags: lockmodel.LockFlagValue}
	if ok, _, err := agent.Client().KV().Acquire(pair, nil); err != nil || !ok {
		t.Fatalf("the other session's acquisition: %v %v", ok, err)
	}

	o := holdOptions(t, key)
	o.Profile = lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: time.Second, RenewEvery: time.Second}.Resolve()
	rule := lockmodel.NewStopRule(o.Profile, o.Grace)
	heldFor := rule.LossAfter() + 3*time.Second
	go func() {
		time.Sleep(heldFor)
		agent.Client().KV().Release(pair, nil) //nolint:errcheck // the hold below fails the test if the key stays held
	}()

	h, err := acquireHold(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, h)
	if waited := time.Since(h.Session.Created); waited < heldFor {
		t.Fatalf("acquired after %s, before the other session released (%s)", waited, heldFor)
	}
	if since := time.Since(h.LastContact()); since > rule.LossAfter() {
		t.Fatalf("last contact %s ago (session created %s ago): a renewal failing now would count as loss after %s",
			since.Round(time.Millisecond), time.Since(h.Session.Created).Round(time.Millisecond), rule.LossAfter())
	}
}

// A hold takes a session its caller created, hands every observation to
// the caller's hook, and writes at release the value its winning attempt
// wrote, not a new one: what `consullock run` relies on.
func TestHold_usesTheCallersSessionHookAndWinningValue(t *testing.T) {
	c, key, ctx := holdTest(t)

	o := holdOptions(t, key)
	o.Profile = lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: 15 * time.Second, RenewEvery: 500 * time.Millisecond}.Resolve()
	s, err := CreateSession(ctx, c, t.Name(), "", o.Profile)
	if err != nil {
		t.Fatal(err)
	}
	o.Session = s
	var calls int
	o.Value = func() []byte { calls++; return []byte(fmt.Sprintf("attempt %d", calls)) }
	seen := make(chan Observation, 64)
	observer := WithObserver(func(ob Observation, held bool, _ time.Time) {
		select {
		case seen <- ob:
		default:
		}
	})

	h, err := acquireHold(ctx, c, o, observer)
	if err != nil {
		t.Fatal(err)
	}
	if h.Session != s {
		t.Fatalf("hold session %+v, not the caller's %+v", h.Session, s)
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
	if err != nil || pair == nil || pair.Session != "" || string(pair.Value) != string(h.Value) || string(h.Value) != "attempt 1" {
		t.Fatalf("key after Release: %+v (%v); want it released with the winning value %q", pair, err, h.Value)
	}
	if info, _, _ := agent.Client().Session().Info(s.ID, &api.QueryOptions{RequireConsistent: true}); info != nil {
		t.Fatalf("the caller's session %s survived Release", s.ID)
	}
}

// WithTry: an acquisition that finds the mutex key held by another
// session returns ErrLocked instead of waiting, and ends its session;
// the holder keeps the lock.
func TestHold_withTryReturnsErrLockedWhenHeld(t *testing.T) {
	c, key, ctx := holdTest(t)
	a, err := acquireHold(ctx, c, holdOptions(t, key))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, a)
	s, err := CreateSession(ctx, c, t.Name()+" B", "", holdOptions(t, key).Profile)
	if err != nil {
		t.Fatal(err)
	}
	o := holdOptions(t, key)
	o.Session = s
	b, err := acquireHold(ctx, c, o, WithTry())
	if !errors.Is(err, ErrLocked) || b != nil {
		t.Fatalf("AcquireHold with the key held, WithTry = %v, %v; want ErrLocked", b, err)
	}
	if info, _, err := agent.Client().Session().Info(s.ID, &api.QueryOptions{RequireConsistent: true}); err != nil || info != nil {
		t.Errorf("B's session after ErrLocked: %+v (%v); want it destroyed", info, err)
	}
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != a.Session.ID {
		t.Errorf("key after B's try: %+v (%v); want A's", pair, err)
	}
}
