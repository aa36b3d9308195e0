package concurrency

import (
	"errors"
	"fmt"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// The attempt's outcome: a cancellation that reached fn before it returned
// decides, whatever fn returned; otherwise fn's own result.
func TestOutcome_cancellationBeforeReturnDecides(t *testing.T) {
	boom := errors.New("boom")
	lost := fmt.Errorf("%w: key taken", ErrLockLost)
	timedOut := fmt.Errorf("%w (1m)", ErrTimedOut)
	for _, c := range []struct {
		name    string
		err     error
		stopped error
		want    ledger.RunOutcome
		code    string
	}{
		{"returned nil by itself", nil, nil, ledger.RunSucceeded, "0"},
		{"returned an error by itself", boom, nil, ledger.RunFailed, "1"},
		{"lost, then returned nil", nil, lost, ledger.RunLost, "none"},
		{"lost, then returned the cause", lost, lost, ledger.RunLost, "none"},
		{"session lost", boom, ErrSessionLost, ledger.RunLost, "none"},
		{"max_runtime, then returned nil", nil, timedOut, ledger.RunTimedOut, "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := outcome(c.err, c.stopped)
			code := "none"
			if got.ExitCode != nil {
				code = fmt.Sprint(*got.ExitCode)
			}
			if got.Outcome != c.want || code != c.code {
				t.Fatalf("outcome %s exit %s, want %s exit %s", got.Outcome, code, c.want, c.code)
			}
			if got.Outcome == ledger.RunLost && got.Reason == "" {
				t.Fatal("a lost attempt keeps no reason")
			}
		})
	}
}
