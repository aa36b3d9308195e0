// Package libhold is the door through which the module's own holders hold
// a lock with the public library (package concurrency) from a declaration
// and a session profile they have already read: the library's exported
// API takes names and options, not the module's internal types, and this
// package keeps it so. The ephemeral lock holds its lock through it, with
// the library's session, renewal, loss judge and watch.
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
)

// Options are what a holder sets besides the lock and its profile.
type Options struct {
	// SessionName names the Consul session.
	SessionName string
	// Value is called at every acquisition attempt: what the holder writes
	// into the key (the library's WithHolderValue).
	Value func() []byte
	// Log receives the library's warnings; nil logs nothing.
	Log *slog.Logger
}

// Held is a lock held through a library session of its own.
type Held interface {
	// SessionID is the Consul session holding the lock.
	SessionID() string
	// FencingToken is the Raft index of the acquisition; LockIndex is
	// Consul's LockIndex of the key after it.
	FencingToken() uint64
	LockIndex() uint64
	// Value is what the key holds: the value of the attempt that won, or
	// the one the previous holder wrote when it handed the lock over.
	Value() []byte
	// LastRenewal is the send time of the latest renewal Consul answered
	// (the session's creation before the first).
	LastRenewal() time.Time
	// Orphan stops renewing the session and watching the lock, and keeps
	// both: another process renews and ends them (Session.Orphan).
	Orphan()
	// Close releases the lock and destroys the session.
	Close(ctx context.Context) error
}

// Acquire creates a session from profile (resolved) on the agent's node
// and waits until it holds lock (normalised), or ctx ends; on an error the
// session is closed. Set by package concurrency.
var Acquire func(ctx context.Context, c *consul.Client, lock lockmodel.Lock, profile lockmodel.Profile, o Options) (Held, error)
