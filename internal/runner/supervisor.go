package runner

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
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
	holding                  // the command runs under the lock
	terminating              // the lock is lost; the command is being stopped
	draining                 // the command exited; what it left in its group is being ended
)

// supervisor runs the command under the lock. The hold (lockproto.Hold)
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
// Outside waiting a signal is forwarded to the command. A cancelled context
// while holding sends SIGTERM and arms grace (SIGKILL when it passes)
// without leaving holding: the command's own exit code still counts. On
// every exit the hold is released, or the acquisition abandoned.
type supervisor struct {
	r     *runner
	state state

	acq       chan acquireResult // the acquisition's result; nil once received
	stopWait  context.CancelFunc // abandons the acquisition
	waitStart time.Time
	timeout   *time.Timer // -timeout while waiting; nil without one

	hold       *lockproto.Hold
	acquiredAt time.Time
	ch         *child
	exited     bool // the command has exited and been reaped
	exitCode   int  // the command's, kept while draining
	cancelled  bool // the context ended while holding; the command was sent SIGTERM
	lossWhy    string

	grace    *time.Timer  // SIGTERM -> SIGKILL
	drain    *time.Ticker // polls the process group while draining
	killedAt time.Time    // when the group was sent SIGKILL while draining
}

type acquireResult struct {
	hold *lockproto.Hold
	err  error
}

func newSupervisor(r *runner) *supervisor {
	s := &supervisor{r: r, grace: time.NewTimer(time.Hour)}
	s.grace.Stop()
	return s
}

// run waits for the lock with session first (already created), runs the
// command, and returns the exit code once the hold is released.
func (s *supervisor) run(ctx context.Context, sigCh <-chan os.Signal, first *lockproto.Session) int {
	defer s.cleanup(context.WithoutCancel(ctx))
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
		case res := <-s.acq:
			code, done = s.onAcquired(ctx, res)
		case <-s.lostC():
			s.onLost()
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

func (s *supervisor) lostC() <-chan struct{} {
	if s.hold == nil || s.lossWhy != "" || (s.state != holding && s.state != draining) {
		return nil
	}
	return s.hold.Lost()
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
		s.timeout = time.NewTimer(s.r.cfg.timeout)
	}
}

// cleanup stops the timers, abandons an acquisition still waiting, and
// releases the hold (release, then destroy the session).
func (s *supervisor) cleanup(ctx context.Context) {
	s.grace.Stop()
	if s.timeout != nil {
		s.timeout.Stop()
	}
	if s.drain != nil {
		s.drain.Stop()
	}
	s.stopWait()
	if s.acq != nil {
		if res := <-s.acq; res.hold != nil {
			res.hold.Release(ctx)
		}
	}
	if s.hold != nil {
		s.hold.Release(ctx)
	}
}

// onAcquired: waiting ends; the command starts under the lock.
func (s *supervisor) onAcquired(ctx context.Context, res acquireResult) (int, bool) {
	s.acq = nil
	log := s.r.log
	var lost *lockproto.LostError
	switch {
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
	g, id := s.hold.Grant, s.hold.Session.ID
	log.Info("lock acquired", "session", id, "fencing_token", g.FencingToken, "lock_index", g.LockIndex,
		"waited", time.Since(s.waitStart).Round(time.Millisecond))
	c, err := startChild(s.r.cfg.command, childEnv(os.Environ(), s.r.lock.Key, id, g))
	if err != nil {
		log.Error("cannot start the command", "command", s.r.cfg.command[0], "error", err.Error())
		return startErrorExitCode(err), true
	}
	s.ch, s.state = c, holding
	log.Info("command started", "pid", c.pid(), "own_process_group", c.ownGroup)
	return 0, false
}

// onCancel: the context ended. Waiting ends; a held command is stopped.
func (s *supervisor) onCancel(ctx context.Context) (int, bool) {
	switch s.state {
	case waiting:
		s.r.log.Error("cancelled while waiting for the lock", "error", context.Cause(ctx))
		return ExitSetup, true
	case holding:
		s.cancelled = true
		s.r.log.Warn("cancelled; stopping the command", "pid", s.ch.pid())
		_ = s.ch.signal(sigTerm)
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
	log := s.r.log
	if s.state == draining {
		log.Error("lock lost while ending the processes the command left; killing them", "reason", s.lossWhy, "pgid", s.ch.pid())
		_ = s.ch.signal(sigKill)
		s.killedAt = time.Now()
		return
	}
	s.state = terminating
	log.Error("lock lost; stopping the command", "reason", s.lossWhy, "pid", s.ch.pid(), "signal", "SIGTERM", "grace", s.r.cfg.grace)
	if err := s.ch.signal(sigTerm); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("could not signal the command", "error", err.Error())
	}
	s.grace.Reset(s.r.cfg.grace)
}

// onGrace: what was sent SIGTERM did not exit within the grace period.
func (s *supervisor) onGrace() {
	switch {
	case s.state == draining:
		s.r.log.Warn("processes left by the command did not exit within the grace period; killing them", "pgid", s.ch.pid(), "grace", s.r.cfg.grace)
		_ = s.ch.signal(sigKill)
		s.killedAt = time.Now()
	case s.state == terminating || s.cancelled:
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
	if s.state == terminating {
		s.killLeftovers()
		log.Error("lock lost: the command was stopped", "reason", s.lossWhy, "exit_code", ExitLockLost, "held", held)
		return ExitLockLost, true
	}
	s.exitCode = childExitCode(ch.state, s.r.cfg.childExitCode)
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
