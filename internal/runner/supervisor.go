package runner

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// drainPoll is how often the runner checks whether the processes the
// command left in its process group are gone. Nothing signals the end of
// a process that is not the runner's child, so this polls.
const drainPoll = 20 * time.Millisecond

// killWait bounds the wait for SIGKILLed processes to be gone.
const killWait = 5 * time.Second

// state is where the supervisor is with the command.
type state int

const (
	waiting     state = iota // for the lock
	deciding                 // run once: the holder reads and writes the run ledger
	holding                  // the command runs under the lock
	terminating              // the lock is lost; the command is being stopped
	draining                 // the command exited; what it left in its group is being ended
)

// supervisor runs the command under the lock. The hold (libhold.Held)
// renews the session, watches the key, judges loss with the stop rule and
// releases before it destroys; the supervisor waits for it, starts the
// command, stops the command when the lock is lost, and gives the lock up
// only once nothing the command started still runs. Each event is one
// method; run only dispatches.
//
// States and transitions (event: action):
//
//	         acquired: start the command               lost: SIGTERM, arm grace
//	waiting ───────────────────────────▶ holding ────────────────────────────▶ terminating
//	   │                                    │                                     │ grace: SIGKILL the command
//	   │ timeout: 124                       │ exited, group empty:                │ exited: SIGKILL the group,
//	   │ signal: 128+n                      │   the command's code                │   123
//	   │ cancelled, error: 125              │ exited, group left:                 ▼
//	   │ lost at once: 123                  │   SIGTERM the group, arm grace     exit
//	   ▼                                    ▼
//	  exit                              draining ── grace: SIGKILL the group
//	                                       │     ── lost: SIGKILL the group (the exit code becomes 123)
//	                                       │ group empty, or SIGKILLed killWait ago:
//	                                       ▼   the command's code (123 if lost)
//	                                      exit
//
// Run once (runonce.go), with a run ID: while waiting, the run ledger is
// watched too, and acquiring leads to deciding instead of holding:
//
//	        ledger: the run succeeded: -exit-code-if-done
//	waiting ledger: attempts used up: 121
//	   │    lost at once, the run succeeded meanwhile: -exit-code-if-done
//	   │ acquired: take the ledger (watched copy or a read), decide, record the attempt (in a goroutine)
//	   ▼
//	deciding ── decided, run: start the command ──▶ holding
//	   │     ── decided, succeeded already: -exit-code-if-done; attempts used up: 121
//	   │     ── decided, ledger unreadable or invalid: 125
//	   │ lost, signal, cancelled: abandon the decision, wait for it
//	   ▼
//	  exit (123 if lost, 128+n on a signal, 125 if cancelled)
//
// On exit a holder that recorded its attempt records the outcome in the
// transaction that releases the lock (runner.finishRun, sent again while
// Consul cannot commit and the session may still hold the lock, whatever
// the loss judge says once the command has exited; then a check-and-set
// within the lock-delay): succeeded or failed by the command's own exit
// code, lost when the lock was lost before it exited, failed with the
// runner's code when it never started. An outcome of a command that exited
// by itself that could not be recorded makes the exit code 120.
//
// Outside waiting and deciding a signal is forwarded to the command. A
// cancelled context while holding sends SIGTERM and arms grace (SIGKILL
// when it passes)
// without leaving holding: the command's own exit code still counts. On
// every exit the hold is released, or the acquisition abandoned.
type supervisor struct {
	r     *runner
	state state

	acq       chan acquireResult // the acquisition's result; nil once received
	stopWait  context.CancelFunc // abandons the acquisition
	waitStart time.Time
	timeout   *time.Timer // -timeout while waiting; nil without one
	// paused brings a pause seen while waiting (pause.go); stopPause
	// ends that watch.
	paused    chan record.Pause
	stopPause func()

	// Run once: the waiter's watch of the ledger, and the decision.
	ledgerDone chan runDone // nil without a watch, or once received
	stopLedger context.CancelFunc
	ledgerExit chan struct{} // closed when the watch has returned
	decided    chan decision // nil unless deciding
	stopDecide context.CancelFunc
	abortCode  int  // a signal or cancellation ended deciding
	childCode  *int // the command's own exit code, when it exited by itself

	hold       libhold.Held
	acquiredAt time.Time
	ch         *child
	exited     bool // the command has exited and been reaped
	exitCode   int  // the command's, kept while draining
	cancelled  bool // the context ended while holding; the command was sent SIGTERM
	// stops are the stops sent to the command, first first; stop is the
	// one that reached it before it exited (outcome.go), set at its exit.
	stops   []stopSent
	stop    stopCause
	lossWhy string

	grace    *time.Timer  // SIGTERM -> SIGKILL
	drain    *time.Ticker // polls the process group while draining
	killedAt time.Time    // when the group was sent SIGKILL while draining

	// Job control (jobcontrol.go).
	deadline  *time.Timer // max_runtime; nil without one
	timedOut  bool        // the deadline passed; the command was sent SIGTERM
	waitUntil time.Time   // the run's not_before: leave, sleep, wait again
	tail      *outputTail // -keep-output: stderr's; nil without
	outTail   *outputTail // -keep-output: stdout's; nil without
	hook      *hookResult // what -on-outcome is told; nil if nothing ran
}

