package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A mutex on a raw key, held through a session with an explicit TTL and
// lock-delay. Another session's TryLock finds it held.
func ExampleMutex() {
	setEnv()
	ctx := context.Background()
	client, err := api.NewClient(api.DefaultConfig()) // CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN
	if err != nil {
		fmt.Println(err)
		return
	}
	key := testenv.UniquePrefix("ExampleMutex") + "/.lock"

	s, err := concurrency.NewSession(ctx, client, concurrency.WithTTL(10*time.Second), concurrency.WithLockDelay(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, err := concurrency.NewMutex(s, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Lock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held, with a fencing token:", m.Token() > 0)

	other, _ := concurrency.NewSession(ctx, client, concurrency.WithTTL(10*time.Second))
	defer other.Close(ctx)
	m2, _ := concurrency.NewMutex(other, key)
	fmt.Println("another session's TryLock:", errors.Is(m2.TryLock(ctx), concurrency.ErrLocked))

	fmt.Println("unlock:", m.Unlock(ctx))
	select {
	case <-m.Done():
		fmt.Println("done after unlock, lost:", m.Err() != nil)
	default:
	}
	// Output:
	// held, with a fencing token: true
	// another session's TryLock: true
	// unlock: <nil>
	// done after unlock, lost: false
}

// Run once: every replica calls Do with the same run ID; the function
// runs on one of them, and the others learn that the run succeeded. The
// lock "nightly-report" is declared with run_once (consullock_lock).
func ExampleRunOnce_Do() {
	setEnv()
	ctx := context.Background()
	client, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	registry := runOnceLock(nil, "nightly-report", 3) // what the provider declares

	replica := func(name string) error {
		r := concurrency.NewRunOnce(client, "nightly-report", concurrency.WithRegistryPrefix(registry))
		return r.Do(ctx, "2026-12-07", func(ctx context.Context, a concurrency.Attempt) error {
			fmt.Printf("%s runs %s, attempt %d\n", name, a.RunID, a.Number)
			return nil // the job's work, stopping when ctx is cancelled
		})
	}
	fmt.Println("replica a:", replica("a"))
	err = replica("b")
	fmt.Println("replica b already succeeded:", errors.Is(err, concurrency.ErrAlreadySucceeded))
	// Output:
	// a runs 2026-12-07, attempt 1
	// replica a: <nil>
	// replica b already succeeded: true
}

// A session from a declared profile (consullock_session_defaults), and a
// semaphore declared with limit 2: two holders at once.
func ExampleNewDeclaredSemaphore() {
	setEnv()
	ctx := context.Background()
	client, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	registry := poolLock(nil, "pool", 2) // what the provider declares

	var slots []*concurrency.Semaphore
	for range 2 {
		s, err := concurrency.NewSession(ctx, client, concurrency.WithRegistryPrefix(registry), concurrency.WithProfile("pool"))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer s.Close(ctx)
		sem, err := concurrency.NewDeclaredSemaphore(ctx, s, "pool")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("acquire:", sem.Acquire(ctx))
		slots = append(slots, sem)
	}
	fmt.Println("later admission, higher token:", slots[1].Token() > slots[0].Token())
	// Output:
	// acquire: <nil>
	// acquire: <nil>
	// later admission, higher token: true
}
