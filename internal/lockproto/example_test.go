package lockproto

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A hold is a session and a lock, shaped like etcd's concurrency package:
// Done is closed when the lock is lost, IsOwner fences writes, Unlock
// releases the lock and ends the session.
func ExampleAcquireHold() {
	ctx := context.Background()
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		fmt.Println(err)
		return
	}
	prefix := testenv.UniquePrefix("ExampleAcquireHold")
	h, err := AcquireHold(ctx, c,
		lockmodel.Lock{Name: "nightly", Prefix: prefix, Key: prefix + "/.lock", Limit: 1},
		lockmodel.SessionProfile{Name: "example", TTL: 15 * time.Second}.Resolve(),
		WithSessionName("example"), WithGrace(time.Second), WithValue(func() []byte { return []byte("worker-1") }))
	if err != nil {
		fmt.Println(err)
		return
	}
	fence := h.IsOwner()
	ok, err := store.New(c).FencedCAS(ctx, fence, &api.KVPair{Key: prefix + "/result", Value: []byte("done")})
	fmt.Println("fenced write while held:", ok, err)
	select {
	case <-h.Done():
		fmt.Println("lost:", h.Reason())
	default:
		fmt.Println("still held")
	}
	fmt.Println("unlock:", h.Unlock(ctx))
	_, err = store.New(c).FencedCAS(ctx, fence, &api.KVPair{Key: prefix + "/late", Value: []byte("late")})
	fmt.Println("fenced write after the unlock refused:", errors.Is(err, store.ErrFenceLost))
	// Output:
	// fenced write while held: true <nil>
	// still held
	// unlock: <nil>
	// fenced write after the unlock refused: true
}
