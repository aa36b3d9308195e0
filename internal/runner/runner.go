// Package runner is `consullock run`: `consul lock` made policy-aware. It
// reads a lock's declaration and session profile from the registry, creates
// the session exactly as declared, waits for the lock with blocking queries,
// runs a command while the lock is held, ends the command when the lock is
// lost, and on exit releases the lock before it destroys the session.
//
// Observe, decide, act: the renewer and the watcher observe, the loss
// judge decides (all three in package lockproto, shared with the
// controller's leader election), and the event loop in this file acts. Every goroutine belongs to the loop and is stopped
// and waited for before Main returns.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Main runs `consullock run` with args (the words after "run") and returns
// the exit code. It is registered in main.go's commands.
func Main(ctx context.Context, args []string) int {
	return mainWith(ctx, args, os.Stderr)
}

func mainWith(ctx context.Context, args []string, stderr io.Writer) int {
	// Catch signals first, so none is lost between start and the loop.
	sigCh := make(chan os.Signal, 4)
	signal.Notify(sigCh, forwardedSignals...)
	defer signal.Stop(sigCh)

	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "consullock run: %v\nRun 'consullock run -h' for usage.\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return ExitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	becomeSubreaper()
	r := &runner{cfg: cfg, log: log, started: time.Now()}
	return r.run(ctx, sigCh)
}

// runner is one run of `consullock run`.
type runner struct {
	cfg     config
	log     *slog.Logger
	started time.Time
	// acquired is when the lock was taken, as written in the holder value
	// (zero before); the release writes it again.
	acquired time.Time

	client  *consul.Client
	lock    lockmodel.Lock           // normalised
	profile lockmodel.SessionProfile // defaults applied
	// stop says when a holder without contact must stop its command.
	stop  lockmodel.StopRule
	proto lockproto.Protocol
}

func (r *runner) run(ctx context.Context, sigCh <-chan os.Signal) int {
	// Setup may wait on Consul (retries); a signal ends it.
	setupCtx, cancelSetup := context.WithCancel(ctx)
	var (
		setupSig  os.Signal
		stopWatch = make(chan struct{})
		watchDone = make(chan struct{})
	)
	go func() {
		defer close(watchDone)
		select {
		case sig := <-sigCh:
			setupSig = sig
			cancelSetup()
		case <-stopWatch:
		}
	}()
	err := r.setup(setupCtx)
	var first *lockproto.Session
	if err == nil && setupCtx.Err() == nil {
		r.log.Info("waiting for the lock", "timeout", r.cfg.timeout, "kind", r.lock.LockKindText())
		// Not cancelled by a signal: a create cancelled in flight may have
		// made a session whose ID never arrives, left to expire. The
		// signal is honoured once the create has answered, and the
		// session destroyed.
		first, err = lockproto.CreateSession(ctx, r.client, r.sessionName(), r.cfg.node, r.profile)
	}
	close(stopWatch)
	<-watchDone
	cancelSetup()
	if setupSig != nil {
		r.log.Warn("interrupted during setup", "signal", setupSig.String())
		if first != nil {
			_ = lockproto.DestroySession(ctx, r.client, first.ID)
		}
		return signalExitCode(setupSig)
	}
	if err != nil {
		r.log.Error("setup failed", "error", err.Error())
		return ExitSetup
	}
	return r.loop(ctx, sigCh, first)
}

// setup builds the client and resolves the lock and its session profile.
func (r *runner) setup(ctx context.Context) error {
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		return err
	}
	if r.client, err = consul.New(settings); err != nil {
		return err
	}
	if r.cfg.lockName != "" {
		if err := r.readDeclaration(ctx); err != nil {
			return err
		}
	} else {
		if r.lock, err = r.cfg.undeclaredLock(); err != nil {
			return err
		}
		r.profile = r.cfg.profile
	}
	r.log = r.log.With("lock", r.lockLabel(), "key", r.lock.Key)
	r.proto = lockproto.New(r.client, r.lock, r.profile.LockDelay, r.log)

	for _, w := range append(r.lock.ProfileWarnings(r.profile), r.profile.Warnings()...) {
		r.log.Warn(w.Summary, "detail", w.Detail)
	}
	r.stop = lockmodel.NewStopRule(r.profile, r.cfg.grace)
	if problem := r.stop.Problem("-grace"); problem != "" {
		r.log.Warn("this profile cannot guarantee that a holder cut off from Consul stops before another takes over",
			"detail", problem, "ttl", lockmodel.FormatDuration(r.stop.TTL), "lock_delay", lockmodel.FormatDuration(r.stop.LockDelay),
			"health_checks", r.stop.HealthChecks, "renew_every", lockmodel.FormatDuration(r.stop.RenewEvery),
			"renew_timeout", lockmodel.FormatDuration(r.stop.RenewTimeout), "grace", r.cfg.grace,
			"stops_after", lockmodel.FormatDuration(r.stop.LossAfter()), "killed_by", lockmodel.FormatDuration(r.stop.DeadBy()),
			"take_over_from", lockmodel.FormatDuration(r.stop.TakeOverAfter()))
	}
	if r.lock.MaxHold > 0 {
		r.log.Info("max_hold is enforced by the controller in enforce mode; the runner reports it as a lost lock",
			"max_hold", lockmodel.FormatDuration(r.lock.MaxHold))
	}
	return nil
}

