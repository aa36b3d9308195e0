package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/runonce"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// RunOnce runs a function once per run ID on a declared run-once lock
// (consullock_lock with run_once), sharing its run ledger with `consullock
// run -run-id` and every other RunOnce on the lock: a run that succeeded
// anywhere is not run again, a failed, lost or crashed attempt is retried
// until run_once.max_attempts, with run_once.retry_after between attempts.
type RunOnce struct {
	c    *consul.Client
	name string
	cfg  config
}

// NewRunOnce is run once on the lock declared under name. It does not
// contact Consul: every Do reads the declaration afresh. The token needs
// what a worker of `consullock run` needs: key read on the lock's and its
// profile's records and its pause record, key write on the lock key and
// the run ledger (<registry>/runs/<name>), session write on the node.
func NewRunOnce(client *api.Client, name string, opts ...Option) *RunOnce {
	return &RunOnce{c: consul.FromAPI(client), name: name, cfg: newConfig(opts)}
}

// Attempt is what the function learns of its attempt.
type Attempt struct {
	// RunID is the run's ID; with a run_once.schedule, a timestamp run ID
	// is named by its slot (the slot's time in RFC 3339 in its zone).
	RunID string
	// Number counts the run's attempts from 1, across every caller.
	Number      int
	MaxAttempts int
	// FencingToken is the hold's fencing token (Mutex.Token).
	FencingToken uint64
	// Scheduled is the slot's time when the run is a slot of the lock's
	// run_once; zero otherwise.
	Scheduled time.Time

	fence store.Fence
}

// IsOwner is a transaction op that fails a Consul transaction unless the
// attempt's session still holds the lock (Mutex.IsOwner).
func (a Attempt) IsOwner() *api.TxnOp { return &api.TxnOp{KV: a.fence.Op()} }

// Do runs fn once for runID across every caller on the lock, and returns
// fn's error, or why fn was not called:
//
//   - ErrAlreadySucceeded, ErrExhausted, ErrSkipped, ErrPaused: the ledger
//     (or the pause record) says fn must not run; it is read before a
//     session is created, and again once the lock is held;
//   - a context error when ctx ended while waiting for the lock.
//
// Do creates a session from the lock's declared profile, waits for the
// lock, records the attempt "running" under it, and calls fn with a
// context that is cancelled when the lock is lost (the stop rule, with
// WithGrace for fn to return) or run_once.max_runtime passes. fn's
// outcome (succeeded for nil, failed for an error, lost or timed_out when
// the cancellation reached fn before it returned) is written in the
// transaction that releases the lock, or after a loss while the attempt
// still reads running; ErrLockLost, ErrTimedOut and ErrOutcomeNotRecorded
// are joined to fn's error. When the run must wait for retry_after, Do
// waits without the lock and tries again.
func (r *RunOnce) Do(ctx context.Context, runID string, fn func(ctx context.Context, a Attempt) error) error {
	if fn == nil {
		return errors.New("concurrency: Do needs a function")
	}
	for {
		err := r.once(ctx, runID, fn)
		var w retryWait
		if !errors.As(err, &w) {
			return err
		}
		r.cfg.log.Info("the run waits for run_once.retry_after before its next attempt", "run_id", runID, "not_before", w.until.Format(time.RFC3339))
		if err := consul.Sleep(ctx, time.Until(w.until)); err != nil {
			return err
		}
	}
}

// retryWait: the run's next attempt may not start before until.
type retryWait struct{ until time.Time }

func (w retryWait) Error() string {
	return "the run's next attempt waits until " + w.until.Format(time.RFC3339)
}