type acquireResult struct {
	hold libhold.Held
	err  error
}

func newSupervisor(r *runner) *supervisor {
	s := &supervisor{r: r, grace: time.NewTimer(time.Hour), stopLedger: func() {}, stopDecide: func() {}}
	s.grace.Stop()
	return s
}

// run waits for the lock with session first (already created), runs the
// command, and returns the exit code once the hold is released.
func (s *supervisor) run(ctx context.Context, sigCh <-chan os.Signal, first *lockproto.Session) (code int) {
	defer func() { code = s.cleanup(context.WithoutCancel(ctx), code) }()
	s.r.holder = newHolderService(s.r)
	s.startWaiting(ctx, first)
	ctxDone := ctx.Done()
	for {
		var (
			code int
			done bool
		)
		select {
		case <-ctxDone:
			ctxDone = nil
			code, done = s.onCancel(ctx)
		case sig := <-sigCh:
			code, done = s.onSignal(sig)
		case <-s.timeoutC():
			code, done = s.onTimeout()
		case p := <-s.pausedC():
			code, done = s.onPaused(p)
		case res := <-s.acq:
			code, done = s.onAcquired(ctx, res)
		case d := <-s.ledgerC():
			code, done = s.onLedger(d)
		case d := <-s.decided:
			code, done = s.onDecided(d)
		case <-s.lostC():
			s.onLost()
		case <-s.deadlineC():
			s.onDeadline()
		case <-s.grace.C:
			s.onGrace()
		case <-s.drainC():
			code, done = s.onDrainTick()
		case <-s.childDone():
			code, done = s.onChildExit()
		}
		if done {
			return code
		}
	}
}

// The channels of the events each state listens to; nil (never ready)
// elsewhere.

func (s *supervisor) timeoutC() <-chan time.Time {
	if s.timeout == nil || s.state != waiting {
		return nil
	}
	return s.timeout.C
}

func (s *supervisor) ledgerC() <-chan runDone {
	if s.state != waiting {
		return nil
	}
	return s.ledgerDone
}

func (s *supervisor) lostC() <-chan struct{} {
	if s.hold == nil || s.lossWhy != "" || s.state == waiting || s.state == terminating {
		return nil
	}
	return s.hold.Done()
}

func (s *supervisor) drainC() <-chan time.Time {
	if s.drain == nil {
		return nil
	}
	return s.drain.C
}

func (s *supervisor) childDone() <-chan struct{} {
	if s.ch == nil || s.exited {
		return nil
	}
	return s.ch.done
}

