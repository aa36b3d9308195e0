package concurrency_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The door's internal tests (door_test.go) use the package's agent.
func init() { concurrency.DoorAgent = &agent }

// The ephemeral lock's door (internal/libhold): a hold that waited longer
// than the stop rule lets a holder go without contact reports as its last
// renewal one made while it waited, not the session's creation, so the
// ephemeral lock, which takes the session over, does not report "Lock May
// Be Lost" on its first transient renewal failure after a long wait
// (issue 22). Orphaned, the key stays held; Close releases it.
func TestLibhold_lastRenewalIsTheLatestAfterALongWait(t *testing.T) {
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	l, err := lockmodel.Lock{Prefix: key, Key: key, Limit: 1}.Normalize()
	must(t, err)

	// Another session holds the key for longer than LossAfter.
	other, _, err := agent.Client().Session().Create(&api.SessionEntry{TTL: "30s"}, nil)
	must(t, err)
	defer agent.Client().Session().Destroy(other, nil) //nolint:errcheck // the test's own session
	pair := &api.KVPair{Key: key, Session: other, Flags: lockmodel.LockFlagValue}
	if ok, _, err := agent.Client().KV().Acquire(pair, nil); err != nil || !ok {
		t.Fatalf("the other session's acquisition: %v %v", ok, err)
	}
	profile := lockmodel.SessionProfile{Name: "hold", TTL: 10 * time.Second, LockDelay: time.Second, RenewEvery: time.Second}.Resolve()
	rule := lockmodel.NewStopRule(profile, 0)
	heldFor := rule.LossAfter() + 3*time.Second
	go func() {
		time.Sleep(heldFor)
		agent.Client().KV().Release(pair, nil) //nolint:errcheck // the hold below fails the test if the key stays held
	}()

	started := time.Now()
	h, err := libhold.Acquire(ctx, c, l, profile, libhold.Options{SessionName: t.Name(), Value: func() []byte { return []byte("v") }})
	must(t, err)
	defer func() { must(t, h.Close(context.Background())) }()
	if waited := time.Since(started); waited < heldFor {
		t.Fatalf("acquired after %s, before the other session released (%s)", waited, heldFor)
	}
	if since := time.Since(h.LastContact()); since > rule.LossAfter() {
		t.Fatalf("last renewal %s ago (waited %s): a renewal failing now would count as loss after %s",
			since.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), rule.LossAfter())
	}
	if h.Grant().FencingToken == 0 || string(h.Value()) != "v" {
		t.Errorf("fencing token %d, value %q", h.Grant().FencingToken, h.Value())
	}

	h.Orphan()
	got, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	must(t, err)
	if got == nil || got.Session != h.Session().ID || got.ModifyIndex != h.Grant().FencingToken {
		t.Fatalf("after Orphan: key %+v, want it held by session %s at index %d", got, h.Session().ID, h.Grant().FencingToken)
	}
}
