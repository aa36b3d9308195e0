package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Job control in the runner (lockmodel jobcontrol.go has the rules):
//
//   - max_runtime: the command is sent SIGTERM max_runtime after it started,
//     SIGKILL after -grace; the attempt is "timed_out" and the runner exits
//     ExitMaxRuntime.
//   - retries that wait: a holder told BeginWait releases the lock and ends
//     its session, and so does a waiter whose ledger watch shows the run's
//     not_before ahead; the runner then sleeps until not_before, with no
//     session and no Consul request, and waits for the lock again with a
//     new session (superviseRuns).
//   - -keep-output: the command's stdout and stderr go through pipes the
//     runner copies to its own, keeping the last bytes of each.
//   - -on-outcome: a shell command run after the outcome is recorded,
//     without the runner's Consul token unless -on-outcome-token.

// ExitMaxRuntime: the command ran past max_runtime and was stopped.
const ExitMaxRuntime = 118

// Environment of the -on-outcome command, besides EnvRunID, EnvAttempt,
// EnvFencingToken and EnvLockKey.
const (
	EnvOutcome  = "CONSUL_LOCK_OUTCOME"   // succeeded, failed, lost, timed_out
	EnvExitCode = "CONSUL_LOCK_EXIT_CODE" // the command's; "" when none
	EnvNode     = "CONSUL_LOCK_NODE"      // the holder's node
	// EnvOutcomeRecorded is "true" when the outcome is in the run ledger.
	EnvOutcomeRecorded = "CONSUL_LOCK_OUTCOME_RECORDED"
)

// What -on-outcome is told (EnvOutcome) when the command was not started
// because something needs attention: the slot is not run (exit 119), the
// run used up its attempts (121), the lock is paused. Its EnvExitCode is
// then empty and EnvOutcomeRecorded "false": this runner wrote nothing.
const (
	HookMissed    = "missed"
	HookExhausted = string(ledger.RunExhausted)
	HookPaused    = "paused"
)

// hookTimeout bounds the -on-outcome command: it is then killed.
const hookTimeout = time.Minute

// maxRuntime is the command's deadline: the lock's run_once.max_runtime
// and -max-runtime, the shorter when both are set; 0 is none.
func (r *runner) maxRuntime() time.Duration {
	d := r.cfg.maxRuntime
	if ro := r.lock.RunOnce; ro != nil && ro.MaxRuntime > 0 && (d == 0 || ro.MaxRuntime < d) {
		d = ro.MaxRuntime
	}
	return d
}

// checkKeepOutput refuses a -keep-output the lock's ledger cannot hold
// (keep x max_attempts attempts of it), before anything is written.
func (r *runner) checkKeepOutput() error {
	if r.cfg.keepOutput == 0 {
		return nil
	}
	if r.once == nil {
		return usageErrorf("-keep-output needs a run-once lock (run_once, or -run-id): the output is kept in the run ledger")
	}
	if err := ledger.ValidateKeepOutput(r.cfg.keepOutput, r.once.keep, r.once.maxAttempts); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

// superviseRuns runs supervisors until one ends without a retry wait: a
// supervisor that left because the run's next attempt may not start yet
// (not_before) has released the lock and ended its session; the runner
// sleeps until then and waits for the lock again with a new session.
func (r *runner) superviseRuns(ctx context.Context, sigCh <-chan os.Signal, first *lockproto.Session) int {
	for {
		s := newSupervisor(r)
		code := s.run(ctx, sigCh, first)
		s.runHook(ctx)
		if s.waitUntil.IsZero() {
			return code
		}
		if code, done := r.sleepUntil(ctx, sigCh, s.waitUntil); done {
			return code
		}
		var err error
		if first, err = lockproto.CreateSession(ctx, r.client, r.sessionName(), r.cfg.node, r.profile); err != nil {
			r.log.Error("cannot create a session for the next attempt", "error", err.Error())
			return ExitSetup
		}
	}
}

// sleepUntil waits, holding nothing, until t on the runner's clock; a
// signal, the context or a -timeout that passes first ends the runner.
func (r *runner) sleepUntil(ctx context.Context, sigCh <-chan os.Signal, t time.Time) (int, bool) {
	wait := t.Sub(r.cfg.clock.Now())
	if r.cfg.timeout > 0 && time.Since(r.started)+wait > r.cfg.timeout {
		r.log.Error("the run's next attempt may start only after -timeout", "not_before", t.Format(time.RFC3339Nano),
			"timeout", r.cfg.timeout, "exit_code", ExitTimeout)
		return ExitTimeout, true
	}
	r.log.Info("waiting for the run's next attempt without holding the lock (run_once.retry_after)",
		"run_id", r.once.id, "not_before", t.Format(time.RFC3339Nano), "wait", wait.Round(time.Millisecond))
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return 0, false
		case <-ctx.Done():
			r.log.Error("cancelled while waiting for the run's next attempt", "error", context.Cause(ctx))
			return ExitSetup, true
		case sig := <-sigCh:
			if abortsWaiting(sig) {
				r.log.Warn("interrupted while waiting for the run's next attempt", "signal", sig.String())
				return signalExitCode(sig), true
			}
		}
	}
}

