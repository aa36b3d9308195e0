package concurrency

import (
	"errors"

	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Errors to test with errors.Is. Run once's mirror the exit codes of
// `consullock run -run-id`.
var (
	// ErrLocked: TryLock found the mutex held by another session. It is
	// the protocol's own error, so one test covers both ways to find it.
	ErrLocked = lockproto.ErrLocked
	// ErrLockLost: the lock was lost while held (its key released,
	// deleted or taken).
	ErrLockLost = errors.New("the lock was lost")
	// ErrSessionLost: Consul ended the session, or its renewals failed for
	// longer than the stop rule allows.
	ErrSessionLost = errors.New("the session was lost")
	// ErrSessionClosed: the session was closed.
	ErrSessionClosed = errors.New("the session was closed")
	// ErrSessionOrphaned: the session was orphaned (Session.Orphan): it
	// and its locks live on, no longer renewed or watched by this process.
	ErrSessionOrphaned = errors.New("the session was orphaned")

	// ErrAlreadySucceeded: the run ID already succeeded, here or on
	// another node; the function was not called (runner exit 0, or 122).
	ErrAlreadySucceeded = errors.New("the run already succeeded")
	// ErrExhausted: the run used up run_once.max_attempts without a
	// success; the function was not called (runner exit 121).
	ErrExhausted = errors.New("the run used up its attempts")
	// ErrSkipped: the run was skipped or replaced under run_once.overlap;
	// the function was not called.
	ErrSkipped = errors.New("the run was skipped or replaced")
	// ErrPaused: the lock is paused (consullock pause); the function was
	// not called.
	ErrPaused = errors.New("the lock is paused")
	// ErrTimedOut: the function ran past run_once.max_runtime; its context
	// was cancelled and the attempt recorded timed_out.
	ErrTimedOut = errors.New("the attempt ran past max_runtime")
	// ErrOutcomeNotRecorded: the function returned but its outcome could
	// not be written to the run ledger (runner exit 120): the next holder
	// records the attempt crashed and may run it again.
	ErrOutcomeNotRecorded = errors.New("the attempt's outcome could not be recorded")
)
