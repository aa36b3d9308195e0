package runner

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
)

// Exit codes of `consullock run`. The child's own exit code is passed
// through, so the runner's codes sit where shells and timeout(1) put a
// wrapper's failures, a range a child rarely uses for itself.
const (
	// ExitOK: the child ran and exited 0 (or -child-exit-code=false).
	ExitOK = 0
	// ExitUsage: bad flags or arguments; nothing was contacted.
	ExitUsage = 2
	// ExitOutcomeNotRecorded: run once: the command exited (by itself),
	// but its outcome could not be recorded in the run ledger: Consul was
	// unreachable for as long as the session could hold the lock and the
	// lock-delay after (lockmodel.OutcomeWait), or the attempt was recorded
	// crashed first. The next holder records the attempt crashed and runs
	// the command again while attempts remain; a scheduler must not take
	// this for a success.
	ExitOutcomeNotRecorded = 120
	// ExitLockLost: the lock was lost while the child ran (key taken or
	// released, session invalidated, or no successful renewal for longer than
	// the stop rule allows, lockmodel.StopRule);
	// the child was sent SIGTERM and, after -grace, SIGKILL.
	ExitLockLost = 123
	// ExitTimeout: -timeout passed before the lock was acquired; the child
	// never ran. The same code as timeout(1).
	ExitTimeout = 124
	// ExitSetup: the runner could not set up: Consul unreachable, token
	// invalid or lacking a permission, declaration missing or invalid, key
	// incompatible with the lock kind, or the session refused.
	ExitSetup = 125
	// ExitCannotExecute: the command was found but could not be started
	// (as a shell reports it).
	ExitCannotExecute = 126
	// ExitNotFound: the command was not found (as a shell reports it).
	ExitNotFound = 127
	// exitSignalBase + N: the runner was interrupted by signal N before the
	// child ran, or the child was ended by signal N (as shells report it).
	exitSignalBase = 128
)

// exitState is how the child ended: an *os.ProcessState, or the wait
// status the guard reported (reportedExit).
type exitState interface {
	ExitCode() int
	Sys() any
	String() string
}

// childExitCode maps how the child ended to the runner's exit code. With
// passThrough (the default, -child-exit-code=true) the child's code is the
// runner's, and a child ended by signal N gives 128+N. Without it the runner
// exits 0 whenever the child ran, as `consul lock` does without
// -child-exit-code.
func childExitCode(state exitState, passThrough bool) int {
	if !passThrough || state == nil {
		return ExitOK
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	if code := state.ExitCode(); code >= 0 {
		return code
	}
	return ExitCannotExecute
}

// startErrorExitCode maps a failure to start the child to 127 (not found)
// or 126 (found but not executable), as shells do.
func startErrorExitCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return ExitNotFound
	}
	return ExitCannotExecute
}

// signalExitCode is the exit code for being interrupted by sig before the
// child ran: 128+N, as a shell reports a process ended by signal N.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitSignalBase + int(syscall.SIGINT)
}
