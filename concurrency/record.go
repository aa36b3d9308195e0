package concurrency

import (
	"context"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/runonce"
)

// finish records res, the outcome of the attempt fn ran, as the runner
// records its command's (runonce Run.Finish): in the transaction that
// releases the lock while the session may hold it, else by check-and-set
// within the lock-delay that follows, never while the session may still
// hold the lock and only while the attempt still reads running. It
// reports whether the outcome is in the ledger.
func (u *run) finish(ctx context.Context, h *hold, res ledger.AttemptResult) bool {
	h.mu.Lock()
	value := h.value
	h.mu.Unlock()
	lastContact := h.s.lastContact()
	h.stop() // fn has returned: the transaction below releases the lock, not Unlock
	_, recorded := u.proto.Finish(ctx, runonce.Tenure{
		Fence: h.fence(), LastContact: lastContact, TTL: u.profile.TTL, LockDelay: u.profile.LockDelay,
		Flags: u.lock.Flags(), Value: value,
	}, res)
	return recorded
}
