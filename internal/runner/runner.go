// Package runner is `consullock run`: `consul lock` made policy-aware. It
// reads a lock's declaration and session profile from the registry, creates
// the session exactly as declared, waits for the lock with blocking queries,
// runs a command while the lock is held, ends the command when the lock is
// lost, and on exit releases the lock before it destroys the session.
//
// Observe, decide, act: the renewer and the watcher observe, the loss
// judge decides (all three held together by the public library's session
// and hold, package concurrency, reached through internal/libhold and
// shared with the controller's leader election and the ephemeral lock),
// and the supervisor (supervisor.go) acts on the command. Every goroutine
// belongs to the hold or the supervisor and is stopped and waited for
// before Main returns.
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
	"sync/atomic"
	"time"

	_ "github.com/consullock/terraform-provider-consullock/concurrency" // sets libhold.Acquire
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Main runs `consullock run` with args (the words after "run") and returns
// the exit code. It is registered in main.go's commands.
func Main(ctx context.Context, args []string) int {
	return mainWith(ctx, args, os.Stderr)
}

func mainWith(ctx context.Context, args []string, stderr io.Writer) int {
	return mainAs(ctx, args, stderr, false)
}

// mainAs is mainWith for a backfill's runner (backfill true: runner.backfill).
func mainAs(ctx context.Context, args []string, stderr io.Writer, backfill bool) int {
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
	log := logformat.New(stderr, cfg.logFormat, cfg.logLevel)
	becomeSubreaper()
	// The guard starts (a few ms) while the runner sets up and waits.
	treeProtection = cfg.treeProtection
	standby, gerr := prepareGuard()
	r := &runner{cfg: cfg, log: log, started: cfg.clock.Now(), standby: standby, backfill: backfill}
	defer r.standby.discardUnused()
	if gerr != nil && cfg.treeProtection == ProtectionPIDNamespace {
		log.Error("cannot protect the command's process tree as asked", "tree_protection", cfg.treeProtection, "error", gerr.Error(),
			"exit_code", ExitSetup)
		return ExitSetup
	}
	code := r.run(ctx, sigCh)
	r.runNotStartedHook(ctx)
	return code
}

