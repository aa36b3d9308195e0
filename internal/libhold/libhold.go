// Package libhold is the door through which the module's own holders hold
// a lock with the public library (package concurrency) from a declaration
// and a session profile they have already read: the library's exported
// API takes names and options, not the module's internal types, and this
// package keeps it so. `consullock run` and the ephemeral lock hold their
// locks through it, with the library's session, renewal, loss judge,
// protocol and watch.
//
// A hold through the door has a session of its own, and the loss judge
// decides for the hold (as the runner needs it): a session that Consul
// ends while the hold waits is an error wrapping lockproto.ErrSessionInvalid
// (start over with a new session); a lock acquired after the session went
// without contact for longer than the stop rule allows is a
// *lockproto.LostError; once held, Done is closed when the lock is lost.
//
// Package concurrency sets Acquire when it is initialised; a holder
// imports concurrency (for its side effect, or for anything else) to have
// it set, as database/sql drivers register themselves.
package libhold

import (
	"context"
	"log/slog"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Options are what a holder sets besides the lock and its profile.
type Options struct {
	// Session is a session the caller created from the profile (so that
	// its errors came with the caller's other setup errors); the hold owns
	// it from then on. Nil: Acquire creates one on the agent's node, named
	// SessionName.
	Session     *lockproto.Session
	SessionName string
	// Value is called at every acquisition attempt: what the holder writes
	// into the key (the library's WithHolderValue).
	Value func() []byte
	// Grace is how long the holder needs, once Done is closed, to stop
	// what it does under the lock: the stop rule decides loss that much
	// earlier.
	Grace time.Duration
	// RuleWarned: the caller has already warned, with its own numbers,
	// that the stop rule is not feasible; the hold does not again.
	RuleWarned bool
	// Protocol are the acquisition's settings (try, blocking key, clock,
	// watch client).
	Protocol lockproto.Settings
	// Observer, when set, is called with every observation of the renewer
	// and the watcher, whether the lock was held then, and the time the
	// lock counts as lost if no renewal succeeds before; it replaces the
	// hold's logging of failed renewals and must not block.
	Observer func(o lockproto.Observation, held bool, lostIfNoRenewalBy time.Time)
	// Log receives the hold's warnings and its release; nil logs nothing.
	Log *slog.Logger
}

// Held is a lock held through a library session of its own.
type Held interface {
	// Session is the Consul session holding the lock.
	Session() *lockproto.Session
	// Grant is the acquisition: its fencing token (the Raft index of the
	// acquisition) and Consul's LockIndex of the key after it.
	Grant() lockproto.Grant
	// Value is what the key holds: the value of the attempt that won, or
	// the one the previous holder wrote when it handed the lock over.
	Value() []byte
	// LastContact is the send time of the latest renewal Consul answered
	// (the session's creation before the first), with its monotonic
	// reading.
	LastContact() time.Time
	// Done is closed when the lock is lost, and only then; Reason says
	// why.
	Done() <-chan struct{}
	Reason() string
	// IsOwner is the condition of a write fenced by the hold: the session
	// still holds the lock key, or for a semaphore its contender key.
	IsOwner() store.Fence
	// Orphan stops renewing the session and watching the lock, and keeps
	// both: another process renews and ends them (Session.Orphan).
	Orphan()
	// Unlock releases the lock if the session still holds it (a release
	// sets no lock-delay) and destroys the session; Close destroys it
	// without a release, for a holder whose own transaction released the
	// lock. Each step is bounded by lockproto.CleanupTimeout; the error
	// joins the steps' failures.
	Unlock(ctx context.Context) error
	Close(ctx context.Context) error
}

// Acquire starts renewing a session (Options.Session, or one it creates
// from profile, resolved) and waits until it holds lock (normalised), or
// ctx ends (its error is returned). On an error the lock is released if
// the session got it (unless the session is gone) and the session
// destroyed; the caller may start over. Set by package concurrency.
var Acquire func(ctx context.Context, c *consul.Client, lock lockmodel.Lock, profile lockmodel.Profile, o Options) (Held, error)
