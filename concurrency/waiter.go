package concurrency

import (
	"context"
	"sync"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// acquire waits for the lock while following the run ledger, as the
// runner's waiter does: when the ledger shows the run done (another
// caller's attempt succeeded, or the last attempt was used up) the wait
// ends without the lock, and with no lock op or release written. A lock
// acquired at the same moment is kept: begin reads the ledger and
// decides.
func (u *run) acquire(ctx context.Context, h *hold) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		done error
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := u.followUntilDone(actx); err != nil {
			mu.Lock()
			done = err
			mu.Unlock()
			cancel()
		}
	}()
	err := h.acquire(actx, false)
	cancel()
	wg.Wait()
	if err != nil && done != nil {
		return done
	}
	return err
}

// followUntilDone follows the ledger without a session (runonce
// Run.Follow) until ctx ends (nil) or the ledger shows the run done (its
// notRun error). A ledger that does not decode is left to the holder to
// report.
func (u *run) followUntilDone(ctx context.Context) error {
	var found error
	u.proto.Follow(ctx, 0, func(l ledger.Ledger, _, _ uint64, err error) bool {
		if err != nil {
			return true
		}
		found = u.doneIn(l)
		return found == nil
	})
	return found
}
