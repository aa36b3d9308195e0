package lockproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Protocol is how a lock is acquired, watched and released: a mutex (the
// api.Lock protocol) or a semaphore (the api.Semaphore protocol). Both
// interoperate with `consul lock` on the same prefix.
type Protocol interface {
	// Key is the lock key, given to the child as CONSUL_LOCK_KEY.
	Key() string
	// Acquire waits until session s holds the lock and returns the
	// acquisition: the fencing token (the Raft index of the write that
	// gave s the lock, as the txn "lock" op returns it: the lock key's
	// ModifyIndex for a mutex, the contender key's for a semaphore) and
	// Consul's LockIndex of that key. It returns ErrSessionInvalid when
	// Consul no longer knows s, and ctx's error when ctx ends first.
	// holder gives the value to write and is called for every attempt, so
	// that the value says when the lock was taken (the controller measures
	// max_hold from it), not when the wait began.
	Acquire(ctx context.Context, s *Session, holder func() []byte) (Grant, error)
	// Watch follows the lock with consistent blocking reads until ctx ends
	// or the lock is seen lost, and reports every result on out.
	Watch(ctx context.Context, s *Session, out chan<- Observation)
	// Release gives the lock up, if s holds it, without ending s, so the
	// next holder starts without lock-delay. released is false when s did
	// not hold it; then nothing changed.
	Release(ctx context.Context, s *Session, holder []byte) (released bool, err error)
	// ownerKey is the key s holds while it holds the lock (the fence).
	ownerKey(s *Session) string
}

// Settings are an acquisition's choices besides the lock (the runner's;
// the zero value waits for the lock as Consul's api.Lock does).
type Settings struct {
	// Try has a mutex whose waiters race return ErrLocked as soon as it
	// sees the key held by another session, on the first read or after a
	// lock op that lost, instead of waiting with its session (etcd
	// concurrency's TryLock). A key free but in its lock-delay is still
	// waited out. Queued mutexes and semaphores wait as without it.
	Try bool
	// BlockingKey, when set, is read at every acquisition's own Raft
	// index: the lock op's (or semaphore admission's) transaction also
	// reads it (a get-tree op, which key read allows; a check-not-exists
	// op would need key write), so no read follows the acquisition. When
	// it exists, Acquire gives the lock up and returns ErrBlocked. A lock
	// handed over (waiters = "handoff") is taken in the previous holder's
	// transaction: its new holder reads the key consistently once. The
	// token needs read on it.
	BlockingKey string
	// Clock dates what other processes compare with their own clocks: the
	// hand-off's started (waiters = "handoff"). Nil: the system's.
	Clock lockmodel.Clock
	// WatchClient, when set, is the client Watch uses: one with
	// connections of its own (the same settings), so that the blocking
	// query keeps its connection busy while the lock is held and the
	// release goes over the connection the acquisition left idle instead
	// of dialling one (a TCP, and with TLS a TLS, handshake on the
	// hand-over's path).
	WatchClient *consul.Client
}

// New picks the protocol of lock l (normalised), acquired as set says.
func New(c *consul.Client, l lockmodel.Lock, declaredDelay time.Duration, log *slog.Logger, set Settings) Protocol {
	if l.IsSemaphore() {
		return &semaphore{c: c, lock: l, declaredDelay: declaredDelay, prefix: l.Prefix, log: log,
			watchC: set.WatchClient, blockingKey: set.BlockingKey}
	}
	return &mutex{c: c, lock: l, declaredDelay: declaredDelay, log: log,
		watchC: set.WatchClient, clock: set.Clock, try: set.Try && !l.Queued(), blockingKey: set.BlockingKey}
}

// Grant is what an acquisition returns.
type Grant struct {
	// FencingToken is the Raft index of the write that gave the session
	// the lock. Raft indexes only grow, so unlike LockIndex it never goes
	// back: not when the key is deleted and created again (LockIndex
	// restarts at 1), nor after a plain write (LockIndex 0).
	FencingToken uint64
	// LockIndex is Consul's LockIndex of the acquired key.
	LockIndex uint64
	// Seen is the index (X-Consul-Index) of the read of the key that the
	// winning lock op followed: the acquisition's view, in which the key
	// was free. 0 when unknown (a semaphore). For a lock handed over
	// (Value set), the index of the hand-off.
	Seen uint64
	// Value is set when the previous holder handed the lock to this
	// session (waiters = "handoff"): the value it wrote for it, the
	// session's own queue entry with started at the hand-off.
	Value []byte
}

// lockKey acquires key for session with a KV transaction holding one
// "lock" op. Unlike ?acquire=, the answer carries the written entry, so its
// ModifyIndex (the fencing token) comes with the acquisition itself rather
// than from a read after it that another write could have overtaken. ok is
// false when another session holds the key or it is in a lock-delay; err is
// ErrSessionInvalid when Consul no longer knows the session. A session
// re-locking a key it holds succeeds and gets a new ModifyIndex.
func lockKey(ctx context.Context, c *consul.Client, pair *api.KVPair) (entry *api.KVPair, ok bool, err error) {
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVLock, Key: pair.Key, Value: pair.Value, Flags: pair.Flags, Session: pair.Session}}}
	return runLockTxn(ctx, c, ops, pair.Key)
}