func (r *runner) lockLabel() string {
	if r.cfg.lockName != "" {
		return r.cfg.lockName
	}
	return "(undeclared)"
}

// readDeclaration reads the lock record and its session profile record,
// consistently.
func (r *runner) readDeclaration(ctx context.Context) error {
	reg := r.client.Registry(r.cfg.registryPrefix)
	name := r.cfg.lockName
	rec, found, err := reg.Get(ctx, lockmodel.KindLock, name)
	if err != nil {
		return fmt.Errorf("read the declaration of lock %q: %w", name, err)
	}
	if !found {
		return fmt.Errorf("lock %q is not declared: there is no record at %s; declare it (resource consullock_lock), "+
			"check -registry-prefix, or use -key for a key without a declaration", name, rec.Key)
	}
	if r.lock, err = lockmodel.DecodeLockRecord(rec.Value); err != nil {
		return fmt.Errorf("the declaration at %s cannot be used: %w", rec.Key, err)
	}
	if r.lock.Name != name {
		return fmt.Errorf("the declaration at %s is for lock %q, not %q", rec.Key, r.lock.Name, name)
	}
	if r.lock.SessionDefaults == "" {
		r.profile = consulDefaultProfile(r.lock)
		return nil
	}
	prec, found, err := reg.Get(ctx, lockmodel.KindSessionDefaults, r.lock.SessionDefaults)
	if err != nil {
		return fmt.Errorf("read session profile %q of lock %q: %w", r.lock.SessionDefaults, name, err)
	}
	if !found {
		return fmt.Errorf("lock %q uses session profile %q, which is not declared: there is no record at %s",
			name, r.lock.SessionDefaults, prec.Key)
	}
	if r.profile, err = lockmodel.DecodeSessionProfileRecord(prec.Value); err != nil {
		return fmt.Errorf("the session profile at %s cannot be used: %w", prec.Key, err)
	}
	r.profile = r.profile.WithDefaults()
	return nil
}

// consulDefaultProfile is the profile of a declared lock without
// session_defaults: Consul's defaults (TTL 15s as api.Lock, lock-delay 15s,
// serfHealth), with behavior delete for a semaphore as api.Semaphore.
func consulDefaultProfile(l lockmodel.Lock) lockmodel.SessionProfile {
	p := lockmodel.SessionProfile{Name: "consul-defaults", TTL: lockmodel.DefaultSessionTTL, LockDelay: lockmodel.DefaultLockDelay}
	if l.IsSemaphore() {
		p.Behavior = lockmodel.BehaviorDelete
	}
	return p.WithDefaults()
}

func (r *runner) sessionName() string {
	if r.cfg.sessionName != "" {
		return r.cfg.sessionName
	}
	if r.cfg.lockName != "" {
		return "consullock run " + r.cfg.lockName
	}
	return "consullock run " + r.lock.Key
}

// holderValue is the value written at acquisition: who holds the lock,
// and since when (started: the acquisition attempt, not the start of the
// wait; the controller measures max_hold from it).
func (r *runner) holderValue(s *lockproto.Session, started time.Time) []byte {
	v := lockmodel.HolderValue{Node: s.Node, PID: os.Getpid(), Started: started.UTC()}
	if r.cfg.lockName != "" {
		v.Lock = r.cfg.lockName
	}
	b, _ := json.Marshal(v) // plain struct: cannot fail
	return b
}