// startWaiting starts the acquisition (runner.acquire) in a goroutine
// that cleanup waits for, and the -timeout.
func (s *supervisor) startWaiting(ctx context.Context, first *lockproto.Session) {
	actx, cancel := context.WithCancel(ctx)
	s.stopWait, s.acq, s.waitStart = cancel, make(chan acquireResult, 1), time.Now()
	go func() {
		h, err := s.r.acquire(actx, first)
		s.acq <- acquireResult{hold: h, err: err}
	}()
	if s.r.cfg.timeout > 0 {
		waited := time.Duration(0)
		if !s.r.waitStart.IsZero() {
			waited = time.Since(s.r.waitStart) // without a session, before
		}
		s.timeout = time.NewTimer(max(s.r.cfg.timeout-waited, 0))
	}
	s.startPauseWatch(ctx)
	if s.r.once != nil {
		lctx, stop := context.WithCancel(ctx)
		s.stopLedger, s.ledgerDone, s.ledgerExit = stop, make(chan runDone, 1), make(chan struct{})
		go func() {
			defer close(s.ledgerExit)
			s.r.watchLedger(lctx, s.ledgerDone)
		}()
	}
}

// cleanup ends what is left of the command's tree (under a guard: also
// what left its process group), stops the timers, abandons an acquisition
// still waiting, and releases the hold (release, then destroy the session); a run-once
// attempt's outcome is recorded in the release's own transaction, and the
// hold then only destroys its session. code is the exit code; cleanup
// returns it, or ExitOutcomeNotRecorded when the command exited by itself
// and its outcome could not be recorded.
func (s *supervisor) cleanup(ctx context.Context, code int) int {
	if s.ch != nil {
		s.ch.endTree(s.r.log) // nothing the command started outlives the hold
	}
	s.grace.Stop()
	if s.deadline != nil {
		s.deadline.Stop()
	}
	if s.timeout != nil {
		s.timeout.Stop()
	}
	if s.drain != nil {
		s.drain.Stop()
	}
	s.stopWait()
	if s.stopPause != nil {
		s.stopPause()
	}
	s.stopLedger()
	if s.ledgerExit != nil {
		<-s.ledgerExit
	}
	if s.acq != nil {
		if res := <-s.acq; res.hold != nil {
			s.r.unlock(ctx, res.hold)
		}
	}
	if s.hold != nil {
		s.r.holder.wait() // deregistered before the release
		if s.r.once != nil && s.r.once.attempt > 0 {
			outcome, exitCode := s.outcome(code)
			if s.tail != nil {
				s.r.once.output, s.r.once.stdout = s.tail.tail(time.Second), s.outTail.tail(time.Second)
			}
			released, recorded := s.r.finishRun(ctx, s.hold, outcome, exitCode)
			s.hook = &hookResult{outcome: outcome, exitCode: exitCode, recorded: recorded}
			if released {
				// The outcome's transaction released the lock.
				if err := s.hold.Close(ctx); err != nil {
					s.r.holdLog.Warn("ending the session failed", "session", s.hold.Session().ID, "error", err.Error())
				}
				return code
			}
			if !recorded && s.childCode != nil {
				s.r.log.Error("the command exited but its outcome could not be recorded in the run ledger; "+
					"the next holder will record the attempt crashed and may run the command again",
					"run_id", s.r.once.id, "attempt", s.r.once.attempt, "command_exit_code", *s.childCode, "exit_code", ExitOutcomeNotRecorded)
				code = ExitOutcomeNotRecorded
			}
		} else if s.ch != nil {
			outcome, exitCode := s.outcome(code)
			s.hook = &hookResult{outcome: outcome, exitCode: exitCode}
		}
		s.r.unlock(ctx, s.hold)
	}
	return code
}

// unlock gives h up (Hold.Unlock) and logs what failed: the lock then
// frees when the session ends.
func (r *runner) unlock(ctx context.Context, h libhold.Held) {
	if err := h.Unlock(ctx); err != nil {
		r.holdLog.Warn("giving the lock up failed", "session", h.Session().ID, "error", err.Error())
	}
}