// runLockTxn runs ops, whose "lock" op is on key, and returns the entry the
// transaction wrote for key (the last of its results for key with the
// highest ModifyIndex: the lock op's, also after an unlock op on key in the
// same transaction). ok is false with no error when Consul refused for a
// reason the protocol expects (consul.TxnError's KindHeld, KindLockDelay,
// KindStaleIndex); err is ErrSessionInvalid when Consul no longer knows the
// session, and TxnError's *consul.Error for any other refusal (a
// permission denied).
func runLockTxn(ctx context.Context, c *consul.Client, ops api.TxnOps, key string) (*api.KVPair, bool, error) {
	ok, resp, err := c.WriteTxn(ctx, ops)
	if err != nil {
		if consul.KindOf(err) == consul.KindSessionInvalid {
			return nil, false, ErrSessionInvalid
		}
		return nil, false, err
	}
	if !ok {
		e := consul.TxnError("lock "+key, resp.Errors)
		switch e.Kind {
		case consul.KindSessionInvalid:
			return nil, false, ErrSessionInvalid
		case consul.KindHeld, consul.KindLockDelay, consul.KindStaleIndex:
			return nil, false, nil
		}
		return nil, false, e
	}
	var entry *api.KVPair
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == key && (entry == nil || r.KV.ModifyIndex >= entry.ModifyIndex) {
			entry = r.KV
		}
	}
	if entry == nil {
		return nil, false, fmt.Errorf("lock %s: the transaction succeeded but did not report the key", key)
	}
	if blocked(ops, resp.Results) {
		return entry, true, ErrBlocked
	}
	return entry, true, nil
}

// blockOps is the read of a blocking key (Settings.BlockingKey) in an
// acquisition's transaction: a get-tree, which never fails the transaction
// (an absent key lists nothing; one the token may not read is left out of
// the results); none for "".
func blockOps(key string) api.TxnOps {
	if key == "" {
		return nil
	}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: key}}}
}

// blocked reports whether the results of ops list the key of one of its
// get-tree ops itself (not only keys it is the beginning of).
func blocked(ops api.TxnOps, results api.TxnResults) bool {
	for _, op := range ops {
		if op.KV == nil || op.KV.Verb != api.KVGetTree {
			continue
		}
		for _, r := range results {
			if r.KV != nil && r.KV.Key == op.KV.Key {
				return true
			}
		}
	}
	return false
}

// ErrBlocked: the hold's blocking key existed at the acquisition
// (Settings.BlockingKey); the lock was given up.
var ErrBlocked = errors.New("the lock's blocking key exists")