// workers are the goroutines of one session (renewer, acquisition,
// watcher). stop cancels them and waits until all have returned.
type workers struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newWorkers(ctx context.Context) *workers {
	w := &workers{}
	w.ctx, w.cancel = context.WithCancel(ctx)
	return w
}

func (w *workers) goFn(f func(ctx context.Context)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f(w.ctx)
	}()
}

func (w *workers) stop() {
	w.cancel()
	w.wg.Wait()
}

// acquisition is the result of lockproto.Protocol.Acquire.
type acquisition struct {
	grant   lockproto.Grant
	err     error
	started time.Time // the successful attempt, as written in the value
}

type phase int

const (
	waiting     phase = iota // for the lock
	holding                  // the child runs under the lock
	terminating              // the lock is lost; the child is being stopped
	draining                 // the child exited; what it left in its group is being ended
)

// drainPoll is how often the runner checks whether the processes the
// command left in its process group are gone. Nothing signals the end of
// a process that is not the runner's child, so this polls.
const drainPoll = 20 * time.Millisecond

// killWait bounds the wait for SIGKILLed processes to be gone.
const killWait = 5 * time.Second

// loop is the event loop: it owns the session (first, already created), its
// workers and the child, and returns the exit code after cleaning up.
func (r *runner) loop(ctx context.Context, sigCh <-chan os.Signal, first *lockproto.Session) int {
	var (
		obs        = make(chan lockproto.Observation, 16)
		sess       *lockproto.Session
		work       *workers
		judge      *lockproto.LossJudge
		acqDone    chan acquisition
		attempted  bool // an acquisition was started for sess: release on exit
		ph         = waiting
		ch         *child
		granted    lockproto.Grant
		lossWhy    string
		acquiredAt time.Time
		exited     bool // the child has exited and been reaped
		exitCode   int  // the child's, kept while draining
		drainC     <-chan time.Time
		killedAt   time.Time // when the group was sent SIGKILL while draining
	)
	deadline := time.NewTimer(time.Hour) // contact deadline while holding
	deadline.Stop()
	defer deadline.Stop()
	grace := time.NewTimer(time.Hour) // SIGTERM -> SIGKILL while terminating
	grace.Stop()
	defer grace.Stop()
	var timeoutC <-chan time.Time
	if r.cfg.timeout > 0 {
		t := time.NewTimer(r.cfg.timeout)
		defer t.Stop()
		timeoutC = t.C
	}

	// Cleanup on every path: stop the workers, release, then destroy.
	defer func() {
		if work != nil {
			work.stop()
		}
		if sess == nil {
			return
		}
		cctx := context.WithoutCancel(ctx)
		if attempted {
			switch released, err := r.proto.Release(cctx, sess, r.holderValue(sess, r.acquired)); {
			case err != nil:
				r.log.Warn("release failed; the lock frees when the session ends", "session", sess.ID, "error", err.Error())
			case released:
				r.log.Info("lock released", "session", sess.ID)
			default:
				r.log.Debug("nothing to release: the session did not hold the lock", "session", sess.ID)
			}
		}
		if err := lockproto.DestroySession(cctx, r.client, sess.ID); err != nil {
			r.log.Warn("session destroy failed; Consul invalidates it after about 2 x TTL", "session", sess.ID, "error", err.Error())
		} else {
			r.log.Info("session destroyed", "session", sess.ID)
		}
	}()

	// startSession starts the workers of session s, creating it when nil.
	startSession := func(s *lockproto.Session) error {
		if s == nil {
			var err error
			if s, err = lockproto.CreateSession(ctx, r.client, r.sessionName(), r.cfg.node, r.profile); err != nil {
				return err
			}
		}
		sess, attempted = s, false
		judge = lockproto.NewLossJudge(r.stop, s.Created)
		work = newWorkers(ctx)
		work.goFn(func(ctx context.Context) {
			lockproto.RenewLoop(ctx, r.client, s.ID, r.stop.RenewEvery, r.stop.RenewTimeout, obs)
		})
		r.log.Info("session created", "session", s.ID, "node", s.Node, "profile", r.profile.Name,
			"ttl", lockmodel.FormatDuration(r.profile.TTL), "lock_delay", lockmodel.FormatDuration(r.profile.LockDelay),
			"behavior", string(r.profile.Behavior), "node_checks", r.profile.NodeChecks,
			"renew_every", lockmodel.FormatDuration(r.profile.RenewEvery), "stops_after_no_contact", lockmodel.FormatDuration(r.stop.LossAfter()))

		done := make(chan acquisition, 1)
		acqDone, attempted = done, true
		work.goFn(func(ctx context.Context) {
			var attempt time.Time
			g, err := r.proto.Acquire(ctx, s, func() []byte {
				attempt = time.Now()
				return r.holderValue(s, attempt)
			})
			done <- acquisition{grant: g, err: err, started: attempt}
		})
		return nil
	}
	// replaceSession is for a session that ended while waiting: wait on
	// with a new one.
	replaceSession := func(why string) error {
		r.log.Warn("session ended while waiting for the lock; creating a new one", "session", sess.ID, "reason", why)
		work.stop()
		_ = lockproto.DestroySession(ctx, r.client, sess.ID)
		sess, work = nil, nil
		return startSession(nil)
	}
	startTermination := func(reason string) {
		ph, lossWhy = terminating, reason
		deadline.Stop()
		r.log.Error("lock lost; stopping the command", "reason", reason, "pid", ch.pid(), "signal", "SIGTERM",
			"grace", r.cfg.grace)
		if err := ch.signal(sigTerm); err != nil && !errors.Is(err, os.ErrProcessDone) {
			r.log.Warn("could not signal the command", "error", err.Error())
		}
		grace.Reset(r.cfg.grace)
	}
	// lose acts on a lost lock: the running command is stopped; processes
	// it left behind are killed at once (they had the command's grace).
	lose := func(reason string) {
		if ph == holding {
			startTermination(reason)
			return
		}
		if lossWhy == "" {
			lossWhy = reason
			deadline.Stop()
			r.log.Error("lock lost while ending the processes the command left; killing them", "reason", reason, "pgid", ch.pid())
			_ = ch.signal(sigKill)
			killedAt = time.Now()
		}
	}
	armDeadline := func() {
		deadline.Reset(max(time.Until(judge.Deadline()), 0) + time.Millisecond)
	}

	if err := startSession(first); err != nil {
		r.log.Error("setup failed", "error", err.Error())
		return ExitSetup
	}
	waitStart := time.Now()
	ctxDone := ctx.Done()

	// killLeftovers SIGKILLs the command's process group and waits, with
	// a bound, until it is empty.
	killLeftovers := func() {
		if !ch.ownGroup {
			return
		}
		_ = ch.signal(sigKill)
		for end := time.Now().Add(killWait); ch.groupLeft() && time.Now().Before(end); {
			time.Sleep(drainPoll)
		}
		if ch.groupLeft() {
			r.log.Warn("processes of the command's process group survived SIGKILL", "pgid", ch.pid(), "waited", killWait)
		}
	}
	var drainTicker *time.Ticker
	defer func() {
		if drainTicker != nil {
			drainTicker.Stop()
		}
	}()

	for {
		var childDone chan struct{}
		if ch != nil && !exited {
			childDone = ch.done
		}
		select {
		case <-ctxDone:
			ctxDone = nil
			if ph == waiting {
				r.log.Error("cancelled while waiting for the lock", "error", context.Cause(ctx))
				return ExitSetup
			}
			if ph == holding {
				r.log.Warn("cancelled; stopping the command", "pid", ch.pid())
				_ = ch.signal(sigTerm)
				grace.Reset(r.cfg.grace)
			}

		case sig := <-sigCh:
			if ph == waiting {
				if abortsWaiting(sig) {
					r.log.Warn("interrupted while waiting for the lock", "signal", sig.String())
					return signalExitCode(sig)
				}
				continue
			}
			r.log.Info("forwarding signal to the command", "signal", sig.String(), "pid", ch.pid())
			if err := ch.signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				r.log.Warn("could not forward signal", "signal", sig.String(), "error", err.Error())
			}

		case <-timeoutC:
			if ph == waiting {
				r.log.Error("timed out waiting for the lock", "timeout", r.cfg.timeout)
				return ExitTimeout
			}

		case res := <-acqDone:
			acqDone = nil
			if res.err != nil {
				if errors.Is(res.err, lockproto.ErrSessionInvalid) {
					if err := replaceSession(res.err.Error()); err != nil {
						r.log.Error("setup failed", "error", err.Error())
						return ExitSetup
					}
					continue
				}
				r.log.Error("cannot acquire the lock", "error", res.err.Error())
				return ExitSetup
			}
			granted, acquiredAt, r.acquired = res.grant, time.Now(), res.started
			timeoutC = nil
			if v := judge.Check(acquiredAt); v.Lost {
				r.log.Error("lock lost right after acquiring it; the command was not started", "reason", v.Reason)
				return ExitLockLost
			}
			r.log.Info("lock acquired", "session", sess.ID, "fencing_token", granted.FencingToken, "lock_index", granted.LockIndex,
				"waited", time.Since(waitStart).Round(time.Millisecond))
			c, err := startChild(r.cfg.command, childEnv(os.Environ(), r.proto.Key(), sess.ID, granted))
			if err != nil {
				r.log.Error("cannot start the command", "command", r.cfg.command[0], "error", err.Error())
				return startErrorExitCode(err)
			}
			ch, ph = c, holding
			r.log.Info("command started", "pid", ch.pid(), "own_process_group", ch.ownGroup)
			s := sess
			work.goFn(func(ctx context.Context) { r.proto.Watch(ctx, s, obs) })
			armDeadline()

		case o := <-obs:
			if sess == nil || o.Session != sess.ID {
				continue // about a replaced session
			}
			v := judge.Observe(o)
			switch {
			case (o.Kind == lockproto.ObsRenewFailed || o.Kind == lockproto.ObsReadFailed) && ph == holding:
				r.log.Warn("request to the cluster failed", "observed", o.Kind.String(), "error", o.Detail,
					"lost_if_no_renewal_by", judge.Deadline().Format(time.RFC3339Nano))
			case o.Kind == lockproto.ObsRenewFailed || o.Kind == lockproto.ObsReadFailed:
				r.log.Warn("request to the cluster failed", "observed", o.Kind.String(), "error", o.Detail)
			default:
				r.log.Debug("observed", "observed", o.Kind.String(), "detail", o.Detail)
			}
			switch ph {
			case waiting:
				if o.Kind == lockproto.ObsSessionGone {
					acqDone = nil
					if err := replaceSession(o.Detail); err != nil {
						r.log.Error("setup failed", "error", err.Error())
						return ExitSetup
					}
				}
			case holding, draining:
				if v.Lost {
					lose(v.Reason)
				} else {
					armDeadline()
				}
			}

		case <-deadline.C:
			if ph != holding && ph != draining {
				continue
			}
			if v := judge.Check(time.Now()); v.Lost {
				lose(v.Reason)
			} else {
				armDeadline()
			}

		case <-grace.C:
			switch {
			case ph == draining:
				r.log.Warn("processes left by the command did not exit within the grace period; killing them", "pgid", ch.pid(), "grace", r.cfg.grace)
				_ = ch.signal(sigKill)
				killedAt = time.Now()
			case ph == terminating || ctxDone == nil:
				r.log.Error("command did not exit within the grace period; killing it", "pid", ch.pid(), "grace", r.cfg.grace)
				_ = ch.signal(sigKill)
			}

		case <-drainC:
			if !ch.groupLeft() {
				r.log.Info("the processes the command left have ended", "pgid", ch.pid())
				if lossWhy != "" {
					return ExitLockLost
				}
				return exitCode
			}
			if !killedAt.IsZero() && time.Since(killedAt) > killWait {
				r.log.Warn("processes of the command's process group survived SIGKILL; releasing the lock anyway", "pgid", ch.pid(), "waited", killWait)
				if lossWhy != "" {
					return ExitLockLost
				}
				return exitCode
			}

		case <-childDone:
			exited = true
			held := time.Since(acquiredAt).Round(time.Millisecond)
			if ph == terminating {
				// The lock is lost: nothing the command started may go
				// on, and the group had its grace with the command.
				killLeftovers()
				r.log.Error("lock lost: the command was stopped", "reason", lossWhy, "exit_code", ExitLockLost, "held", held)
				return ExitLockLost
			}
			exitCode = childExitCode(ch.state, r.cfg.childExitCode)
			r.log.Info("command exited", "status", ch.state.String(), "exit_code", exitCode, "held", held)
			if !ch.groupLeft() {
				return exitCode
			}
			// The lock is released only when nothing the command
			// started still works under it.
			ph = draining
			r.log.Warn("the command left processes in its process group; ending them before releasing the lock",
				"pgid", ch.pid(), "signal", "SIGTERM", "grace", r.cfg.grace)
			_ = ch.signal(sigTerm)
			grace.Reset(r.cfg.grace)
			drainTicker = time.NewTicker(drainPoll)
			drainC = drainTicker.C
		}
	}
}
