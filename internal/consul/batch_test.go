package consul

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// seqSender is a batcher transport that answers every key with the sequence
// number at which its transaction was sent, so a reader can tell whether
// the transaction that served it was sent after it began.
type seqSender struct {
	seq *atomic.Int64
	// hold, when set, blocks every transaction until it is closed.
	hold  chan struct{}
	sent  chan int // number of keys of each transaction, as sent
	calls atomic.Int64
}

func (s *seqSender) send(_ context.Context, keys []string) (map[string]*api.KVPair, error) {
	at := s.seq.Add(1)
	s.calls.Add(1)
	if s.sent != nil {
		s.sent <- len(keys)
	}
	if s.hold != nil {
		<-s.hold
	}
	out := map[string]*api.KVPair{}
	for _, k := range keys {
		out[k] = &api.KVPair{Key: k, CreateIndex: 1, ModifyIndex: uint64(at)}
	}
	return out, nil
}

// The rule that keeps batching consistent: a read is never answered by a
// transaction sent before the read began. Here a transaction is held in
// flight while a second read begins; the second read must wait for a
// transaction of its own.
func TestReadBatcher_readDuringFlightWaitsForNextTxn(t *testing.T) {
	var seq atomic.Int64
	s := &seqSender{seq: &seq, hold: make(chan struct{}), sent: make(chan int, 10)}
	b := newReadBatcher(time.Millisecond, time.Millisecond, s.send)
	ctx := context.Background()

	first := make(chan uint64, 1)
	go func() {
		got, err := b.Get(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		first <- got["a"].ModifyIndex
	}()
	<-s.sent // the first transaction is in flight and held

	began := seq.Add(1)
	second := make(chan uint64, 1)
	go func() {
		got, err := b.Get(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		second <- got["a"].ModifyIndex
	}()
	select {
	case <-s.sent: // the second read went out in a transaction of its own
	case at := <-second:
		t.Fatalf("read that began at %d was answered by transaction %d, in flight when it began", began, at)
	case <-time.After(30 * time.Second):
		t.Fatal("the second read sent no transaction of its own: it joined the one in flight")
	}
	close(s.hold)

	if at := <-first; int64(at) >= began {
		t.Fatalf("first read served by transaction %d, sent after the second read began (%d)", at, began)
	}
	if at := <-second; int64(at) <= began {
		t.Fatalf("read that began at %d was served by transaction %d, sent before it began", began, at)
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2", n)
	}
}

// Many readers at random moments: each one's answer comes from a
// transaction sent after it began.
func TestReadBatcher_everyReadServedByLaterTxn(t *testing.T) {
	var seq atomic.Int64
	s := &seqSender{seq: &seq}
	b := newReadBatcher(200*time.Microsecond, 200*time.Microsecond, s.send)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 40; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				keys := []string{fmt.Sprintf("k/%d", g), fmt.Sprintf("r/%d", i%7)}
				began := seq.Add(1)
				got, err := b.Get(ctx, keys...)
				if err != nil {
					t.Error(err)
					return
				}
				for _, k := range keys {
					if at := int64(got[k].ModifyIndex); at <= began {
						t.Errorf("read of %s that began at %d served by transaction %d, sent before it", k, began, at)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := s.calls.Load(); n >= 40*50 {
		t.Fatalf("%d transactions for %d reads: nothing was batched", n, 40*50)
	}
}

// Reads waiting together share one transaction, which never exceeds
// MaxTxnOps: a full batch is sent at once and the next read starts another.
func TestReadBatcher_fullBatchSentAndNeverOverfilled(t *testing.T) {
	var seq atomic.Int64
	s := &seqSender{seq: &seq, sent: make(chan int, 10)}
	// A linger no test waits for: only a full batch is sent.
	b := newReadBatcher(time.Hour, time.Hour, s.send)
	ctx := context.Background()
	keysOf := func(name string, n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("%s/%d", name, i))
		}
		return out
	}
	const perRead = MaxTxnOps / 8
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Get(ctx, keysOf("a"+strconv.Itoa(i), perRead)...); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := <-s.sent; n != MaxTxnOps {
		t.Fatalf("first transaction carried %d keys, want %d", n, MaxTxnOps)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("%d transactions for 8 reads waiting together, want 1", n)
	}

	// MaxTxnOps-1 keys pending, then a read of 2 more: it must not overfill.
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = b.Get(ctx, keysOf("b", MaxTxnOps-1)...)
	}()
	for b.pendingKeys() < MaxTxnOps-1 {
		time.Sleep(time.Millisecond)
	}
	last := make(chan error, 1)
	go func() {
		_, err := b.Get(ctx, "c/1", "c/2")
		last <- err
	}()
	if n := <-s.sent; n != MaxTxnOps-1 {
		t.Fatalf("transaction carried %d keys, want the %d gathered before the read that did not fit", n, MaxTxnOps-1)
	}
	wg.Wait()
	if _, err := b.Get(ctx, keysOf("d", MaxTxnOps+1)...); err == nil {
		t.Fatal("a read of more keys than a transaction holds returned no error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Get(cctx, "z"); err == nil {
		t.Fatal("a read whose context is cancelled returned no error")
	}
	// The two-key read waits in a batch of its own; fill it to send it.
	go func() { _, _ = b.Get(ctx, keysOf("e", MaxTxnOps-3)...) }()
	if err := <-last; err != nil {
		t.Fatal(err)
	}
}

func (b *ReadBatcher) pendingKeys() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		return 0
	}
	return len(b.pending.keys)
}

