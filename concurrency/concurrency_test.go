package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

func newSession(t *testing.T, client *api.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(context.Background(), client, concurrency.WithTTL(10*time.Second), concurrency.WithLockDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// Two sessions take turns on one key: never both inside, and every
// acquisition's fencing token is above the one before.
func TestMutex_excludesAnotherSession(t *testing.T) {
	ctx := context.Background()
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastToken uint64
		wg        sync.WaitGroup
	)
	for range 2 {
		m, err := concurrency.NewMutex(newSession(t, agent.Client()), key)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside at once", n)
				}
				mu.Lock()
				if m.Token() <= lastToken {
					t.Errorf("fencing token %d after %d", m.Token(), lastToken)
				}
				lastToken = m.Token()
				mu.Unlock()
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// A session destroyed behind the holder's back: the session's Done and
// the mutex's Done are closed, and say why.
func TestSession_doneWhenDestroyed(t *testing.T) {
	ctx := context.Background()
	s := newSession(t, agent.Client())
	m, err := concurrency.NewMutex(s, testenv.UniquePrefix(t.Name())+"/.lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client().Session().Destroy(s.ID(), nil); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, m.Done(), "the mutex's Done")
	if !errors.Is(m.Err(), concurrency.ErrLockLost) && !errors.Is(m.Err(), concurrency.ErrSessionLost) {
		t.Fatalf("mutex Err = %v", m.Err())
	}
	waitClosed(t, s.Done(), "the session's Done")
	if !errors.Is(s.Err(), concurrency.ErrSessionLost) {
		t.Fatalf("session Err = %v", s.Err())
	}
	if err := m.Lock(ctx); !errors.Is(err, concurrency.ErrSessionLost) {
		t.Fatalf("Lock on a lost session = %v", err)
	}
}

// A declared semaphore of 2 admits two sessions; the third waits until a
// slot is released.
func TestSemaphore_admitsLimit(t *testing.T) {
	ctx := context.Background()
	registry := poolLock(t, "pool", 2)
	var sems []*concurrency.Semaphore
	for range 3 {
		s, err := concurrency.NewSession(ctx, agent.Client(), concurrency.WithRegistryPrefix(registry), concurrency.WithProfile("pool"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(ctx) })
		sem, err := concurrency.NewDeclaredSemaphore(ctx, s, "pool")
		if err != nil {
			t.Fatal(err)
		}
		sems = append(sems, sem)
	}
	for _, sem := range sems[:2] {
		if err := sem.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	third := make(chan error, 1)
	go func() { third <- sems[2].Acquire(ctx) }()
	select {
	case err := <-third:
		t.Fatalf("a third holder got in with two slots taken: %v", err)
	default:
	}
	if err := sems[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	if sems[2].Token() <= sems[1].Token() {
		t.Fatalf("admission token %d not above %d", sems[2].Token(), sems[1].Token())
	}
}

// workerToken is a least-privilege token for run once on lock name under
// registry: what consullock_acl_policy renders for a worker.
func workerToken(t *testing.T, registry, name string) *api.Client {
	t.Helper()
	rules := fmt.Sprintf(`key_prefix "%s/" { policy = "read" }
key "%s" { policy = "write" }
key "%s" { policy = "write" }
session_prefix "" { policy = "write" }
`, registry, registry+"/jobs/"+name+"/.lock", record.RunLedgerKey(registry, name))
	tok, err := agent.MintToken(strings.ReplaceAll(registry, "/", "-"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return agent.ClientWithToken(tok.SecretID)
}

// Two callers call Do with one run ID at once, with least-privilege
// tokens: the function runs once, the other caller gets
// ErrAlreadySucceeded; a third caller afterwards too.
func TestRunOnce_runsOnceAcrossCallers(t *testing.T) {
	ctx := context.Background()
	registry := runOnceLock(t, "once", 3)
	var calls atomic.Int32
	errs := make(chan error, 2)
	worker := workerToken(t, registry, "once")
	for range 2 {
		r := concurrency.NewRunOnce(worker, "once", concurrency.WithRegistryPrefix(registry))
		go func() {
			errs <- r.Do(ctx, "run-1", func(ctx context.Context, a concurrency.Attempt) error {
				calls.Add(1)
				return nil
			})
		}()
	}
	var succeeded, done int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			succeeded++
		case errors.Is(err, concurrency.ErrAlreadySucceeded):
			done++
		default:
			t.Fatalf("Do = %v", err)
		}
	}
	if calls.Load() != 1 || succeeded != 1 || done != 1 {
		t.Fatalf("fn called %d times; %d succeeded, %d already succeeded", calls.Load(), succeeded, done)
	}
	r := concurrency.NewRunOnce(agent.Client(), "once", concurrency.WithRegistryPrefix(registry))
	if err := r.Do(ctx, "run-1", func(context.Context, concurrency.Attempt) error { return nil }); !errors.Is(err, concurrency.ErrAlreadySucceeded) {
		t.Fatalf("a later caller: %v", err)
	}
	assertAttempts(t, registry, "once", "run-1", ledger.RunSucceeded)
}

// A failed attempt is retried by the next Do; once max_attempts fail the
// run is exhausted.
func TestRunOnce_retriesUntilExhausted(t *testing.T) {
	ctx := context.Background()
	registry := runOnceLock(t, "flaky", 2)
	r := concurrency.NewRunOnce(agent.Client(), "flaky", concurrency.WithRegistryPrefix(registry))
	boom := errors.New("boom")
	for n := 1; n <= 2; n++ {
		err := r.Do(ctx, "r", func(_ context.Context, a concurrency.Attempt) error {
			if a.Number != n {
				t.Errorf("attempt %d, want %d", a.Number, n)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("attempt %d: Do = %v", n, err)
		}
	}
	if err := r.Do(ctx, "r", func(context.Context, concurrency.Attempt) error { return nil }); !errors.Is(err, concurrency.ErrExhausted) {
		t.Fatalf("after max_attempts: %v", err)
	}
	assertAttempts(t, registry, "flaky", "r", ledger.RunFailed, ledger.RunFailed)
}

// The lock lost while fn runs: fn's context is cancelled, Do returns
// ErrLockLost, and the attempt is recorded lost after the loss.
func TestRunOnce_lossCancelsTheFunction(t *testing.T) {
	ctx := context.Background()
	registry := runOnceLock(t, "lossy", 3)
	r := concurrency.NewRunOnce(agent.Client(), "lossy", concurrency.WithRegistryPrefix(registry))
	err := r.Do(ctx, "r", func(ctx context.Context, a concurrency.Attempt) error {
		pair, _, err := agent.Client().KV().Get(registry+"/jobs/lossy/.lock", nil)
		if err != nil || pair == nil {
			return fmt.Errorf("read the lock key: %v", err)
		}
		if _, err := agent.Client().Session().Destroy(pair.Session, nil); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, concurrency.ErrLockLost) && !errors.Is(err, concurrency.ErrSessionLost) {
		t.Fatalf("Do = %v", err)
	}
	assertAttempts(t, registry, "lossy", "r", ledger.RunLost)
}

// A paused lock: Do does not call fn.
func TestRunOnce_paused(t *testing.T) {
	ctx := context.Background()
	registry := runOnceLock(t, "paused", 3)
	rec, err := record.EncodePauseRecord(record.Pause{Lock: "paused", By: "test", Reason: "maintenance", At: time.Now().UTC()})
	must(t, err)
	_, err = agent.Client().KV().Put(&api.KVPair{Key: record.PauseKey(registry, "paused"), Value: rec}, nil)
	must(t, err)
	r := concurrency.NewRunOnce(agent.Client(), "paused", concurrency.WithRegistryPrefix(registry))
	if err := r.Do(ctx, "r", func(context.Context, concurrency.Attempt) error { t.Error("fn called"); return nil }); !errors.Is(err, concurrency.ErrPaused) {
		t.Fatalf("Do = %v", err)
	}
}

func assertAttempts(t *testing.T, registry, lock, id string, want ...ledger.RunOutcome) {
	t.Helper()
	c := &consul.Client{Client: agent.Client()}
	l, _, err := store.New(c).ReadLedger(context.Background(), record.RunLedgerKey(registry, lock), lock)
	if err != nil {
		t.Fatal(err)
	}
	i := l.Find(id)
	if i < 0 {
		t.Fatalf("run %q not in the ledger", id)
	}
	var got []ledger.RunOutcome
	for _, a := range l.Runs[i].Attempts {
		got = append(got, a.Outcome)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
}

// The library's import graph holds no terraform-plugin module: a Go
// service that imports it does not build the provider.
func TestImports_noTerraformPlugin(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/hashicorp/terraform-plugin") {
			t.Errorf("the library imports %s", p)
		}
	}
}
