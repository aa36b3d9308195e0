package concurrency

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Mutex is a lock one session holds at a time: Consul's api.Lock protocol
// (key flags 0x2ddccbc058a50c18), so `consul lock`, api.Lock and
// `consullock run` on the same key exclude it and are excluded by it.
// Lock and Unlock are called by one goroutine at a time; Done, Err and
// Token by any.
type Mutex struct{ h *hold }

// NewMutex is a mutex on a raw key (etcd's NewMutex, Consul's api.Lock),
// such as "service/job/.lock", held through s. It does not contact Consul.
// The token needs key write on key.
func NewMutex(s *Session, key string) (*Mutex, error) {
	h, err := newHold(s, lockmodel.Lock{Prefix: key, Key: key, Limit: 1}, lockproto.Settings{})
	if err != nil {
		return nil, err
	}
	return &Mutex{h}, nil
}

// NewDeclaredMutex is the mutex of the lock declared under name (resource
// consullock_lock with limit 1), read from the registry: its key and its
// waiters (race, queue or handoff). The token needs key read on the lock's
// record and key write on its key.
func NewDeclaredMutex(ctx context.Context, s *Session, name string) (*Mutex, error) {
	l, _, err := lockproto.ReadDeclaration(ctx, s.c, s.cfg.registry, name)
	if err != nil {
		return nil, err
	}
	if l.IsSemaphore() {
		return nil, fmt.Errorf("concurrency: lock %q is a semaphore (limit %d): use NewDeclaredSemaphore", name, l.Limit)
	}
	h, err := newHold(s, l, lockproto.Settings{})
	if err != nil {
		return nil, err
	}
	return &Mutex{h}, nil
}

// Lock waits until the session holds the mutex, or ctx ends (its error is
// returned), or the session is lost (ErrSessionLost). A key in its
// lock-delay is waited out.
func (m *Mutex) Lock(ctx context.Context) error { return m.h.acquire(ctx, false) }

// TryLock acquires the mutex if it is free, and returns ErrLocked at once
// when another session holds it or it is in its lock-delay (etcd's
// TryLock). Only for a mutex whose waiters race.
func (m *Mutex) TryLock(ctx context.Context) error { return m.h.acquire(ctx, true) }

// Unlock releases the mutex (a release sets no lock-delay: the next holder
// starts at once); the session lives on. Unlocking a mutex that is not
// held does nothing; after a loss it releases the key if the session
// still holds it.
func (m *Mutex) Unlock(ctx context.Context) error { return m.h.unlock(ctx) }

// Done is closed when the hold ends: the lock was lost (Err says why) or
// unlocked. It is closed while the mutex is not held.
func (m *Mutex) Done() <-chan struct{} { return m.h.doneC() }

// Err is why the last hold was lost: an error wrapping ErrLockLost,
// ErrSessionLost, ErrSessionClosed or ErrSessionOrphaned; nil while held
// and after Unlock.
func (m *Mutex) Err() error { return m.h.err() }

// Token is the fencing token of the current hold: the Raft index of the
// acquisition, which grows with every acquisition of the key (unlike
// Consul's LockIndex); 0 while not held. Pass it to what the holder
// writes, so that a store can refuse a write from an older holder.
func (m *Mutex) Token() uint64 { return m.h.token() }

// IsOwner is a transaction op that fails the whole Consul transaction
// unless the session still holds the mutex when it commits (etcd's
// Mutex.IsOwner): put it first in a KV transaction to fence a write.
func (m *Mutex) IsOwner() *api.TxnOp { return m.h.isOwner() }

// Key is the mutex's KV key.
func (m *Mutex) Key() string { return m.h.lock.Key }

// Semaphore is a lock up to Limit sessions hold at a time: Consul's
// api.Semaphore protocol (a holder table at <prefix>/.lock and a contender
// key per session), shared with `consul lock -n` and `consullock run` on
// the same prefix. Acquire and Release are called by one goroutine at a
// time; Done, Err and Token by any.
type Semaphore struct{ h *hold }

// NewSemaphore is a semaphore of limit slots (at least 2; use a Mutex for
// one) under a raw prefix, held through s. It does not contact Consul.
// The token needs key_prefix write on prefix.
func NewSemaphore(s *Session, prefix string, limit int) (*Semaphore, error) {
	if limit < 2 {
		return nil, fmt.Errorf("concurrency: a semaphore has a limit of at least 2, not %d; use a Mutex for 1", limit)
	}
	h, err := newHold(s, lockmodel.Lock{Prefix: prefix, Limit: limit}, lockproto.Settings{})
	if err != nil {
		return nil, err
	}
	return &Semaphore{h}, nil
}

// NewDeclaredSemaphore is the semaphore declared under name (resource
// consullock_lock with limit above 1), read from the registry.
func NewDeclaredSemaphore(ctx context.Context, s *Session, name string) (*Semaphore, error) {
	l, _, err := lockproto.ReadDeclaration(ctx, s.c, s.cfg.registry, name)
	if err != nil {
		return nil, err
	}
	if !l.IsSemaphore() {
		return nil, fmt.Errorf("concurrency: lock %q is a mutex: use NewDeclaredMutex", name)
	}
	h, err := newHold(s, l, lockproto.Settings{})
	if err != nil {
		return nil, err
	}
	return &Semaphore{h}, nil
}

// Acquire waits until the session holds a slot, or ctx ends, or the
// session is lost (ErrSessionLost). A slot whose holder's session ended
// without leaving frees once that holder's lock-delay has passed.
func (m *Semaphore) Acquire(ctx context.Context) error { return m.h.acquire(ctx, false) }

// Release leaves the semaphore; the session lives on.
func (m *Semaphore) Release(ctx context.Context) error { return m.h.unlock(ctx) }

// Done is closed when the slot is lost (Err says why) or released; it is
// closed while no slot is held.
func (m *Semaphore) Done() <-chan struct{} { return m.h.doneC() }

// Err is why the last slot was lost, as Mutex.Err.
func (m *Semaphore) Err() error { return m.h.err() }

// Token is the fencing token of the slot held: the Raft index of the
// admission; 0 while none is held.
func (m *Semaphore) Token() uint64 { return m.h.token() }

// IsOwner is a transaction op that fails the transaction unless the
// session still holds its contender key.
func (m *Semaphore) IsOwner() *api.TxnOp { return m.h.isOwner() }