// Against a real agent: a value written before a batched read began is
// always seen, while writers and many readers run at once.
func TestReadBatcher_realAgentSeesEveryWriteBeforeTheRead(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	const keys = 4
	var written [keys]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for k := 0; k < keys; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(1); ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.KV().Put(&api.KVPair{Key: fmt.Sprintf("%s/%d", p, k), Value: []byte(strconv.FormatInt(v, 10))}, nil); err != nil {
					t.Error(err)
					return
				}
				written[k].Store(v)
			}
		}()
	}
	var readers sync.WaitGroup
	before := c.Requests()
	const readersN, readsEach = 10, 20
	for r := 0; r < readersN; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; i < readsEach; i++ {
				k := (r + i) % keys
				key := fmt.Sprintf("%s/%d", p, k)
				floor := written[k].Load()
				pairs, err := c.Reads().Get(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				var got int64
				if p := pairs[key]; p != nil {
					got, _ = strconv.ParseInt(string(p.Value), 10, 64)
				}
				if got < floor {
					t.Errorf("read of %s that began after value %d was written saw %d", key, floor, got)
					return
				}
			}
		}()
	}
	readers.Wait()
	reads := c.Requests() - before
	close(stop)
	wg.Wait()
	t.Logf("%d reads and the writes sent %d requests", readersN*readsEach, reads)
}

// When as many reads wait as the CLI runs at once, no other read can come
// until one is answered: the batch goes without waiting out its linger.
func TestReadBatcher_sendsWhenCLIParallelismReadsWait(t *testing.T) {
	var seq atomic.Int64
	s := &seqSender{seq: &seq}
	b := newReadBatcher(time.Hour, time.Hour, s.send)
	var wg sync.WaitGroup
	for i := 0; i < cliParallelism; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Get(context.Background(), "k/"+strconv.Itoa(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("%d transactions for %d waiting reads, want 1", n, cliParallelism)
	}
}

// A refresh with a token Consul does not know (expired, deleted) says so:
// the api reports a refused transaction as bare text, and a read that
// failed for an unknown reason would not tell the user to renew the token.
func TestReadBatcher_unknownTokenIsInvalidToken(t *testing.T) {
	c := newClient(t, testenv.NewUUID())
	_, err := c.Reads().Get(context.Background(), testenv.UniquePrefix(t.Name())+"/k")
	if KindOf(err) != KindInvalidToken {
		t.Fatalf("read with an unknown token: %v (kind %s), want invalid token", err, KindOf(err))
	}
}

// A lone read (a small configuration, the last resource of a plan) goes
// once no other read has joined for the idle gap, not after the whole
// linger: here the linger is an hour, so only the idle gap can send it.
func TestReadBatcher_loneReadSentAfterIdleGap(t *testing.T) {
	var seq atomic.Int64
	s := &seqSender{seq: &seq}
	b := newReadBatcher(time.Millisecond, time.Hour, s.send)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.Get(ctx, "alone"); err != nil {
		t.Fatalf("a lone read was not sent after the idle gap: %v", err)
	}
}
