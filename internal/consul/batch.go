package consul

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// MaxTxnOps is how many operations one Consul transaction may carry. Consul
// 1.14 accepts 128; older servers accept 64, so batches stay at 64.
const MaxTxnOps = 64

// A batch is sent when cliParallelism reads wait, when batchIdle passes
// without another read joining, or batchLinger after its first read. The
// CLI refreshes up to 10 resources at a time, but their reads arrive spread
// out by the CLI's own work: measured on a 2-core machine, ten reads
// arrive within 5 to 22 ms at 200 locks. At 2,000 locks the CLI's work per
// resource grows and its garbage collector pauses longer: a 10 ms gap split
// 16 to 29 of a plan's 200 lock transactions there, a 20 ms gap 5 to 13,
// with no difference in plan time measured at 200 locks. One request for
// ten reads costs Consul less than ten; the idle gap keeps a lone read (a
// small configuration, the last resources of a plan) from waiting the whole
// linger.
const (
	batchIdle   = 20 * time.Millisecond
	batchLinger = 50 * time.Millisecond
)

// cliParallelism is how many operations OpenTofu and Terraform run at once
// by default (-parallelism=10). When that many reads wait, no other read
// can come before one of them is answered: the batch goes at once.
const cliParallelism = 10

// ReadBatcher coalesces concurrent consistent KV reads into one read-only
// transaction. A read joins only a transaction that has not been sent yet,
// so every read is answered by a consistent view taken after the read
// began: exactly what a read of its own would give. A read that arrives
// while a transaction is in flight waits for the next one.
type ReadBatcher struct {
	idle, linger time.Duration
	// send runs one transaction of get-or-empty operations and returns
	// the entries it saw (missing keys are entries with CreateIndex 0;
	// keys hidden by ACLs are absent).
	send func(ctx context.Context, keys []string) (map[string]*api.KVPair, error)

	mu      sync.Mutex
	pending *kvBatch
}

// kvBatch is one transaction being gathered, then sent.
type kvBatch struct {
	readers int
	keys    []string
	index   map[string]bool
	ctx     context.Context
	done    chan struct{}
	idle    *time.Timer // reset by every read that joins
	// pairs and err are set before done is closed.
	pairs map[string]*api.KVPair
	err   error
}

var batchers sync.Map // *Client → *ReadBatcher

// Reads returns the client's read batcher.
func (c *Client) Reads() *ReadBatcher {
	v, ok := batchers.Load(c)
	if !ok {
		v, _ = batchers.LoadOrStore(c, newReadBatcher(batchIdle, batchLinger, c.readTxn))
	}
	b, _ := v.(*ReadBatcher) // only *ReadBatcher values are stored
	return b
}

func newReadBatcher(idle, linger time.Duration, send func(context.Context, []string) (map[string]*api.KVPair, error)) *ReadBatcher {
	return &ReadBatcher{idle: idle, linger: linger, send: send}
}

// readTxn reads keys in one consistent read-only transaction.
func (c *Client) readTxn(ctx context.Context, keys []string) (map[string]*api.KVPair, error) {
	ops := make(api.KVTxnOps, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: k})
	}
	op := "read " + describeKeys(keys)
	ok, resp, _, err := c.KV().Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, c.Classify(ctx, op, err)
	}
	if !ok {
		return nil, TxnError(op, resp.Errors)
	}
	seen := make(map[string]*api.KVPair, len(resp.Results))
	for _, p := range resp.Results {
		if p != nil {
			seen[p.Key] = p
		}
	}
	return seen, nil
}

func describeKeys(keys []string) string {
	if len(keys) <= 3 {
		return "keys " + strings.Join(keys, ", ")
	}
	return fmt.Sprintf("keys %s and %d more", strings.Join(keys[:3], ", "), len(keys)-3)
}

// Get reads keys consistently, together with whatever other reads are
// waiting, and returns what it saw of each of its keys: an entry with
// CreateIndex 0 for a missing key, no entry for a key hidden by ACLs.
func (b *ReadBatcher) Get(ctx context.Context, keys ...string) (map[string]*api.KVPair, error) {
	if len(keys) > MaxTxnOps {
		return nil, fmt.Errorf("reading %d keys at once: at most %d fit in one Consul transaction", len(keys), MaxTxnOps)
	}
	batch := b.join(ctx, keys)
	select {
	case <-batch.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if batch.err != nil {
		return nil, batch.err
	}
	out := make(map[string]*api.KVPair, len(keys))
	for _, k := range keys {
		if p, ok := batch.pairs[k]; ok {
			out[k] = p
		}
	}
	return out, nil
}

// join adds keys to the batch being gathered (starting one if none is), and
// sends the batch when it is full. A batch that has been sent is never
// joined: that is the consistency rule.
func (b *ReadBatcher) join(ctx context.Context, keys []string) *kvBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch := b.pending
	if batch != nil && len(batch.keys)+newKeys(batch, keys) > MaxTxnOps {
		b.flushLocked(batch)
		batch = nil
	}
	if batch == nil {
		// The transaction outlives any one caller's cancellation: others
		// wait for it too. The retry policy bounds it.
		batch = &kvBatch{index: map[string]bool{}, ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
		b.pending = batch
		flush := func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.flushLocked(batch)
		}
		time.AfterFunc(b.linger, flush)
		batch.idle = time.AfterFunc(b.idle, flush)
	}
	batch.idle.Reset(b.idle)
	for _, k := range keys {
		if !batch.index[k] {
			batch.index[k] = true
			batch.keys = append(batch.keys, k)
		}
	}
	batch.readers++
	if len(batch.keys) == MaxTxnOps || batch.readers == cliParallelism {
		b.flushLocked(batch)
	}
	return batch
}

func newKeys(batch *kvBatch, keys []string) int {
	n := 0
	for _, k := range keys {
		if !batch.index[k] {
			n++
		}
	}
	return n
}

// flushLocked sends batch unless it was sent already. b.mu is held.
func (b *ReadBatcher) flushLocked(batch *kvBatch) {
	if b.pending != batch {
		return // sent already (full, or its timer fired first)
	}
	b.pending = nil
	go func() {
		batch.pairs, batch.err = b.send(batch.ctx, batch.keys)
		close(batch.done)
	}()
}
