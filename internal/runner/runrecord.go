package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Recording a run-once attempt's outcome once its command has exited:
// in the release transaction while the session may hold the lock
// (finishRun), else by check-and-set within the lock-delay that follows
// (recordAfterLoss); lockmodel outcome.go has the deadlines.

// finishRun records the outcome of this holder's attempt and releases the
// lock in one transaction; released says whether that transaction did,
// recorded whether the outcome is in the ledger (by this runner: released,
// or after a loss; false when it could not be recorded, or the attempt was
// recorded crashed first). The command has exited: the hold's loss judge,
// which exists to stop the command in time, no longer bounds this. A
// transient failure (no cluster leader, the agent unreachable, renewals
// too) is sent again, after a read of the ledger, until Consul answers
// that the session no longer holds the lock or 2 x TTL has passed since
// the last confirmed renewal (lockmodel.OutcomeDeadlines; an election may
// have restarted the session's timer, which step 2 tolerates):
// releasing without the outcome would make the next holder run a command
// that succeeded again. Then the outcome is recorded with a
// check-and-set within the lock-delay that follows (recordAfterLoss).
func (r *runner) finishRun(ctx context.Context, h *lockproto.Hold, outcome ledger.RunOutcome, exitCode *int) (released, recorded bool) {
	run := r.once
	log := r.log.With("run_id", run.id, "attempt", run.attempt, "outcome", string(outcome))
	dl := lockmodel.NewOutcomeDeadlines(r.profile.TTL, r.profile.LockDelay, h.LastContact(), time.Now())
	ledger, index := run.ledger, run.index
	for changed, failures := 0, 0; ; {
		if !time.Now().Before(dl.Fenced) {
			log.Warn("2 x ttl since the last confirmed renewal: the session has ended unless an election restarted its timer; recording the outcome by check-and-set of the ledger",
				"last_contact", h.LastContact().Format(time.RFC3339Nano), "ttl", lockmodel.FormatDuration(r.profile.TTL))
			return false, r.recordAfterLoss(ctx, log, outcome, exitCode, h.Reason(), dl.AfterLoss(time.Now()))
		}
		next, err := ledger.FinishWith(run.id, run.attempt, run.result(outcome, exitCode, h.Reason()), run.policy, r.cfg.clock.Now())
		if err != nil {
			log.Error("cannot record the run's outcome in the ledger", "ledger", run.ledgerKey, "error", err.Error())
			return false, false
		}
		wctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), dl.Fenced))
		_, err = store.New(r.client).FinishRunAndRelease(wctx, store.RunRelease{
			LedgerWrite: store.LedgerWrite{Fence: h.IsOwner(), LedgerKey: run.ledgerKey,
				Index: index, Ledger: next.Prune(run.keep, run.id)},
			Flags: r.lock.Flags(), Value: h.Value,
		})
		cancel()
		switch {
		case err == nil:
			log.Info("run outcome recorded; lock released", "exit_code", exitCodeText(exitCode))
			return true, true
		case errors.Is(err, store.ErrFenceLost):
			return false, r.recordAfterLoss(ctx, log, outcome, exitCode, h.Reason(), dl.AfterLoss(time.Now()))
		case errors.Is(err, store.ErrLedgerChanged) && changed < ledgerTries:
			changed++
		case retryable(err):
			failures++
			log.Warn("cannot record the run's outcome yet; trying again while the session may hold the lock", "error", err.Error(),
				"until", dl.Fenced.Format(time.RFC3339Nano), "lock_lost", h.Reason())
			sleepUntil(ctx, consul.Backoff(100*time.Millisecond, 2*time.Second, failures), dl.Fenced)
		default:
			log.Error("cannot record the run's outcome; the next holder will find the attempt running and record it crashed",
				"error", err.Error(), "lock_lost", h.Reason())
			return false, false
		}
		// Decided again on the ledger as it is now (a lost answer may have
		// committed, or another writer changed it); kept as it was when
		// the read fails for now.
		switch l, i, err := r.readLedgerBy(ctx, dl.Fenced); {
		case err == nil:
			ledger, index = l, i
		case !retryable(err):
			log.Error("cannot read the run ledger again to record the run's outcome", "error", err.Error())
			return false, false
		}
	}
}

// retryable: a failure to record an outcome that is worth sending again
// while the lock is held (no cluster leader, agent unreachable, a request
// that timed out).
func retryable(err error) bool {
	var ce *consul.Error
	return errors.As(err, &ce) && ce.Kind == consul.KindTransient || errors.Is(err, context.DeadlineExceeded)
}

// recordAfterLoss records the outcome of an attempt whose session no
// longer holds the lock (or 2 x ttl has passed since its last renewal), with reason the loss's
// cause for a lost attempt: with a check-and-set of the ledger as read,
// and only while the attempt is still "running" (a next holder that found
// it so has recorded it crashed, and that stands). A transient failure, or
// an answer lost, is tried again on a fresh read until deadline: a next
// holder acquires only after the lock-delay that follows the session's
// end. It reports whether the outcome is recorded.
func (r *runner) recordAfterLoss(ctx context.Context, log *slog.Logger, outcome ledger.RunOutcome, exitCode *int, reason string, deadline time.Time) bool {
	run := r.once
	for changed, failures := 0, 0; changed < ledgerTries; {
		if failures > 0 {
			if !time.Now().Before(deadline) {
				log.Warn("lock lost: the outcome could not be recorded within the lock-delay; the next holder records the attempt crashed",
					"deadline", deadline.Format(time.RFC3339Nano))
				return false
			}
			sleepUntil(ctx, consul.Backoff(100*time.Millisecond, time.Second, failures), deadline)
		}
		l, index, err := r.readLedgerBy(ctx, deadline)
		if err != nil {
			if !retryable(err) {
				log.Warn("lock lost: cannot read the run ledger to record the outcome", "error", err.Error())
				return false
			}
			failures++
			log.Warn("lock lost: cannot read the run ledger yet to record the outcome; trying again", "error", err.Error())
			continue
		}
		if l.AttemptOutcome(run.id, run.attempt) == outcome {
			log.Info("the outcome is already recorded in the run ledger")
			return true
		}
		next, err := l.FinishWith(run.id, run.attempt, run.result(outcome, exitCode, reason), run.policy, r.cfg.clock.Now())
		if err != nil {
			log.Warn("lock lost: the outcome is not recorded", "reason", err.Error())
			return false
		}
		value, err := record.EncodeLedger(next.Prune(run.keep, run.id))
		if err != nil {
			log.Warn("lock lost: the outcome is not recorded", "reason", err.Error())
			return false
		}
		wctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), deadline))
		ok, _, err := r.client.KV().CAS(&api.KVPair{Key: run.ledgerKey, Value: value, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(wctx))
		cancel()
		switch {
		case err != nil:
			// Its answer may be lost, not the write: the next read tells.
			failures++
			log.Warn("lock lost: recording the outcome failed; trying again", "error", err.Error())
		case ok:
			log.Info("lock lost: outcome recorded in the run ledger after the loss")
			return true
		default:
			changed++
		}
	}
	log.Warn("lock lost: the run ledger kept changing; the outcome is not recorded")
	return false
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
