package consul

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/consul/api"
)

// Follower back-off bounds: the pause after consecutive failed queries,
// jittered so that clients that failed together do not retry together.
const (
	followMinBackoff = 250 * time.Millisecond
	followMaxBackoff = 5 * time.Second
)

// Follower is one blocking query followed over time: the one index rule
// and back-off of consullock, used by every watch (lock protocol, runner,
// controller, status). The index rule is Consul's
// (developer.hashicorp.com/consul/api-docs/features/blocking): wait on the
// last answer's X-Consul-Index; start again from 0 when it goes backwards
// or after a failed query (the agent may have restarted with a lower
// index, and blocking on one it will not reach hides every change); never
// wait on 0 once answered. The zero value is ready to use.
type Follower struct {
	Wait       time.Duration // each query's wait time; 0: Consul's (5 minutes)
	Consistent bool          // read from the leader, confirmed (RequireConsistent)

	index    uint64
	failures int
	changed  bool
	pause    time.Duration
}

// Options are the query options of the next query.
func (f *Follower) Options(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{WaitIndex: f.index, WaitTime: f.Wait, RequireConsistent: f.Consistent}).WithContext(ctx)
}

// Index is the index the next query waits on (0: it does not block).
func (f *Follower) Index() uint64 { return f.index }

// From makes the next query wait for a change after index, one the
// caller saw by other means (its own write, another query).
func (f *Follower) From(index uint64) { f.index = index }

// Reset makes the next query read at once (index 0), as after a failure
// but without counting one: what the caller saw is no longer enough.
func (f *Follower) Reset() { f.index = 0 }

// Answered records an answer whose X-Consul-Index is last and reports
// whether it may differ from the one before: false only for a wait that
// ended without a change (the same index).
func (f *Follower) Answered(last uint64) bool {
	prev := f.index
	f.failures, f.pause = 0, 0
	f.changed = prev == 0 || last != prev
	f.index = NextIndex(prev, last)
	return f.changed
}

// Changed is what the last Answered returned.
func (f *Follower) Changed() bool { return f.changed }

// Failed records a failed query: the next starts from index 0, after the
// returned pause (Backoff from 250ms to 5s for the consecutive failures,
// jittered). Sleep waits it out.
func (f *Follower) Failed() time.Duration {
	f.index = 0
	f.failures++
	f.pause = Jitter(Backoff(followMinBackoff, followMaxBackoff, f.failures))
	return f.pause
}

// RetryIn is the pause the last Failed returned.
func (f *Follower) RetryIn() time.Duration { return f.pause }

// Failures is the number of consecutive failed queries so far.
func (f *Follower) Failures() int { return f.failures }

// NextIndex is the index to wait on after an answer with index last to a
// query that waited on prev: 0 when the index went backwards, never
// below 1 otherwise.
func NextIndex(prev, last uint64) uint64 {
	if last < prev {
		return 0
	}
	return max(last, 1)
}

// Follow runs query with f's options until ctx ends (it returns ctx's
// error) or handle returns false (nil). handle sees every answer: after a
// failed query its error, with f.Failures counting it, and Follow then
// waits the pause; after a successful one a nil error, with f.Changed
// telling a change from a wait that timed out.
func Follow[T any](ctx context.Context, f *Follower, query func(*api.QueryOptions) (T, *api.QueryMeta, error), handle func(T, error) bool) error {
	for {
		v, meta, err := query(f.Options(ctx))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			pause := f.Failed()
			if !handle(v, err) {
				return nil
			}
			if err := Sleep(ctx, pause); err != nil {
				return err
			}
			continue
		}
		f.Answered(meta.LastIndex)
		if !handle(v, nil) {
			return nil
		}
	}
}

// FollowKey follows key with blocking queries (Follow), the first
// waiting for a change after index from (0: none), until ctx ends or
// handle returns false. handle sees every answer that may have changed,
// with its X-Consul-Index; a failed read is logged at debug level to log,
// naming what the key holds, and tried again after the back-off.
func FollowKey(ctx context.Context, c *Client, key, what string, from uint64, log *slog.Logger, handle func(pair *api.KVPair, asOf uint64) bool) {
	type answer struct {
		pair *api.KVPair
		asOf uint64
	}
	f := &Follower{}
	f.From(from)
	_ = Follow(ctx, f, func(o *api.QueryOptions) (answer, *api.QueryMeta, error) {
		pair, meta, err := c.KV().Get(key, o)
		if err != nil {
			return answer{}, nil, err
		}
		return answer{pair, meta.LastIndex}, meta, nil
	}, func(a answer, err error) bool {
		if err != nil {
			log.Debug("reading "+what+" failed", "error", err.Error(), "retry_in", f.RetryIn().String())
			return true
		}
		return !f.Changed() || handle(a.pair, a.asOf)
	})
}

// Sleep waits d or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