// once is one pass of Do: look, acquire, decide, and run or report.
func (r *RunOnce) once(ctx context.Context, runID string, fn func(context.Context, Attempt) error) error {
	u, err := r.resolve(ctx, runID)
	if err != nil {
		return err
	}
	if err := u.lookFirst(ctx); err != nil {
		return err
	}
	s, err := createSession(ctx, r.c, u.profile, r.cfg, "consullock run-once "+r.name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
			r.cfg.log.Warn("ending the session failed; it ends by TTL", "session", s.ID(), "error", cerr.Error())
		}
	}()
	h, err := newHold(s, u.lock, lockproto.Settings{})
	if err != nil {
		return err
	}
	if err := u.acquire(ctx, h); err != nil {
		return err
	}
	if err := u.checkPause(ctx); err != nil {
		return err
	}
	d, err := u.begin(ctx, h)
	switch {
	case err != nil:
		return err
	case d.Kind == ledger.BeginRun:
		return u.execute(ctx, h, d.Attempt, fn)
	case d.Kind == ledger.BeginWait:
		return retryWait{d.NotBefore}
	}
	return u.notRun(d.Kind, len(d.Attempts))
}

// run is one pass's run: the declaration as read, and the run's ledger
// protocol (runonce.Run: set by begin to the attempt and the ledger as
// this holder wrote it).
type run struct {
	r         *RunOnce
	lock      lockmodel.Lock
	profile   lockmodel.Profile
	spec      ledger.RunOnce // defaults applied
	scheduled time.Time
	proto     runonce.Run
}

// resolve reads the declaration and names the run (RunIDSlot, as the
// runner's -run-id).
func (r *RunOnce) resolve(ctx context.Context, runID string) (*run, error) {
	l, p, err := lockproto.ReadDeclaration(ctx, r.c, r.cfg.registry, r.name)
	if err != nil {
		return nil, err
	}
	if l.IsSemaphore() {
		return nil, fmt.Errorf("concurrency: lock %q is a semaphore (limit %d); run once needs a mutex", r.name, l.Limit)
	}
	spec := ledger.RunOnce{}
	if l.RunOnce != nil {
		spec = *l.RunOnce
	}
	spec = spec.WithDefaults()
	id, at, slot, err := spec.RunIDSlot(runID)
	if err != nil {
		return nil, err
	}
	if err := ledger.ValidateRunID(id); err != nil {
		return nil, err
	}
	u := &run{r: r, lock: l, profile: p, spec: spec, proto: runonce.Run{
		Client: r.c, Key: record.RunLedgerKey(r.cfg.registry, r.name), Lock: r.name,
		ID: id, Policy: spec.Policy(), Keep: spec.Keep, Log: r.cfg.log,
	}}
	if slot && l.RunOnce != nil {
		u.scheduled = at
	}
	return u, nil
}

// lookFirst reads the pause record and the ledger before any session
// exists: a run that is done, or a paused lock, costs no write. A ledger
// that cannot be read is left to the holder's read.
func (u *run) lookFirst(ctx context.Context) error {
	if err := u.checkPause(ctx); err != nil {
		return err
	}
	l, _, err := store.New(u.r.c).ReadLedger(ctx, u.proto.Key, u.r.name)
	if err != nil {
		u.r.cfg.log.Debug("cannot read the run ledger before creating a session; the holder decides", "error", err.Error())
		return nil
	}
	return u.doneIn(l)
}

// doneIn is the notRun error when ledger l shows the run done (succeeded,
// or exhausted under max_attempts), nil otherwise.
func (u *run) doneIn(l ledger.Ledger) error {
	if kind, done, ok := u.proto.Done(l); ok {
		return u.notRun(kind, len(done.Attempts))
	}
	return nil
}

// checkPause is ErrPaused while the lock is paused. A token that may not
// read the pause record runs as if not paused, as the runner does.
func (u *run) checkPause(ctx context.Context) error {
	p, _, err := store.New(u.r.c).Registry(u.r.cfg.registry).ReadPause(ctx, u.r.name)
	switch {
	case errors.Is(err, consul.ErrPermissionDenied):
		u.r.cfg.log.Warn("cannot read the lock's pause record; running as if not paused", "pause_key", record.PauseKey(u.r.cfg.registry, u.r.name))
		return nil
	case err != nil:
		return fmt.Errorf("read the pause record: %w", err)
	case p != nil:
		return fmt.Errorf("%w: lock %q is paused by %s since %s: %s", ErrPaused, u.r.name, p.By, p.At.Format(time.RFC3339), p.Reason)
	}
	return nil
}