// outcome is the outcome of this holder's attempt (decideOutcome).
func (s *supervisor) outcome(code int) (ledger.RunOutcome, *int) {
	stop := s.stop
	if s.ch == nil && s.lossWhy != "" {
		stop = stopLoss // lost after the attempt was recorded, before the command started
	}
	return decideOutcome(s.ch != nil, s.childCode, stop, code)
}

// onAcquired: waiting ends; the command starts under the lock.
func (s *supervisor) onAcquired(ctx context.Context, res acquireResult) (int, bool) {
	s.acq = nil
	log := s.r.log
	var (
		lost   *lockproto.LostError
		paused pausedError
	)
	var (
		done    errRunDone
		stopped errRunStopped
	)
	switch {
	case errors.As(res.err, &done):
		return s.onLedger(done.d)
	case errors.As(res.err, &stopped):
		return stopped.code, true
	case errors.As(res.err, &paused):
		return s.r.logPaused(paused.p, "; found by the acquisition, the lock given up"), true
	case errors.As(res.err, &lost) && s.r.once != nil:
		return s.lostAtOnce(ctx, lost)
	case errors.As(res.err, &lost):
		log.Error("lock lost right after acquiring it; the command was not started", "reason", lost.Reason)
		return ExitLockLost, true
	case res.err != nil && ctx.Err() != nil:
		return s.onCancel(ctx)
	case errors.As(res.err, new(setupError)):
		log.Error("setup failed", "error", res.err.Error())
		return ExitSetup, true
	case res.err != nil:
		log.Error("cannot acquire the lock", "error", res.err.Error())
		return ExitSetup, true
	}
	s.hold, s.acquiredAt = res.hold, time.Now()
	g, id := s.hold.Grant(), s.hold.Session().ID
	log.Info("lock acquired", "session", id, "fencing_token", g.FencingToken, "lock_index", g.LockIndex,
		"waited", time.Since(s.waitStart).Round(time.Millisecond))
	if s.r.once != nil {
		s.startDeciding(ctx)
		return 0, false
	}
	return s.startCommand()
}

// startCommand starts the command under the lock: holding.
func (s *supervisor) startCommand() (int, bool) {
	log, g, id := s.r.log, s.hold.Grant(), s.hold.Session().ID
	s.r.holder.reap(s.hold) // agentless: former holders' instances leave DNS first
	var out outputs
	if s.r.once != nil && s.r.cfg.keepOutput > 0 {
		var err error
		if s.tail, out.stderr, err = newOutputTail(s.r.cfg.keepOutput, os.Stderr); err != nil {
			log.Error("cannot make a pipe for the command's stderr (-keep-output)", "error", err.Error())
			return ExitSetup, true
		}
		defer out.stderr.Close() // the command has its own copy
		if s.outTail, out.stdout, err = newOutputTail(s.r.cfg.keepOutput, os.Stdout); err != nil {
			log.Error("cannot make a pipe for the command's stdout (-keep-output)", "error", err.Error())
			return ExitSetup, true
		}
		defer out.stdout.Close()
	}
	killBy := s.hold.LastContact().Add(s.r.stop.GuardKillAfter())
	c, err := startChild(s.r.standby, s.r.cfg.command, childEnv(os.Environ(), s.r.lock.Key, id, g, s.r.runEnv()...), out, killBy, log)
	if err != nil {
		log.Error("cannot start the command", "command", s.r.cfg.command[0], "error", err.Error())
		return startErrorExitCode(err), true
	}
	s.ch, s.state = c, holding
	s.r.running.Store(c)
	c.extend(s.hold.LastContact().Add(s.r.stop.GuardKillAfter())) // a renewal since killBy was read
	s.armDeadline()
	log.Info("command started", "pid", c.pid(), "own_process_group", c.ownGroup)
	s.r.holder.start(s.hold)
	return 0, false
}

