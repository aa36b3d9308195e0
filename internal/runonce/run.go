package runonce

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// LedgerTries bounds how often a ledger write is decided again after its
// check-and-set lost (someone else wrote the ledger in between: only a
// holder that lost the lock recording its outcome, or a hand edit).
const LedgerTries = 5

// Run is one run of a run-once lock, as one holder keeps its ledger.
type Run struct {
	Client *consul.Client
	// Key is the ledger's key (record.RunLedgerKey), Lock the lock's name
	// the ledger must carry.
	Key, Lock string
	// ID is the run's ID; Policy its max_attempts and retry wait; Keep the
	// runs a write keeps (Ledger.Prune).
	ID     string
	Policy ledger.AttemptPolicy
	Keep   int
	Log    *slog.Logger     // nil: discarded
	Now    func() time.Time // the clock decisions are made by; nil: time.Now

	// Attempt is this holder's attempt, and Ledger the ledger as it wrote
	// it, at ModifyIndex Index: set by Begin when it decides to run, read
	// by Finish.
	Attempt int
	Ledger  ledger.Ledger
	Index   uint64
}

// Tenure is the hold on the lock an attempt runs under, as the protocol
// needs it.
type Tenure struct {
	// Fence fences every write but the one after a loss (Hold.IsOwner).
	Fence store.Fence
	// Holder is recorded with the attempt (Begin).
	Holder holder.Holder
	// Held, when set, reports whether the hold lasts: Begin stops trying
	// again once it does not, as it does once its ctx ends.
	Held func() bool
	// LastContact is when the session's latest confirmed renewal was sent;
	// TTL and LockDelay are the session's: Finish's deadlines
	// (lockmodel.NewOutcomeDeadlines).
	LastContact    time.Time
	TTL, LockDelay time.Duration
	// Flags and Value are written back to the lock key by the release.
	Flags uint64
	Value []byte
	// Reason, when set, is why the lock was lost ("" while held): read at
	// each write of the outcome as the result's Reason, and logged.
	Reason func() string
}

func (h Tenure) held(ctx context.Context) bool {
	return ctx.Err() == nil && (h.Held == nil || h.Held())
}

func (h Tenure) reason() string {
	if h.Reason == nil {
		return ""
	}
	return h.Reason()
}

// Decision is what Begin decided and the ledger as it left it: Ledger is
// the ledger as written (pruned), or as read when nothing was written; Index
// its ModifyIndex.
type Decision struct {
	ledger.BeginDecision
	Index uint64
}

// Copy is a copy of the ledger the caller already has (the runner's waiter
// watched it), at ModifyIndex Index, for Begin's first decision.
type Copy struct {
	Ledger ledger.Ledger
	Index  uint64
}

// Begin decides what this holder does with the run (ledger.BeginWith), on
// start when given, else on a consistent read, and writes the decision when
// it changes the ledger, fenced by h (store.BeginRun). A lost
// check-and-set is decided again on a fresh read, up to LedgerTries
// decisions. A transient failure (a read, or a write whose answer was lost
// and could not be settled) is tried again on a fresh read while h is held
// and ctx lasts: a start that did commit then reads as this session's own
// running attempt, which BeginWith hands back without a write, so that an
// attempt is never counted without its work running. A decision to run
// sets r.Attempt, r.Ledger and r.Index. Errors are the store's:
// store.ErrFenceLost when the session no longer holds the lock.
func (r *Run) Begin(ctx context.Context, h Tenure, start *Copy) (Decision, error) {
	for try, changed, failures := 1, 0, 0; ; try++ {
		var l ledger.Ledger
		var index uint64
		if try == 1 && start != nil {
			l, index = start.Ledger, start.Index
		} else {
			var err error
			if l, index, err = store.New(r.Client).ReadLedger(ctx, r.Key, r.Lock); err != nil {
				if failures++; r.retryBegin(ctx, h, failures, err) {
					continue
				}
				return Decision{}, err
			}
		}
		d, err := l.BeginWith(r.ID, h.Holder, r.Policy, r.now())
		if err != nil || !d.Changed {
			return r.began(Decision{BeginDecision: d, Index: index}, err)
		}
		d.Ledger = d.Ledger.Prune(r.Keep, r.ID)
		index, err = store.New(r.Client).BeginRun(ctx, store.LedgerWrite{
			Fence: h.Fence, LedgerKey: r.Key, Index: index, Ledger: d.Ledger,
		})
		if errors.Is(err, store.ErrLedgerChanged) && changed+1 < LedgerTries {
			changed++
			continue
		}
		if err != nil {
			if failures++; r.retryBegin(ctx, h, failures, err) {
				continue
			}
		}
		return r.began(Decision{BeginDecision: d, Index: index}, err)
	}
}

// began keeps a decision to run as this holder's attempt.
func (r *Run) began(d Decision, err error) (Decision, error) {
	if err == nil && d.Kind == ledger.BeginRun {
		r.Attempt, r.Ledger, r.Index = d.Attempt, d.Ledger, d.Index
	}
	return d, err
}

// retryBegin: Begin's transient failure err (its failures-th) is tried
// again, after a back-off, while h is held.
func (r *Run) retryBegin(ctx context.Context, h Tenure, failures int, err error) bool {
	if !Transient(err) || !h.held(ctx) {
		return false
	}
	r.log().Warn("cannot read or write the run ledger yet; reading it again while the lock is held", "error", err.Error())
	_ = consul.Sleep(ctx, consul.Backoff(100*time.Millisecond, 2*time.Second, failures))
	return h.held(ctx)
}

// Transient: a failure worth sending again while the lock may be held (no
// cluster leader, the agent unreachable, a request that timed out).
func Transient(err error) bool {
	var ce *consul.Error
	return errors.As(err, &ce) && ce.Kind == consul.KindTransient || errors.Is(err, context.DeadlineExceeded)
}

// Done reports whether ledger l shows the run done: succeeded
// (BeginAlreadySucceeded), or exhausted with no attempt left under
// Policy.MaxAttempts (BeginExhausted), from its runs or its pruned
// outcomes (a pruned run has no attempts).
func (r Run) Done(l ledger.Ledger) (ledger.BeginKind, ledger.Run, bool) {
	run, ok := l.DoneRun(r.ID, r.Policy.MaxAttempts)
	switch {
	case !ok:
		return 0, ledger.Run{}, false
	case run.Outcome == ledger.RunExhausted:
		return ledger.BeginExhausted, run, true
	}
	return ledger.BeginAlreadySucceeded, run, true
}

func (r Run) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r Run) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return r.Log
}
