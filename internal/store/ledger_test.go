package store

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// ledgerFixture is a lock key held by a session, and the lock's ledger key.
type ledgerFixture struct {
	c                  Store
	lockKey, ledgerKey string
	holder, other      string // sessions
	token              uint64 // the holder's fencing token
	value              []byte // the holder's value
}

func newLedgerFixture(t *testing.T) *ledgerFixture {
	t.Helper()
	c := newClient(t, agent.ManagementToken)
	p := testenv.UniquePrefix(t.Name())
	f := &ledgerFixture{c: c, lockKey: p + "/job/.lock", ledgerKey: record.RunLedgerKey(p+"/reg", "job"), value: []byte(`{"node":"worker-1"}`)}
	session := func() string {
		id, _, err := agent.Client().Session().Create(&api.SessionEntry{TTL: "60s", LockDelay: 0, Checks: []string{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(id, nil) })
		return id
	}
	f.holder, f.other = session(), session()
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: f.lockKey, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	ok, _, err := agent.Client().KV().Acquire(&api.KVPair{Key: f.lockKey, Flags: lockmodel.LockFlagValue, Value: f.value, Session: f.holder}, nil)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	pair, _, err := agent.Client().KV().Get(f.lockKey, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	f.token = pair.ModifyIndex
	return f
}

func (f *ledgerFixture) holderInfo() holder.Holder {
	return holder.Holder{Node: "worker-1", Session: f.holder, FencingToken: f.token}
}

// begin records the first start of run r1 on a ledger not yet written
// (check-and-set index 0).
func (f *ledgerFixture) begin(t *testing.T, c Store, l ledger.Ledger) (ledger.Ledger, uint64, error) {
	t.Helper()
	d, err := l.Begin("r1", f.holderInfo(), 3, time.Now())
	if err != nil || d.Kind != ledger.BeginRun {
		t.Fatalf("Begin: %v %v", d.Kind, err)
	}
	next, err := c.BeginRun(context.Background(), LedgerWrite{Fence: Fence{Key: f.lockKey, Session: f.holder}, LedgerKey: f.ledgerKey, Index: 0, Ledger: d.Ledger})
	return d.Ledger, next, err
}

func (f *ledgerFixture) live(t *testing.T, key string) *api.KVPair {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func TestReadLedger_absentIsEmptyAndCorruptIsAnError(t *testing.T) {
	ctx := context.Background()
	f := newLedgerFixture(t)
	l, index, err := f.c.ReadLedger(ctx, f.ledgerKey, "job")
	if err != nil || index != 0 || l.Lock != "job" || len(l.Runs) != 0 {
		t.Fatalf("absent ledger: %+v at %d, %v; want empty at 0", l, index, err)
	}
	for _, tc := range []struct{ value, fragment string }{
		{`{"schema_version":1,"kind":"run_ledger","name":"job","spec":{"lock":"job","runs":[{"run_id":"r1","outcome":"succeeded","attempts":[]}]}}`, "runs[0].attempts"},
		{`not json`, "not a JSON object"},
		{`{"schema_version":1,"kind":"run_ledger","name":"other","spec":{"lock":"other","runs":[]}}`, `belongs to lock "other"`},
	} {
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: f.ledgerKey, Value: []byte(tc.value)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.c.ReadLedger(ctx, f.ledgerKey, "job"); err == nil || !strings.Contains(err.Error(), tc.fragment) || !strings.Contains(err.Error(), f.ledgerKey) {
			t.Errorf("ReadLedger of %s: %v; want an error naming the key and %q", tc.value, err, tc.fragment)
		}
	}
}

// Only the holder records a start: the write is guarded by a check-session
// on the lock key in the same transaction, and is a check-and-set.
func TestBeginRun_onlyTheHolderRecordsAStart(t *testing.T) {
	ctx := context.Background()
	f := newLedgerFixture(t)

	// Another session (a runner that does not hold the lock): refused, nothing written.
	d, _ := ledger.Ledger{Lock: "job"}.Begin("r1", holder.Holder{Node: "worker-2", Session: f.other, FencingToken: 1}, 3, time.Now())
	_, err := f.c.BeginRun(ctx, LedgerWrite{Fence: Fence{Key: f.lockKey, Session: f.other}, LedgerKey: f.ledgerKey, Index: 0, Ledger: d.Ledger})
	if !errors.Is(err, ErrFenceLost) {
		t.Fatalf("BeginRun by a session that does not hold the lock: %v; want ErrFenceLost", err)
	}
	if f.live(t, f.ledgerKey) != nil {
		t.Fatal("a non-holder wrote the ledger")
	}

	before := f.c.Requests()
	_, index, err := f.begin(t, f.c, ledger.Ledger{Lock: "job"})
	if err != nil {
		t.Fatalf("BeginRun by the holder: %v", err)
	}
	if n := f.c.Requests() - before; n != 1 {
		t.Errorf("BeginRun sent %d requests, want 1", n)
	}
	got, gotIndex, err := f.c.ReadLedger(ctx, f.ledgerKey, "job")
	if err != nil || gotIndex != index || got.Runs[0].Attempts[0].Outcome != ledger.RunRunning || got.Runs[0].Attempts[0].FencingToken != f.token {
		t.Fatalf("ledger after BeginRun: %+v at %d (want %d), %v", got, gotIndex, index, err)
	}

	// A stale index: the check-and-set loses, nothing is overwritten.
	if _, _, err := f.begin(t, f.c, ledger.Ledger{Lock: "job"}); !errors.Is(err, ErrLedgerChanged) {
		t.Fatalf("BeginRun at a stale index: %v; want ErrLedgerChanged", err)
	}
	if f.live(t, f.ledgerKey).ModifyIndex != index {
		t.Fatal("a stale BeginRun overwrote the ledger")
	}
}

// The outcome is recorded in the transaction that releases the lock: after
// it, the key is unheld with its value, flags and LockIndex kept, the next
// session acquires at once (no lock-delay) and reads the outcome.
func TestFinishRunAndRelease_outcomeAndReleaseInOneTransaction(t *testing.T) {
	ctx := context.Background()
	f := newLedgerFixture(t)
	started, index, err := f.begin(t, f.c, ledger.Ledger{Lock: "job"})
	if err != nil {
		t.Fatal(err)
	}
	held := f.live(t, f.lockKey)
	done, err := started.Finish("r1", 1, ledger.RunSucceeded, new(int), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	release := RunRelease{LedgerWrite: LedgerWrite{Fence: Fence{Key: f.lockKey, Session: f.holder}, LedgerKey: f.ledgerKey, Index: index, Ledger: done},
		Flags: held.Flags, Value: held.Value}

	// Not the holder: refused, the lock stays held, the ledger unchanged.
	notHolder := release
	notHolder.Fence.Session = f.other
	if _, err := f.c.FinishRunAndRelease(ctx, notHolder); !errors.Is(err, ErrFenceLost) {
		t.Fatalf("FinishRunAndRelease by another session: %v; want ErrFenceLost", err)
	}
	// A stale ledger index: refused as a conflict, and the lock stays held.
	stale := release
	stale.Index = index - 1
	if _, err := f.c.FinishRunAndRelease(ctx, stale); !errors.Is(err, ErrLedgerChanged) {
		t.Fatalf("FinishRunAndRelease at a stale index: %v; want ErrLedgerChanged", err)
	}
	if p := f.live(t, f.lockKey); p.Session != f.holder || f.live(t, f.ledgerKey).ModifyIndex != index {
		t.Fatalf("a refused finish changed something: key session %q", p.Session)
	}

	before := f.c.Requests()
	if _, err := f.c.FinishRunAndRelease(ctx, release); err != nil {
		t.Fatalf("FinishRunAndRelease: %v", err)
	}
	if n := f.c.Requests() - before; n != 1 {
		t.Errorf("FinishRunAndRelease sent %d requests, want 1", n)
	}
	after := f.live(t, f.lockKey)
	if after.Session != "" || after.Flags != lockmodel.LockFlagValue || !bytes.Equal(after.Value, f.value) || after.LockIndex != held.LockIndex {
		t.Fatalf("key after the release: %+v; want unheld with flags, value and LockIndex kept", after)
	}
	l, _, err := f.c.ReadLedger(ctx, f.ledgerKey, "job")
	if err != nil || l.Runs[0].Outcome != ledger.RunSucceeded || *l.Runs[0].Attempts[0].ExitCode != 0 {
		t.Fatalf("ledger after the release: %+v, %v", l, err)
	}
	// The next holder acquires at once (a release sets no lock-delay) and
	// finds the run done.
	ok, _, err := agent.Client().KV().Acquire(&api.KVPair{Key: f.lockKey, Flags: lockmodel.LockFlagValue, Session: f.other}, nil)
	if err != nil || !ok {
		t.Fatalf("the next session's acquire: %v %v; want true at once", ok, err)
	}
	next, _, err := f.c.ReadLedger(ctx, f.ledgerKey, "job")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := next.Begin("r1", holder.Holder{Node: "worker-2", Session: f.other, FencingToken: 9}, 3, time.Now()); d.Kind != ledger.BeginAlreadySucceeded {
		t.Fatalf("the next holder decides %v, want already succeeded", d.Kind)
	}
}

// A ledger write whose answer is lost is settled by a read, not a conflict
// with itself, and not sent twice.
func TestLedgerWrites_lostAnswerIsSettledByARead(t *testing.T) {
	ctx := context.Background()
	f := newLedgerFixture(t)
	txn := testenv.PutTo("/v1/txn")
	lossy := lossyClient(t, txn)
	started, index, err := f.begin(t, lossy, ledger.Ledger{Lock: "job"})
	if err != nil {
		t.Fatalf("BeginRun with a lost answer: %v; want success", err)
	}
	if live := f.live(t, f.ledgerKey); live == nil || live.ModifyIndex != index {
		t.Fatalf("ledger at %+v, want the returned index %d", live, index)
	}
	done, _ := started.Finish("r1", 1, ledger.RunFailed, func() *int { c := 3; return &c }(), time.Now())
	held := f.live(t, f.lockKey)
	lossy = lossyClient(t, txn)
	next, err := lossy.FinishRunAndRelease(ctx, RunRelease{LedgerWrite: LedgerWrite{Fence: Fence{Key: f.lockKey, Session: f.holder}, LedgerKey: f.ledgerKey, Index: index, Ledger: done},
		Flags: held.Flags, Value: held.Value})
	if err != nil || next <= index {
		t.Fatalf("FinishRunAndRelease with a lost answer: %d, %v; want success at a higher index", next, err)
	}
	if p := f.live(t, f.lockKey); p.Session != "" {
		t.Fatalf("lock still held by %q after a settled release", p.Session)
	}
}

// TestLedgerWrites_permissionDenied: a token without key write on the
// ledger is denied (HTTP 403 in the transaction), nothing written, the lock
// kept.
func TestLedgerWrites_permissionDenied(t *testing.T) {
	f := newLedgerFixture(t)
	tok, err := agent.MintToken("ledger-"+testenv.NewUUID()[:8], `key "`+f.lockKey+`" { policy = "write" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	worker := newClient(t, tok.SecretID)
	if _, _, err := f.begin(t, worker, ledger.Ledger{Lock: "job"}); consul.KindOf(err) != consul.KindPermissionDenied || !strings.Contains(err.Error(), "key:write") {
		t.Fatalf("BeginRun without key write on the ledger: %v (kind %s); want permission denied naming key:write", err, consul.KindOf(err))
	}
	if f.live(t, f.ledgerKey) != nil {
		t.Fatal("a denied BeginRun wrote the ledger")
	}
}

// CASLedger, the outcome written after a loss, writes only on the index it
// read, and refuses a ledger a reader would refuse without sending it.
func TestCASLedger_writesOnlyOnTheIndexItRead(t *testing.T) {
	ctx := context.Background()
	f := newLedgerFixture(t)
	begun, err := ledger.Ledger{Lock: "job"}.Begin("r1", f.holderInfo(), 3, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.c.CASLedger(ctx, f.ledgerKey, begun.Ledger, 0); err != nil {
		t.Fatalf("CASLedger on an absent ledger at 0: %v", err)
	}
	got, index, err := f.c.ReadLedger(ctx, f.ledgerKey, "job")
	if err != nil || index == 0 || len(got.Runs) != 1 || got.Runs[0].ID != "r1" {
		t.Fatalf("ledger after the write: %+v at %d, %v", got, index, err)
	}
	if err := f.c.CASLedger(ctx, f.ledgerKey, ledger.Ledger{Lock: "job"}, 0); !errors.Is(err, ErrLedgerChanged) {
		t.Fatalf("CASLedger on a stale index = %v, want ErrLedgerChanged", err)
	}
	bad := begun.Ledger
	bad.Runs[0].Attempts[0].Session = ""
	if err := f.c.CASLedger(ctx, f.ledgerKey, bad, index); !errors.Is(err, ErrLedgerInvalid) {
		t.Fatalf("CASLedger of an invalid ledger = %v, want ErrLedgerInvalid", err)
	}
	if _, after, _ := f.c.ReadLedger(ctx, f.ledgerKey, "job"); after != index {
		t.Fatalf("the refused ledger was written: index %d, want %d", after, index)
	}
}