// runner is one run of `consullock run`.
type runner struct {
	cfg config
	// log names the lock and its key; holdLog only the lock (the hold
	// adds the key).
	log     *slog.Logger
	holdLog *slog.Logger
	started time.Time
	// waitStart is when the runner began to wait for the lock without a
	// session (waitWhileHeld); -timeout counts from it.
	waitStart time.Time

	client *consul.Client
	// watchClient has connections of its own for the hold's watch, so
	// that the release finds client's connection idle (lockproto.Settings.WatchClient).
	watchClient *consul.Client
	lock        lockmodel.Lock // normalised
	profile     lockmodel.Profile
	// stop says when a holder without contact must stop its command.
	stop lockmodel.StopRule
	// once is the run of a run-once job; nil without -run-id or run_once.
	once *runOnce
	// holder keeps the holder's service instance; nil without
	// holder_service (holderservice.go).
	holder *holderService
	// standby is the guard that will start the command (guard.go); nil
	// without one.
	standby *guard
	// running is the command once started: each renewal moves its guard's
	// kill-by (logObservation, on the hold's goroutine).
	running atomic.Pointer[child]
	// pauseReadable: the token may read the lock's pause record, so every
	// acquisition reads it and gives the lock up while it exists
	// (lockproto.Settings.BlockingKey).
	pauseReadable bool
	// backfill: run by consullock backfill (backfill.go): a run skipped or
	// replaced is run again, and run_once.overlap is not applied.
	backfill bool
	// notStarted is what -on-outcome is told when the runner ends without
	// starting the command for a reason that needs attention (HookMissed,
	// HookExhausted, HookPaused; "" for none).
	notStarted string
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
		if code, done := r.doneBeforeSession(setupCtx); done {
			close(stopWatch)
			<-watchDone
			cancelSetup()
			return code
		}
		r.log.Info("waiting for the lock", "timeout", r.cfg.timeout, "kind", r.lock.LockKindText(), "tree_protection", r.treeProtection())
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
	if p := (pausedError{}); errors.As(err, &p) {
		return r.logPaused(p.p, "") // no session was made
	}
	if errors.Is(err, errUsage) {
		r.log.Error("usage error", "error", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return ExitUsage // found before anything was written
	}
	if err != nil {
		r.log.Error("setup failed", "error", err.Error())
		return ExitSetup
	}
	return r.superviseRuns(ctx, sigCh, first)
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
	if r.watchClient, err = consul.New(settings); err != nil {
		return err
	}
	if r.cfg.lockName != "" {
		if err := r.readDeclaration(ctx); err != nil {
			return err
		}
		if err := r.checkHolderNode(); err != nil {
			return err
		}
		if err := r.checkPause(ctx); err != nil {
			return err
		}
	} else {
		if r.lock, err = r.cfg.undeclaredLock(); err != nil {
			return err
		}
		r.profile = r.cfg.profile
	}
	r.holdLog = r.log.With("lock", r.lockLabel())
	r.log = r.holdLog.With("key", r.lock.Key)

	for _, w := range append(r.lock.ProfileWarnings(r.profile), r.profile.Warnings()...) {
		r.log.Warn(w.Summary, "detail", w.Detail)
	}
	r.stop = lockmodel.NewStopRule(r.profile, r.cfg.grace)
	if verdict := r.stop.Verdict(); verdict != "" {
		r.log.Warn("holders cut off from Consul cannot stop in time", "session_defaults", r.profile.Name,
			"verdict", verdict, "fix", r.stop.Fix())
	}
	if r.lock.MaxHold > 0 {
		r.log.Info("max_hold is enforced by the controller in enforce mode; the runner reports it as a lost lock",
			"max_hold", lockmodel.FormatDuration(r.lock.MaxHold))
	}
	if err := r.resolveRun(); err != nil {
		return err
	}
	return r.checkKeepOutput()
}

func (r *runner) lockLabel() string {
	if r.cfg.lockName != "" {
		return r.cfg.lockName
	}
	return "(undeclared)"
}

// readDeclaration reads the lock record and its session profile record,
// consistently (lockproto.ReadDeclaration, shared with the provider's
// ephemeral lock).
func (r *runner) readDeclaration(ctx context.Context) error {
	l, p, err := lockproto.ReadDeclaration(ctx, r.client, r.cfg.registryPrefix, r.cfg.lockName)
	if errors.Is(err, lockproto.ErrNotDeclared) {
		return fmt.Errorf("%w, or use -key for a key without a declaration", err)
	}
	if err != nil {
		return err
	}
	r.lock, r.profile = l, p
	return nil
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

// acquire waits for the lock with session first and, each time a session
// ends while waiting, with a new one. The hold logs its observations
// through logObservation. A run-once runner tries first
// (lockproto.Settings.Try): one that loses the race for the free key ends its
// session and waits without one (waitWithoutSession), as one that found
// the key held does; one whose session was created just after another
// arrival's yields before its lock op (yieldToEarlierContender).
func (r *runner) acquire(ctx context.Context, first *lockproto.Session) (libhold.Held, error) {
	s := first
	for {
		set := lockproto.Settings{WatchClient: r.watchClient, Clock: r.cfg.clock, Try: r.once != nil && !r.once.outlived}
		if r.pauseReadable {
			set.BlockingKey = record.PauseKey(r.cfg.registryPrefix, r.cfg.lockName)
		}
		r.log.Info("session created", "session", s.ID, "node", s.Node, "profile", r.profile.Name,
			"ttl", lockmodel.FormatDuration(r.profile.TTL), "lock_delay", lockmodel.FormatDuration(r.profile.LockDelay),
			"behavior", string(r.profile.Behavior), "node_checks", r.profile.NodeChecks,
			"renew_every", lockmodel.FormatDuration(r.profile.RenewEvery), "stops_after_no_contact", lockmodel.FormatDuration(r.stop.LossAfter()))
		if yielded, err := r.yieldToEarlierContender(ctx, s); yielded {
			if err != nil {
				return nil, err
			}
			if s, err = lockproto.CreateSession(ctx, r.client, r.sessionName(), r.cfg.node, r.profile); err != nil {
				return nil, setupError{err}
			}
			continue
		}
		sess := s
		h, err := libhold.Acquire(ctx, r.client, r.lock, r.profile, libhold.Options{
			Session: s, Grace: r.cfg.grace, Protocol: set, Observer: r.logObservation, Log: r.holdLog,
			RuleWarned: true, // setup warned with the runner's numbers
			Value:      func() []byte { return r.holderValue(sess, r.cfg.clock.Now()) },
		})
		switch {
		case err == nil:
			return h, nil
		case ctx.Err() != nil:
			return h, err
		case errors.Is(err, lockproto.ErrBlocked):
			if err := r.checkPause(ctx); err != nil {
				return nil, err // paused: the hold gave the lock up
			}
			r.log.Info("the lock was paused and resumed while this runner acquired it; acquiring again")
		case errors.Is(err, lockproto.ErrLocked):
			if err := r.waitWithoutSession(ctx, err, false); err != nil {
				return nil, err
			}
		case errors.Is(err, lockproto.ErrSessionInvalid):
			r.log.Warn("session ended while waiting for the lock; creating a new one", "session", s.ID, "reason", err.Error())
		default:
			return h, err
		}
		if s, err = lockproto.CreateSession(ctx, r.client, r.sessionName(), r.cfg.node, r.profile); err != nil {
			return nil, setupError{err}
		}
	}
}

// setupError is a failure to create a session: the runner reports it as
// setup failing, not as the acquisition failing.
type setupError struct{ error }

func (e setupError) Unwrap() error { return e.error }

// logObservation logs what the renewer and the watcher saw: a failed
// request as a warning (with the contact deadline once the lock is held),
// anything else at debug level.
func (r *runner) logObservation(o lockproto.Observation, held bool, lostIfNoRenewalBy time.Time) {
	if held && o.Kind == lockproto.ObsRenewed {
		r.holder.onRenewed(o.At)
		if c := r.running.Load(); c != nil {
			c.extend(o.At.Add(r.stop.GuardKillAfter()))
		}
	}
	switch {
	case (o.Kind == lockproto.ObsRenewFailed || o.Kind == lockproto.ObsReadFailed) && held:
		r.log.Warn("request to the cluster failed", "observed", o.Kind.String(), "error", o.Detail,
			"lost_if_no_renewal_by", lostIfNoRenewalBy.Format(time.RFC3339Nano))
	case o.Kind == lockproto.ObsRenewFailed || o.Kind == lockproto.ObsReadFailed:
		r.log.Warn("request to the cluster failed", "observed", o.Kind.String(), "error", o.Detail)
	default:
		r.log.Debug("observed", "observed", o.Kind.String(), "detail", o.Detail)
	}
}

// treeProtection is what ends the command's process tree when more than
// the runner is killed (logged at start): -tree-protection under a guard,
// "none" where the platform has no guard.
func (r *runner) treeProtection() string {
	if !guarded {
		return "none"
	}
	return r.cfg.treeProtection
}
