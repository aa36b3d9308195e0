package runonce

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Finish records res, the outcome of this holder's attempt (r.Attempt,
// begun on r.Ledger at r.Index), and releases the lock in one transaction
// (store.FinishRunAndRelease); released says whether that transaction did,
// recorded whether the outcome is in the ledger (released, or after a
// loss; false when it could not be recorded, or the attempt was recorded
// crashed first). The work has ended: the loss judge, which exists to stop
// it in time, no longer bounds this. A transient failure (no cluster
// leader, the agent unreachable, renewals too) is sent again, after a read
// of the ledger, until Consul answers that the session no longer holds the
// lock or 2 x TTL has passed since h.LastContact
// (lockmodel.OutcomeDeadlines; an election may have restarted the
// session's timer, which step 2 tolerates): releasing without the outcome
// would make the next holder run again work that succeeded. Then the
// outcome is recorded by RecordAfterLoss within the lock-delay that
// follows.
func (r Run) Finish(ctx context.Context, h Tenure, res ledger.AttemptResult) (released, recorded bool) {
	log := r.log().With("run_id", r.ID, "attempt", r.Attempt, "outcome", string(res.Outcome))
	dl := lockmodel.NewOutcomeDeadlines(h.TTL, h.LockDelay, h.LastContact, time.Now())
	l, index := r.Ledger, r.Index
	for changed, failures := 0, 0; ; {
		if !time.Now().Before(dl.Fenced) {
			log.Warn("2 x ttl since the last confirmed renewal: the session has ended unless an election restarted its timer; recording the outcome by check-and-set of the ledger",
				"last_contact", h.LastContact.Format(time.RFC3339Nano), "ttl", lockmodel.FormatDuration(h.TTL))
			return false, r.recordAfterLoss(ctx, log, h.result(res), dl.AfterLoss(time.Now()))
		}
		next, err := l.FinishWith(r.ID, r.Attempt, h.result(res), r.Policy, r.now())
		if err != nil {
			log.Error("cannot record the run's outcome in the ledger", "ledger", r.Key, "error", err.Error())
			return false, false
		}
		wctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), dl.Fenced))
		_, err = store.New(r.Client).FinishRunAndRelease(wctx, store.RunRelease{
			LedgerWrite: store.LedgerWrite{Fence: h.Fence, LedgerKey: r.Key, Index: index, Ledger: next.Prune(r.Keep, r.ID)},
			Flags:       h.Flags, Value: h.Value,
		})
		cancel()
		switch {
		case err == nil:
			log.Info("run outcome recorded; lock released", "exit_code", exitCodeText(res.ExitCode))
			return true, true
		case errors.Is(err, store.ErrFenceLost):
			return false, r.recordAfterLoss(ctx, log, h.result(res), dl.AfterLoss(time.Now()))
		case errors.Is(err, store.ErrLedgerChanged) && changed < LedgerTries:
			changed++
		case Transient(err):
			failures++
			log.Warn("cannot record the run's outcome yet; trying again while the session may hold the lock", "error", err.Error(),
				"until", dl.Fenced.Format(time.RFC3339Nano), "lock_lost", h.reason())
			sleepUntil(ctx, consul.Backoff(100*time.Millisecond, 2*time.Second, failures), dl.Fenced)
		default:
			log.Error("cannot record the run's outcome; the next holder will find the attempt running and record it crashed",
				"error", err.Error(), "lock_lost", h.reason())
			return false, false
		}
		// Decided again on the ledger as it is now (a lost answer may have
		// committed, or another writer changed it); kept as it was when
		// the read fails for now.
		switch rl, ri, err := r.readBy(ctx, dl.Fenced); {
		case err == nil:
			l, index = rl, ri
		case !Transient(err):
			log.Error("cannot read the run ledger again to record the run's outcome", "error", err.Error())
			return false, false
		}
	}
}

// result is res with h's loss reason as it is now, when h tells one.
func (h Tenure) result(res ledger.AttemptResult) ledger.AttemptResult {
	if h.Reason != nil {
		res.Reason = h.Reason()
	}
	return res
}

// RecordAfterLoss records res, the outcome of attempt r.Attempt, once its
// session no longer holds the lock (or 2 x ttl has passed since its last
// renewal): with a check-and-set of the ledger as read, and only while the
// attempt is still "running" (a next holder that found it so has recorded
// it crashed, and that stands). A transient failure, or an answer lost, is
// tried again on a fresh read until deadline: a next holder acquires only
// after the lock-delay that follows the session's end. It reports whether
// the outcome is recorded.
func (r Run) RecordAfterLoss(ctx context.Context, res ledger.AttemptResult, deadline time.Time) bool {
	return r.recordAfterLoss(ctx, r.log().With("run_id", r.ID, "attempt", r.Attempt, "outcome", string(res.Outcome)), res, deadline)
}

func (r Run) recordAfterLoss(ctx context.Context, log *slog.Logger, res ledger.AttemptResult, deadline time.Time) bool {
	for changed, failures := 0, 0; changed < LedgerTries; {
		if failures > 0 {
			if !time.Now().Before(deadline) {
				log.Warn("lock lost: the outcome could not be recorded within the lock-delay; the next holder records the attempt crashed",
					"deadline", deadline.Format(time.RFC3339Nano))
				return false
			}
			sleepUntil(ctx, consul.Backoff(100*time.Millisecond, time.Second, failures), deadline)
		}
		l, index, err := r.readBy(ctx, deadline)
		if err != nil {
			if !Transient(err) {
				log.Warn("lock lost: cannot read the run ledger to record the outcome", "error", err.Error())
				return false
			}
			failures++
			log.Warn("lock lost: cannot read the run ledger yet to record the outcome; trying again", "error", err.Error())
			continue
		}
		if l.AttemptOutcome(r.ID, r.Attempt) == res.Outcome {
			log.Info("the outcome is already recorded in the run ledger")
			return true
		}
		next, err := l.FinishWith(r.ID, r.Attempt, res, r.Policy, r.now())
		if err != nil {
			log.Warn("lock lost: the outcome is not recorded", "reason", err.Error())
			return false
		}
		wctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), deadline))
		err = store.New(r.Client).CASLedger(wctx, r.Key, next.Prune(r.Keep, r.ID), index)
		cancel()
		switch {
		case err == nil:
			log.Info("lock lost: outcome recorded in the run ledger after the loss")
			return true
		case errors.Is(err, store.ErrLedgerChanged):
			changed++
		case errors.Is(err, store.ErrLedgerInvalid):
			log.Warn("lock lost: the outcome is not recorded", "reason", err.Error())
			return false
		default:
			// Its answer may be lost, not the write: the next read tells.
			failures++
			log.Warn("lock lost: recording the outcome failed; trying again", "error", err.Error())
		}
	}
	log.Warn("lock lost: the run ledger kept changing; the outcome is not recorded")
	return false
}

// readBy reads the ledger consistently, for at most
// lockproto.CleanupTimeout and not past deadline.
func (r Run) readBy(ctx context.Context, deadline time.Time) (ledger.Ledger, uint64, error) {
	rctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), deadline))
	defer cancel()
	return store.New(r.Client).ReadLedger(rctx, r.Key, r.Lock)
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sleepUntil waits d, but not past deadline nor once ctx ends.
func sleepUntil(ctx context.Context, d time.Duration, deadline time.Time) {
	_ = consul.Sleep(ctx, max(min(d, time.Until(deadline)), 0))
}

func exitCodeText(c *int) string {
	if c == nil {
		return "none"
	}
	return strconv.Itoa(*c)
}