// onCancel: the context ended. Waiting and deciding end; a held command
// is stopped.
func (s *supervisor) onCancel(ctx context.Context) (int, bool) {
	switch s.state {
	case waiting:
		s.r.log.Error("cancelled while waiting for the lock", "error", context.Cause(ctx))
		return ExitSetup, true
	case deciding:
		s.r.log.Error("cancelled while reading the run ledger; the command will not start", "error", context.Cause(ctx))
		s.abortDeciding(ExitSetup)
	case holding:
		s.cancelled = true
		s.r.log.Warn("cancelled; stopping the command", "pid", s.ch.pid())
		_ = s.stopCommand(stopCancel, sigTerm)
		s.grace.Reset(s.r.cfg.grace)
	}
	return 0, false
}

// onSignal: a signal aborts waiting (unless it is one that does not) and
// is forwarded to the command otherwise.
func (s *supervisor) onSignal(sig os.Signal) (int, bool) {
	log := s.r.log
	if s.state == waiting {
		if abortsWaiting(sig) {
			log.Warn("interrupted while waiting for the lock", "signal", sig.String())
			return signalExitCode(sig), true
		}
		return 0, false
	}
	if s.state == deciding {
		if abortsWaiting(sig) {
			log.Warn("interrupted while reading the run ledger; the command will not start", "signal", sig.String())
			s.abortDeciding(signalExitCode(sig))
		}
		return 0, false
	}
	log.Info("forwarding signal to the command", "signal", sig.String(), "pid", s.ch.pid())
	if err := s.ch.signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("could not forward signal", "signal", sig.String(), "error", err.Error())
	}
	return 0, false
}

// onTimeout: -timeout passed while waiting.
func (s *supervisor) onTimeout() (int, bool) {
	s.r.log.Error("timed out waiting for the lock", "timeout", s.r.cfg.timeout)
	return ExitTimeout, true
}

// onLost: the hold is lost. The running command is stopped; processes it
// left behind are killed at once (they had the command's grace).
func (s *supervisor) onLost() {
	s.lossWhy = s.hold.Reason()
	s.r.holder.withdraw()
	log := s.r.log
	if s.state == deciding {
		log.Error("lock lost while reading the run ledger; the command will not start", "reason", s.lossWhy)
		s.stopDecide()
		return
	}
	if s.state == draining {
		log.Error("lock lost while ending the processes the command left; killing them", "reason", s.lossWhy, "pgid", s.ch.pid())
		_ = s.ch.signal(sigKill)
		s.killedAt = time.Now()
		return
	}
	s.state = terminating
	log.Error("lock lost; stopping the command", "reason", s.lossWhy, "pid", s.ch.pid(), "signal", "SIGTERM", "grace", s.r.cfg.grace)
	if err := s.stopCommand(stopLoss, sigTerm); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("could not signal the command", "error", err.Error())
	}
	s.grace.Reset(s.r.cfg.grace)
}

// stopCommand sends the command sig to stop it for cause, and notes the
// stop for decideOutcome (outcome.go): it counts only if it reached the
// command before the command exited.
func (s *supervisor) stopCommand(cause stopCause, sig os.Signal) error {
	err := s.ch.signal(sig)
	if err == nil {
		s.stops = append(s.stops, stopSent{cause: cause, seq: s.ch.sent})
	}
	return err
}

// onGrace: what was sent SIGTERM did not exit within the grace period.
func (s *supervisor) onGrace() {
	switch {
	case s.state == draining:
		s.r.log.Warn("processes left by the command did not exit within the grace period; killing them", "pgid", s.ch.pid(), "grace", s.r.cfg.grace)
		_ = s.ch.signal(sigKill)
		s.killedAt = time.Now()
	case s.state == terminating || s.cancelled || s.timedOut:
		s.r.log.Error("command did not exit within the grace period; killing it", "pid", s.ch.pid(), "grace", s.r.cfg.grace)
		_ = s.ch.signal(sigKill)
	}
}