// retryWait: the ledger says the run's next attempt may not start before
// t; the supervisor leaves (releasing what it holds) and superviseRuns
// sleeps.
func (s *supervisor) retryWait(t time.Time, seen string) (int, bool) {
	s.waitUntil = t
	s.r.log.Info("the run's next attempt may not start yet; leaving the lock", "run_id", s.r.once.id, "seen", seen,
		"not_before", t.Format(time.RFC3339Nano))
	return 0, true
}

// armDeadline starts the max_runtime timer with the command.
func (s *supervisor) armDeadline() {
	if d := s.r.maxRuntime(); d > 0 {
		s.deadline = time.NewTimer(d)
	}
}

func (s *supervisor) deadlineC() <-chan time.Time {
	if s.deadline == nil || s.state != holding || s.timedOut {
		return nil
	}
	return s.deadline.C
}

// onDeadline: the command ran for max_runtime: SIGTERM, SIGKILL after
// -grace (onGrace); its exit ends the hold as timed out.
func (s *supervisor) onDeadline() {
	s.timedOut = true
	s.r.log.Error("the command ran past its max_runtime; stopping it", "max_runtime", lockmodel.FormatDuration(s.r.maxRuntime()),
		"pid", s.ch.pid(), "signal", "SIGTERM", "grace", s.r.cfg.grace)
	if err := s.stopCommand(stopDeadline, sigTerm); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.r.log.Warn("could not signal the command", "error", err.Error())
	}
	s.grace.Reset(s.r.cfg.grace)
}

// outputTail copies one of the command's outputs to the runner's, keeping its
// last size bytes (plus a rune's worth, for TailOutput to cut cleanly).
type outputTail struct {
	size int
	mu   sync.Mutex
	buf  []byte
	done chan struct{} // closed at EOF: every writer is gone
}

