package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Pause (record.Pause): a runner that finds its lock paused at start
// does not run the command; a waiter leaves when the pause appears, and
// its acquisition reads the pause record in its own transaction
// (lockproto.Settings.BlockingKey): found there, the lock is given up and the
// command does not run. So a pause written just before the acquisition,
// before the waiter's watch saw it, is never missed, and the hand-over
// has no read after the lock op (a lock handed over by waiters = "handoff"
// reads the record once). A command already running is left to finish: a
// pause stops new runs, it does not end the current one (`consullock
// release` does).

// pausedError: the lock is paused; the command does not run.
type pausedError struct{ p record.Pause }

func (e pausedError) Error() string {
	return fmt.Sprintf("lock %q is paused by %s since %s: %s", e.p.Lock, e.p.By, e.p.At.Format(time.RFC3339), e.p.Reason)
}

// checkPause reads the pause record of a declared lock: a pausedError
// when it is paused. A token that may not read the record (a policy
// written before pauses existed) is warned about and treated as not
// paused, so that an upgrade does not stop every job.
func (r *runner) checkPause(ctx context.Context) error {
	if r.cfg.lockName == "" {
		return nil
	}
	p, _, err := store.New(r.client).Registry(r.cfg.registryPrefix).ReadPause(ctx, r.cfg.lockName)
	r.pauseReadable = !errors.Is(err, consul.ErrPermissionDenied)
	switch {
	case errors.Is(err, consul.ErrPermissionDenied):
		r.log.Warn("cannot read the lock's pause record; running as if not paused. Add the key to the worker policy's read_keys (consullock_lock.pause_key)",
			"pause_key", record.PauseKey(r.cfg.registryPrefix, r.cfg.lockName), "error", err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("read the pause record: %w", err)
	case p != nil:
		return pausedError{*p}
	}
	return nil
}

// logPaused says why the command did not run and returns the exit code.
func (r *runner) logPaused(p record.Pause, when string) int {
	r.log.Warn("the lock is paused; the command was not run"+when, "paused_by", p.By, "paused_at", p.At.Format(time.RFC3339),
		"paused_for", p.PausedFor(r.cfg.clock.Now()).Round(time.Second).String(), "reason", p.Reason, "exit_code", r.cfg.exitIfPaused)
	r.notStarted = HookPaused
	return r.cfg.exitIfPaused
}

// watchPause follows the pause record while the runner waits and sends
// the pause when one appears. It returns when ctx ends or after sending.
func (r *runner) watchPause(ctx context.Context, out chan<- record.Pause) {
	consul.FollowKey(ctx, r.watchClient, record.PauseKey(r.cfg.registryPrefix, r.cfg.lockName), "the pause record", 0, r.log, func(pair *api.KVPair, _ uint64) bool {
		if pair != nil {
			if p, err := record.DecodePauseRecord(pair.Value); err == nil {
				out <- p
				return false
			}
		}
		return true
	})
}

// startPauseWatch starts watchPause for a waiter of a declared lock; the
// returned stop ends it and waits for it.
func (s *supervisor) startPauseWatch(ctx context.Context) {
	if s.r.cfg.lockName == "" {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.paused = make(chan record.Pause, 1)
	s.stopPause = func() { cancel(); <-done }
	go func() {
		defer close(done)
		s.r.watchPause(pctx, s.paused)
	}()
}

func (s *supervisor) pausedC() <-chan record.Pause {
	if s.state != waiting || s.acq == nil {
		return nil
	}
	return s.paused
}

// onPaused: the lock was paused while this runner waited: it leaves.
func (s *supervisor) onPaused(p record.Pause) (int, bool) {
	return s.r.logPaused(p, "; stopped waiting"), true
}