// onDrainTick: draining ends when the group is empty, or when it survived
// SIGKILL for killWait (the lock is released anyway).
func (s *supervisor) onDrainTick() (int, bool) {
	if !s.ch.groupLeft() {
		s.r.log.Info("the processes the command left have ended", "pgid", s.ch.pid())
		return s.drainedCode(), true
	}
	if !s.killedAt.IsZero() && time.Since(s.killedAt) > killWait {
		s.r.log.Warn("processes of the command's process group survived SIGKILL; releasing the lock anyway", "pgid", s.ch.pid(), "waited", killWait)
		return s.drainedCode(), true
	}
	return 0, false
}

func (s *supervisor) drainedCode() int {
	if s.lossWhy != "" {
		return ExitLockLost
	}
	return s.exitCode
}

// onChildExit: the command exited. After a loss that is the end (what it
// left is killed); otherwise its exit code stands, and what it left in its
// group is ended before the lock is released.
func (s *supervisor) onChildExit() (int, bool) {
	s.exited = true
	log, ch := s.r.log, s.ch
	held := time.Since(s.acquiredAt).Round(time.Millisecond)
	s.stop = stopBeforeExit(ch.reports, s.stops, ch.guard != nil)
	if s.stop == stopExpiry && s.lossWhy == "" {
		s.lossWhy = "the runner confirmed no renewal until its stop rule's deadline (it was stopped or starved of CPU); " +
			"its guard killed the command"
		s.r.holder.withdraw()
	}
	if s.stop == stopLoss || s.stop == stopExpiry {
		s.state = terminating
		s.killLeftovers()
		log.Error("lock lost: the command was stopped", "reason", s.lossWhy, "exit_code", ExitLockLost, "held", held)
		return ExitLockLost, true
	}
	s.exitCode = childExitCode(ch.state, s.r.cfg.childExitCode)
	own := childExitCode(ch.state, true)
	s.childCode = &own
	if s.state == terminating {
		// The loss was judged after the command had exited by itself (a
		// runner stopped or starved while it finished): its exit code
		// stands; what it left is killed at once.
		s.killLeftovers()
		log.Warn("the command exited by itself before the runner judged the lock lost; its exit code stands",
			"status", ch.state.String(), "exit_code", s.exitCode, "reason", s.lossWhy, "held", held)
		return s.exitCode, true
	}
	s.timedOut = s.stop == stopDeadline
	if s.timedOut {
		s.exitCode = ExitMaxRuntime
		log.Error("the command was stopped at its max_runtime", "status", ch.state.String(), "exit_code", s.exitCode, "held", held)
	}
	log.Info("command exited", "status", ch.state.String(), "exit_code", s.exitCode, "held", held)
	if !ch.groupLeft() {
		return s.exitCode, true
	}
	s.state = draining
	log.Warn("the command left processes in its process group; ending them before releasing the lock",
		"pgid", ch.pid(), "signal", "SIGTERM", "grace", s.r.cfg.grace)
	_ = ch.signal(sigTerm)
	s.grace.Reset(s.r.cfg.grace)
	s.drain = time.NewTicker(drainPoll)
	return 0, false
}

// killLeftovers SIGKILLs the command's process group and waits, with a
// bound, until it is empty.
func (s *supervisor) killLeftovers() {
	ch := s.ch
	if !ch.ownGroup {
		return
	}
	_ = ch.signal(sigKill)
	for end := time.Now().Add(killWait); ch.groupLeft() && time.Now().Before(end); {
		time.Sleep(drainPoll)
	}
	if ch.groupLeft() {
		s.r.log.Warn("processes of the command's process group survived SIGKILL", "pgid", ch.pid(), "waited", killWait)
	}
}