// ErrSessionInvalid: Consul refused an acquisition because the session no
// longer exists (consul.KindSessionInvalid).
var ErrSessionInvalid = errors.New("the session no longer exists")

// ErrLocked: with Settings.Try, the mutex key is held by another session (etcd
// concurrency's ErrLocked). The hold has ended its session without a
// release: it never held the key.
var ErrLocked = errors.New("the lock is held by another session")

// CleanupTimeout bounds each of the two cleanup steps when a hold ends:
// releasing the lock, and destroying the session.
const CleanupTimeout = 5 * time.Second

// Blocking query wait times. Consul caps a wait at 10 minutes.
const (
	acquireWaitTime = 5 * time.Minute
	watchWaitTime   = 5 * time.Minute
)

// backoff is the pause after the n-th consecutive failure (n from 1):
// 250ms doubling up to 5s.
func backoff(n int) time.Duration {
	return consul.Backoff(250*time.Millisecond, 5*time.Second, n)
}

// lockDelayMargin is added to a computed lock-delay end before retrying.
const lockDelayMargin = 10 * time.Millisecond

// lockDelayWait decides how long to wait before acquiring again after an
// acquisition answered false while no session held the key: the key is in
// the lock-delay Consul applies after its holder's session ended.
//
// freedAt is when this runner saw the key go free (zero when it never saw
// the holder: the runner started during the delay); delay is the previous
// holder's lock-delay (its session's, or else the declared one); retry
// counts the earlier lock-delay retries for this release. The delay began
// at the invalidation, before the runner saw the key go free, so
// freedAt+delay is when it has certainly passed: the first retry waits
// exactly until then. Later retries, and the case without freedAt, back off
// from 250ms to 5s, jittered to between half and all of it, so that the
// waiters that saw the same release do not retry in step.
func lockDelayWait(freedAt time.Time, delay time.Duration, retry int, now time.Time) time.Duration {
	delay = lockmodel.TakeOverDelay(delay)
	if retry == 0 && !freedAt.IsZero() {
		if wait := freedAt.Add(delay + lockDelayMargin).Sub(now); wait > 0 {
			return wait
		}
	}
	if freedAt.IsZero() {
		return consul.Jitter(backoff(retry + 1))
	}
	return consul.Jitter(backoff(max(retry, 1)))
}

// waitAfterError decides what an error while waiting for the lock means:
// transient ones (no leader, connection trouble, overload) are waited out
// with f's back-off (the next query reads from index 0) and nil is
// returned; anything else is returned classified, and so is ctx's end. A
// retried write passes a follower of its own for the back-off.
func waitAfterError(ctx context.Context, log *slog.Logger, op string, err error, f *consul.Follower) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if consul.KindOf(err) == consul.KindSessionInvalid {
		return ErrSessionInvalid
	}
	e := consul.Classify(op, err)
	if e.Kind != consul.KindTransient && !(e.Kind == consul.KindUnknown && consul.IsTransientText(err)) {
		return e
	}
	pause := f.Failed()
	log.Warn("Consul request failed; retrying", "op", op, "error", e.Error(), "retry_in", pause)
	return consul.Sleep(ctx, pause)
}

// reportReadFailure tells the loop a watch read of session s failed
// (consul.Follow then waits the back-off); false means ctx ended and the
// watch must stop.
func reportReadFailure(ctx context.Context, out chan<- Observation, s *Session, sent time.Time, err error, op string) bool {
	return send(ctx, out, Observation{Session: s.ID, Kind: ObsReadFailed, At: sent, Detail: consul.Classify(op, err).Error()})
}

// send delivers o unless ctx ends first; it reports whether it did.
func send(ctx context.Context, out chan<- Observation, o Observation) bool {
	select {
	case out <- o:
		return true
	case <-ctx.Done():
		return false
	}
}
