package runonce

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// Done is the one rule both waiters leave by: succeeded, or exhausted
// under the policy's max_attempts; a run still short of it, or running,
// is not done.
func TestRun_Done(t *testing.T) {
	r := Run{ID: "r", Policy: ledger.AttemptPolicy{MaxAttempts: 2}}
	attempt := func(n int, o ledger.RunOutcome) ledger.Attempt { return ledger.Attempt{Number: n, Outcome: o} }
	for _, tc := range []struct {
		name string
		run  *ledger.Run
		kind ledger.BeginKind
		done bool
	}{
		{name: "absent"},
		{name: "running", run: &ledger.Run{ID: "r", Attempts: []ledger.Attempt{attempt(1, ledger.RunRunning)}}},
		{name: "failed once", run: &ledger.Run{ID: "r", Attempts: []ledger.Attempt{attempt(1, ledger.RunFailed)}}},
		{name: "succeeded", run: &ledger.Run{ID: "r", Outcome: ledger.RunSucceeded,
			Attempts: []ledger.Attempt{attempt(1, ledger.RunFailed), attempt(2, ledger.RunSucceeded)}},
			kind: ledger.BeginAlreadySucceeded, done: true},
		{name: "exhausted", run: &ledger.Run{ID: "r", Outcome: ledger.RunExhausted,
			Attempts: []ledger.Attempt{attempt(1, ledger.RunFailed), attempt(2, ledger.RunLost)}},
			kind: ledger.BeginExhausted, done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger.Ledger{Lock: "l"}
			if tc.run != nil {
				l.Runs = append(l.Runs, *tc.run)
			}
			kind, _, done := r.Done(l)
			if done != tc.done || kind != tc.kind {
				t.Fatalf("Done = %v, %v; want %v, %v", kind, done, tc.kind, tc.done)
			}
		})
	}
	// A pruned run is done by its pruned outcome, with no attempts.
	pruned := ledger.Ledger{Lock: "l", Pruned: []ledger.PrunedRun{{ID: "r", Outcome: ledger.RunExhausted}}}
	if kind, run, done := r.Done(pruned); !done || kind != ledger.BeginExhausted || len(run.Attempts) != 0 {
		t.Fatalf("pruned exhausted run: %v %+v %v", kind, run, done)
	}
	// Raised max_attempts: an exhausted run has attempts left.
	more := r
	more.Policy.MaxAttempts = 3
	l := ledger.Ledger{Lock: "l", Runs: []ledger.Run{{ID: "r", Outcome: ledger.RunExhausted,
		Attempts: []ledger.Attempt{attempt(1, ledger.RunFailed), attempt(2, ledger.RunFailed)}}}}
	if _, _, done := more.Done(l); done {
		t.Fatal("a run exhausted under max_attempts 2 is done under 3")
	}
}

// Transient is what Begin, Finish and RecordAfterLoss send again: a
// classified transient error or a timed-out request, not a refusal.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&consul.Error{Kind: consul.KindTransient}, true},
		{fmt.Errorf("read: %w", &consul.Error{Kind: consul.KindTransient}), true},
		{context.DeadlineExceeded, true},
		{&consul.Error{Kind: consul.KindPermissionDenied}, false},
		{context.Canceled, false},
		{errors.New("run ledger changed since it was read"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The hold's loss reason is read at each write of the outcome (it may
// arrive while the outcome is being written); a hold that tells none
// leaves the caller's reason.
func TestHold_result(t *testing.T) {
	res := ledger.AttemptResult{Outcome: ledger.RunLost, Reason: "fn's own"}
	if got := (Tenure{}).result(res); got.Reason != "fn's own" {
		t.Fatalf("no Reason func: %q", got.Reason)
	}
	why := ""
	h := Tenure{Reason: func() string { return why }}
	if got := h.result(res); got.Reason != "" {
		t.Fatalf("held: %q", got.Reason)
	}
	why = "session invalidated"
	if got := h.result(res); got.Reason != why {
		t.Fatalf("lost: %q", got.Reason)
	}
}

// Begin goes on trying only while the hold lasts and ctx does.
func TestHold_held(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !(Tenure{}).held(ctx) {
		t.Fatal("no Held func: held while ctx lasts")
	}
	lost := false
	h := Tenure{Held: func() bool { return !lost }}
	if !h.held(ctx) {
		t.Fatal("held")
	}
	lost = true
	if h.held(ctx) {
		t.Fatal("lost, still held")
	}
	cancel()
	if (Tenure{}).held(ctx) {
		t.Fatal("ctx ended, still held")
	}
}

func TestEarliest(t *testing.T) {
	a, b := time.Unix(10, 0), time.Unix(20, 0)
	if earliest(a, b) != a || earliest(b, a) != a || earliest(a, a) != a {
		t.Fatal("earliest")
	}
}