// startDeciding: the holder of a run-once lock reads the ledger and
// decides in a goroutine (its requests may wait on Consul); events that
// end deciding abandon it (abortDeciding) and wait for its answer.
func (s *supervisor) startDeciding(ctx context.Context) {
	s.stopLedger()
	s.state = deciding
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopDecide, s.decided = cancel, make(chan decision, 1)
	h := s.hold
	go func() { s.decided <- s.r.decide(dctx, h) }()
}

// abortDeciding: a signal or cancellation ends deciding with code once the
// decision has answered.
func (s *supervisor) abortDeciding(code int) {
	if s.abortCode == 0 {
		s.abortCode = code
	}
	s.stopDecide()
}

// onLedger: while waiting, the ledger shows the run done; the waiter
// leaves without acquiring.
func (s *supervisor) onLedger(d runDone) (int, bool) {
	s.ledgerDone = nil
	if d.kind == ledger.BeginWait {
		return s.retryWait(d.run.NotBefore, "while waiting for the lock")
	}
	return s.r.reportDone(d.kind, d.run.Attempts, "while waiting for the lock"), true
}

// onDecided: the holder's decision. Run starts the command as the
// recorded attempt; anything else exits without starting it.
func (s *supervisor) onDecided(d decision) (int, bool) {
	s.decided = nil
	s.stopDecide()
	run, log := s.r.once, s.r.log
	if d.err == nil && d.Kind == ledger.BeginRun {
		run.attempt, run.ledger, run.index = d.Attempt, d.Ledger, d.Index
	}
	switch {
	case s.lossWhy != "":
		return ExitLockLost, true
	case s.abortCode != 0:
		return s.abortCode, true
	case errors.Is(d.err, store.ErrFenceLost):
		log.Error("lock lost while recording the run's start; the command was not started", "error", d.err.Error())
		return ExitLockLost, true
	case d.err != nil:
		log.Error("cannot use the run ledger; the command was not started", "ledger", run.ledgerKey, "error", d.err.Error())
		return ExitSetup, true
	case d.Pruned:
		log.Info("the run was pruned from the run ledger; the ledger keeps its outcome only", "run_id", run.id, "outcome", d.Kind.String())
		return s.r.reportDone(d.Kind, nil, "after acquiring the lock"), true
	case d.Kind == ledger.BeginAlreadySucceeded:
		return s.r.reportDone(d.Kind, []ledger.Attempt{d.Succeeded}, "after acquiring the lock"), true
	case d.Kind == ledger.BeginExhausted || d.Kind == ledger.BeginSuperseded:
		return s.r.reportDone(d.Kind, d.Attempts, "after acquiring the lock"), true
	case d.Kind == ledger.BeginWait:
		return s.retryWait(d.NotBefore, "after acquiring the lock")
	}
	log.Info("run attempt recorded; starting the command", "run_id", run.id, "attempt", run.attempt, "max_attempts", run.maxAttempts)
	return s.startCommand()
}

// lostAtOnce: a run-once waiter acquired a lock it had to count lost at
// once (no renewal for too long while it waited, as during an election).
// It would not have run the command anyway when the run has succeeded
// meanwhile: that is then its answer (exit 0), not a lost lock.
func (s *supervisor) lostAtOnce(ctx context.Context, lost *lockproto.LostError) (int, bool) {
	select {
	case d := <-s.ledgerDone:
		s.ledgerDone = nil
		if d.kind == ledger.BeginWait {
			return s.retryWait(d.run.NotBefore, "while waiting for the lock")
		}
		return s.r.reportDone(d.kind, d.run.Attempts, "while waiting for the lock"), true
	default:
	}
	if l, _, err := s.r.readLedger(ctx); err == nil {
		if d, done := s.r.runIsDone(l); done {
			return s.r.reportDone(d.kind, d.run.Attempts, "after acquiring the lock"), true
		}
	}
	s.r.log.Error("lock lost right after acquiring it; the command was not started", "reason", lost.Reason)
	return ExitLockLost, true
}
