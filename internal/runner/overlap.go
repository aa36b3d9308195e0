package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// run_once.overlap: a runner for one run that finds another run's attempt
// holding the lock waits (the default), skips its run, or replaces the
// other (lockmodel DecideOverlap decides). It looks before it has a
// session (doneBeforeSession), again each time its wait sees another run
// begin, and after losing the race for a free key (waitWithoutSession). A
// backfill never skips nor replaces.

// overlapActive reports whether this runner applies a policy other than
// wait.
func (r *runner) overlapActive() bool {
	ro := r.lock.RunOnce
	return r.once != nil && !r.backfill && ro != nil && ro.Overlap != "" && ro.Overlap != ledger.OverlapWait
}

// otherRunRunning reports whether l shows an attempt of another run
// running: a wait under an overlap policy ends then, to look again.
func (r *runner) otherRunRunning(l ledger.Ledger) bool {
	for _, run := range l.Runs {
		if run.ID != r.once.id && run.Outcome == ledger.RunRunning {
			return true
		}
	}
	return false
}

// checkOverlap reads the lock key and then the ledger (both consistent)
// and, when the key's session runs an attempt of another run, applies
// the lock's overlap policy: skip records this run skipped and reports
// ExitRunSkipped; replace ends that session (as consullock release does:
// the lock-delay protects the old command while its runner stops it),
// records its attempt replaced and reports nothing (the caller waits for
// the lock: the next acquisition succeeds once the lock-delay passed). A
// failed read or write is logged and leaves the runner waiting, as under
// wait.
func (r *runner) checkOverlap(ctx context.Context) (int, bool) {
	if !r.overlapActive() {
		return 0, false
	}
	pair, err := store.New(r.client).ReadKeyConsistent(ctx, r.lock.Key)
	if err != nil || pair == nil || pair.Session == "" {
		return 0, false
	}
	l, _, err := r.readLedger(ctx)
	if err != nil {
		r.log.Warn("run_once.overlap: cannot read the run ledger; waiting for the lock", "error", err.Error())
		return 0, false
	}
	other, attempt, ok := l.RunningAttempt(pair.Session)
	if !ok {
		return 0, false // the holder has not begun its attempt yet: the wait looks again when it does
	}
	policy := r.lock.RunOnce.Overlap
	log := r.log.With("run_id", r.once.id, "holding_run", other, "holding_node", attempt.Node, "holding_session", attempt.Session, "overlap", string(policy))
	spec := r.lock.RunOnce.WithDefaults()
	at, _ := spec.ScheduledTime(r.once.id)
	otherAt, _ := spec.ScheduledTime(other)
	switch ledger.DecideOverlap(policy, r.once.id, at, other, otherAt, r.backfill) {
	case ledger.OverlapActSkip:
		r.recordSkip(ctx, log, other)
		return ledger.ExitRunSkipped, true
	case ledger.OverlapActReplace:
		r.replace(ctx, log, pair.Session, attempt.Node)
	}
	return 0, false
}

// recordSkip records this run skipped, because run other holds the lock;
// the runner then exits ExitRunSkipped, recorded or not (a failure is
// logged).
func (r *runner) recordSkip(ctx context.Context, log *slog.Logger, other string) {
	written, err := r.ledgerRun().Skip(ctx, r.cfg.registryPrefix, r.nodeName(), other)
	switch {
	case err != nil:
		log.Warn("another run holds the lock: this run is skipped, but the skip is not recorded in the run ledger", "error", err.Error(),
			"exit_code", ledger.ExitRunSkipped)
	case written:
		log.Info("another run holds the lock: this run is recorded skipped; the command was not started", "exit_code", ledger.ExitRunSkipped)
	default:
		log.Info("another run holds the lock: this runner does not start the command (its skip is not recorded: the run was begun or recorded meanwhile)",
			"exit_code", ledger.ExitRunSkipped)
	}
}

// replace ends session (on node), the holder of another run's attempt,
// and records that attempt replaced by this run.
func (r *runner) replace(ctx context.Context, log *slog.Logger, session, node string) {
	ended, err := store.New(r.client).EndHolderSessions(ctx, []store.HolderSession{{Holder: holder.Holder{Session: session, Node: node}, LockDelay: -1}})
	if err != nil {
		log.Warn("run_once.overlap replace: cannot end the holder's session; waiting for the lock", "error", err.Error())
		return
	}
	delay := r.profile.LockDelay
	if len(ended) > 0 {
		delay = ended[0].LockDelay
	}
	at := r.cfg.clock.Now()
	log.Info("another run holds the lock: its session is ended (run_once.overlap replace); acquiring once the lock-delay has passed",
		"lock_delay", lockmodel.FormatDuration(lockmodel.TakeOverDelay(delay)))
	written, run, n, err := r.ledgerRun().Replace(ctx, r.cfg.registryPrefix, session, at)
	switch {
	case err != nil:
		log.Warn("run_once.overlap replace: the replaced attempt is not recorded in the run ledger", "error", err.Error())
	case written:
		log.Info("recorded the other run's attempt replaced", "replaced_run", run, "replaced_attempt", n)
	default:
		log.Info("run_once.overlap replace: the attempt was recorded otherwise meanwhile (it finished first)")
	}
}

// nodeName is the node a skip is recorded on: -node, else the host's
// name (Consul's default node name; the runner has no session, so no
// node from Consul, and needs no agent read to learn it).
func (r *runner) nodeName() string {
	if r.cfg.node != "" {
		return r.cfg.node
	}
	if n, err := os.Hostname(); err == nil && n != "" {
		return n
	}
	return "unknown"
}

// superseded reports a run skipped or replaced under run_once.overlap:
// done for every runner but a backfill's.
func (r *runner) superseded(l ledger.Ledger) (runDone, bool) {
	if r.backfill {
		return runDone{}, false
	}
	if run, ok := l.Superseded(r.once.id); ok {
		return runDone{kind: ledger.BeginSuperseded, run: run}, true
	}
	return runDone{}, false
}

// reportSuperseded logs why the command is not started: the run was
// skipped or replaced; ExitRunSkipped.
func (r *runner) reportSuperseded(attempts []ledger.Attempt, seen string) int {
	var last ledger.Attempt
	if len(attempts) > 0 {
		last = attempts[len(attempts)-1]
	}
	r.log.Info(fmt.Sprintf("the run was %s under run_once.overlap; the command was not started (consullock backfill runs it again)", last.Outcome),
		"run_id", r.once.id, "seen", seen, "reason", last.Reason, "finished", last.Finished.Format(time.RFC3339), "exit_code", ledger.ExitRunSkipped)
	return ledger.ExitRunSkipped
}

// errRunStopped ends an acquisition that decided, without holding the
// lock, to exit with code (run_once.overlap, or the run found done).
type errRunStopped struct{ code int }

func (e errRunStopped) Error() string { return fmt.Sprintf("stopped waiting (exit %d)", e.code) }
