package runner

import (
	"context"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/runonce"
)

// Recording a run-once attempt's outcome once its command has exited:
// in the release transaction while the session may hold the lock, else
// by check-and-set within the lock-delay that follows (runonce Run.Finish
// and RecordAfterLoss; lockmodel outcome.go has the deadlines).

// finishRun records the outcome of this holder's attempt and releases the
// lock in one transaction (runonce Run.Finish); released says whether
// that transaction did, recorded whether the outcome is in the ledger (by
// this runner: released, or after a loss; false when it could not be
// recorded, or the attempt was recorded crashed first). The command has
// exited: the hold's loss judge, which exists to stop the command in time,
// no longer bounds this; Finish sends a transient failure again until
// Consul answers that the session no longer holds the lock or 2 x TTL has
// passed since the last confirmed renewal, then records the outcome by
// check-and-set. The loss's reason, read at each write, is the attempt's.
func (r *runner) finishRun(ctx context.Context, h libhold.Held, outcome ledger.RunOutcome, exitCode *int) (released, recorded bool) {
	run := r.ledgerRun()
	run.Attempt, run.Ledger, run.Index = r.once.attempt, r.once.ledger, r.once.index
	return run.Finish(ctx, runonce.Tenure{
		Fence: h.IsOwner(), LastContact: h.LastContact(), TTL: r.profile.TTL, LockDelay: r.profile.LockDelay,
		Flags: r.lock.Flags(), Value: h.Value(), Reason: h.Reason,
	}, r.once.result(outcome, exitCode, ""))
}