// newOutputTail returns the tail and the pipe end to give the command as
// its stderr (close it once the command started).
func newOutputTail(size int, to io.Writer) (*outputTail, *os.File, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	t := &outputTail{size: size, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer rd.Close()
		b := make([]byte, 32*1024)
		for {
			n, err := rd.Read(b)
			if n > 0 {
				_, _ = to.Write(b[:n])
				t.keep(b[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return t, wr, nil
}

func (t *outputTail) keep(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if limit := t.size + 4; len(t.buf) > 2*limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-limit:]...)
	}
}

// tail is what the attempt keeps: once every writer has closed the pipe
// (the command and what it left have ended), or after at most wait.
func (t *outputTail) tail(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return ledger.TailOutput(t.buf, t.size)
}

// hookResult is what -on-outcome is told.
type hookResult struct {
	outcome  ledger.RunOutcome
	exitCode *int
	recorded bool
}

// runHook runs -on-outcome once the supervisor has ended (the outcome is
// recorded and the lock released), when a command was started.
func (s *supervisor) runHook(ctx context.Context) {
	if s.ch == nil || s.hook == nil {
		return
	}
	env := []string{EnvNode + "=" + s.hold.Session().Node,
		EnvFencingToken + "=" + strconv.FormatUint(s.hold.Grant().FencingToken, 10),
		EnvOutcomeRecorded + "=" + strconv.FormatBool(s.hook.recorded)}
	if s.hook.exitCode != nil {
		env = append(env, EnvExitCode+"="+strconv.Itoa(*s.hook.exitCode))
	}
	if s.r.once != nil {
		env = append(env, EnvAttempt+"="+strconv.Itoa(s.r.once.attempt))
	}
	s.r.runHook(ctx, string(s.hook.outcome), env)
}

// runNotStartedHook runs -on-outcome when the runner ends without having
// started the command for a reason that needs attention (notStarted: a
// missed slot, an exhausted run, a paused lock).
func (r *runner) runNotStartedHook(ctx context.Context) {
	if r.notStarted == "" {
		return
	}
	env := []string{EnvOutcomeRecorded + "=false"}
	if r.once == nil && r.cfg.runID != "" {
		env = append(env, EnvRunID+"="+r.cfg.runID) // paused before the run was resolved
	}
	if r.cfg.node != "" {
		env = append(env, EnvNode+"="+r.cfg.node)
	}
	r.runHook(ctx, r.notStarted, env)
}

// runHook runs -on-outcome (when given) with outcome and env after the
// runner's own: the run's ID and the lock's key. Its failure is logged
// and changes nothing.
func (r *runner) runHook(ctx context.Context, outcome string, env []string) {
	cmdline := r.cfg.onOutcome
	if cmdline == "" {
		return
	}
	log := r.log.With("on_outcome", cmdline)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, "/bin/sh", "-c", cmdline)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(hookEnviron(os.Environ(), r.cfg.onOutcomeToken),
		EnvOutcome+"="+outcome, EnvExitCode+"=", EnvLockKey+"="+r.lock.Key)
	if r.once != nil {
		cmd.Env = append(cmd.Env, EnvRunID+"="+r.once.id)
	}
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Run(); err != nil {
		log.Warn("the -on-outcome command failed; the run's outcome stands", "error", err.Error(), "outcome", outcome)
		return
	}
	log.Info("the -on-outcome command ran", "outcome", outcome)
}

// hookEnviron is environ for the -on-outcome command: without the Consul
// token (CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE) unless withToken. A
// notification seldom needs the runner's rights on the lock, its sessions
// and the ledger; a hook that does asks for them (-on-outcome-token).
func hookEnviron(environ []string, withToken bool) []string {
	if withToken {
		return environ
	}
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == consul.EnvToken || name == consul.EnvTokenFile
	})
}

// runWaits reports whether ledger l shows this run waiting for its next
// attempt (not_before ahead on the runner's clock, no attempt running,
// attempts left): the waiter then leaves rather than take the lock. The
// run's NotBefore is the one Begin would record (after a release too).
func (r *runner) runWaits(l ledger.Ledger) (runDone, bool) {
	i := l.Find(r.once.id)
	if i < 0 {
		return runDone{}, false
	}
	run := l.Runs[i]
	run.NotBefore = run.NotBeforeUnder(r.once.policy)
	n := len(run.Attempts)
	if run.NotBefore.IsZero() || !run.NotBefore.After(r.cfg.clock.Now()) || n >= r.once.maxAttempts ||
		(n > 0 && run.Attempts[n-1].Outcome == ledger.RunRunning) {
		return runDone{}, false
	}
	return runDone{kind: ledger.BeginWait, run: run}, true
}

// result is the attempt's result with the kept output and, for a lost
// attempt, why the lock was lost.
func (o *runOnce) result(outcome ledger.RunOutcome, exitCode *int, reason string) ledger.AttemptResult {
	return ledger.AttemptResult{Outcome: outcome, ExitCode: exitCode, Output: o.output, Stdout: o.stdout, Reason: reason}
}
