package concurrency

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Recording an attempt's outcome once fn has returned, as the runner
// records its command's (lockmodel outcome.go has the deadlines): in the
// transaction that releases the lock while the session may hold it
// (finish), else by check-and-set within the lock-delay that follows
// (recordAfterLoss), never while the session may still hold the lock
// and only while the attempt still reads running.

// finish records res and releases the lock in one transaction (consul
// FinishRunAndRelease), sent again after a transient failure until
// Consul answers that the session no longer holds the lock or 2 x TTL
// has passed since the last renewal; then recordAfterLoss. It reports
// whether the outcome is in the ledger.
func (u *run) finish(ctx context.Context, h *hold, res ledger.AttemptResult) bool {
	log := u.r.cfg.log.With("run_id", u.id, "attempt", u.attempt, "outcome", string(res.Outcome))
	dl := lockmodel.NewOutcomeDeadlines(u.profile.TTL, u.profile.LockDelay, h.s.lastContact(), time.Now())
	h.mu.Lock()
	value := h.value
	h.mu.Unlock()
	h.stop() // fn has returned: the transaction below releases the lock, not Unlock
	ledger, index := u.ledger, u.index
	for changed, failures := 0, 0; time.Now().Before(dl.Fenced); {
		next, err := ledger.FinishWith(u.id, u.attempt, res, u.policy, time.Now())
		if err != nil {
			log.Error("cannot record the attempt's outcome in the run ledger", "error", err.Error())
			return false
		}
		wctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), dl.Fenced))
		_, err = store.New(u.r.c).FinishRunAndRelease(wctx, store.RunRelease{
			LedgerWrite: store.LedgerWrite{Fence: h.fence(), LedgerKey: u.key, Index: index, Ledger: next.Prune(u.spec.Keep, u.id)},
			Flags:       u.lock.Flags(), Value: value,
		})
		cancel()
		switch {
		case err == nil:
			log.Info("attempt outcome recorded; lock released")
			return true
		case errors.Is(err, store.ErrFenceLost):
			return u.recordAfterLoss(ctx, log, res, dl.AfterLoss(time.Now()))
		case errors.Is(err, store.ErrLedgerChanged) && changed < ledgerTries:
			changed++
		case transient(err):
			failures++
			log.Warn("cannot record the outcome yet; trying again while the session may hold the lock", "error", err.Error())
			_ = consul.Sleep(ctx, max(min(consul.Backoff(100*time.Millisecond, 2*time.Second, failures), time.Until(dl.Fenced)), 0))
		default:
			log.Error("cannot record the outcome; the next holder will record the attempt crashed", "error", err.Error())
			return false
		}
		rctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(lockproto.CleanupTimeout), dl.Fenced))
		l, i, err := store.New(u.r.c).ReadLedger(rctx, u.key, u.r.name)
		cancel()
		switch {
		case err == nil:
			ledger, index = l, i
		case !transient(err):
			log.Error("cannot read the run ledger again to record the outcome", "error", err.Error())
			return false
		}
	}
	log.Warn("2 x ttl since the last renewal: recording the outcome by check-and-set of the ledger")
	return u.recordAfterLoss(ctx, log, res, dl.AfterLoss(time.Now()))
}

// recordAfterLoss records res once the session no longer holds the lock,
// with a check-and-set of the ledger (consul EditLedger) and only while
// the attempt still reads running: a next holder acquires only after the
// lock-delay, so until deadline no one else has recorded it crashed.
func (u *run) recordAfterLoss(ctx context.Context, log *slog.Logger, res ledger.AttemptResult, deadline time.Time) bool {
	already := false
	edit := func(l ledger.Ledger) (ledger.Ledger, bool) {
		if l.AttemptOutcome(u.id, u.attempt) == res.Outcome {
			already = true
			return l, false
		}
		next, err := l.FinishWith(u.id, u.attempt, res, u.policy, time.Now())
		if err != nil {
			log.Warn("lock lost: the outcome is not recorded", "reason", err.Error())
			return l, false
		}
		return next.Prune(u.spec.Keep, u.id), true
	}
	for failures := 1; ; failures++ {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		written, err := store.New(u.r.c).EditLedger(wctx, u.r.cfg.registry, u.r.name, ledgerTries, edit)
		cancel()
		if err == nil {
			if written {
				log.Info("lock lost: outcome recorded in the run ledger after the loss")
			}
			return written || already
		}
		if !transient(err) || !time.Now().Before(deadline) {
			log.Warn("lock lost: the outcome could not be recorded; the next holder records the attempt crashed", "error", err.Error())
			return false
		}
		_ = consul.Sleep(ctx, max(min(consul.Backoff(100*time.Millisecond, time.Second, failures), time.Until(deadline)), 0))
	}
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