// notRun is the error of a run the ledger says not to run.
func (u *run) notRun(kind ledger.BeginKind, attempts int) error {
	switch kind {
	case ledger.BeginAlreadySucceeded:
		return fmt.Errorf("%w: run %q of lock %q", ErrAlreadySucceeded, u.proto.ID, u.r.name)
	case ledger.BeginExhausted:
		return fmt.Errorf("%w: run %q of lock %q made %d attempts (max_attempts %d)", ErrExhausted, u.proto.ID, u.r.name, attempts, u.spec.MaxAttempts)
	}
	return fmt.Errorf("%w: run %q of lock %q (run_once.overlap)", ErrSkipped, u.proto.ID, u.r.name)
}

// begin decides and records the attempt under the hold (runonce
// Run.Begin, on a consistent read), trying again while the lock is held.
func (u *run) begin(ctx context.Context, h *hold) (ledger.BeginDecision, error) {
	d, err := u.proto.Begin(ctx, runonce.Tenure{
		Fence:  h.fence(),
		Holder: holder.Holder{Node: h.s.s.Node, Session: h.s.s.ID, FencingToken: h.token()},
		Held:   func() bool { return h.err() == nil },
	}, nil)
	if errors.Is(err, store.ErrFenceLost) {
		return ledger.BeginDecision{}, fmt.Errorf("%w while recording the attempt: %v", ErrLockLost, err)
	}
	return d.BeginDecision, err
}

// execute calls fn as attempt n and records its outcome.
func (u *run) execute(ctx context.Context, h *hold, n int, fn func(context.Context, Attempt) error) error {
	a := Attempt{RunID: u.proto.ID, Number: n, MaxAttempts: u.spec.MaxAttempts, FencingToken: h.token(), Scheduled: u.scheduled, fence: h.fence()}
	u.r.cfg.log.Info("run attempt recorded; calling the function", "run_id", u.proto.ID, "attempt", n, "fencing_token", a.FencingToken)
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// stopped is the cancellation that reached fn before it returned.
	var (
		mu       sync.Mutex
		returned bool
		stopped  error
	)
	stop := func(cause error) {
		mu.Lock()
		defer mu.Unlock()
		if !returned && stopped == nil {
			stopped = cause
			cancel(cause)
		}
	}
	finished := make(chan struct{})
	go func() {
		select {
		case <-h.doneC():
			stop(cmpErr(h.err(), ErrLockLost))
		case <-finished:
		}
	}()
	if u.spec.MaxRuntime > 0 {
		t := time.AfterFunc(u.spec.MaxRuntime, func() {
			stop(fmt.Errorf("%w (%s)", ErrTimedOut, lockmodel.FormatDuration(u.spec.MaxRuntime)))
		})
		defer t.Stop()
	}
	err := fn(fctx, a)
	mu.Lock()
	returned = true
	cause := stopped
	mu.Unlock()
	close(finished)
	res := outcome(err, cause)
	if !u.finish(context.WithoutCancel(ctx), h, res) {
		return errors.Join(cause, err, fmt.Errorf("%w: run %q attempt %d (%s)", ErrOutcomeNotRecorded, u.proto.ID, n, res.Outcome))
	}
	return errors.Join(cause, err)
}

// outcome is the attempt's result: lost or timed_out when that
// cancellation reached fn before it returned, else fn's own.
func outcome(err, stopped error) ledger.AttemptResult {
	one, zero := 1, 0
	switch {
	case errors.Is(stopped, ErrTimedOut):
		return ledger.AttemptResult{Outcome: ledger.RunTimedOut}
	case stopped != nil:
		return ledger.AttemptResult{Outcome: ledger.RunLost, Reason: stopped.Error()}
	case err == nil:
		return ledger.AttemptResult{Outcome: ledger.RunSucceeded, ExitCode: &zero}
	}
	return ledger.AttemptResult{Outcome: ledger.RunFailed, ExitCode: &one}
}

// cmpErr is err, or def when err is nil.
func cmpErr(err, def error) error {
	if err == nil {
		return def
	}
	return err
}
