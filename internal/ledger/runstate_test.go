package ledger

import "testing"

// A run reads exhausted once its last attempt is retried and it had
// max_attempts attempts, before any runner writes "exhausted".
func TestRunExhausted(t *testing.T) {
	attempts := func(os ...RunOutcome) []Attempt {
		out := make([]Attempt, len(os))
		for i, o := range os {
			out[i] = Attempt{Number: i + 1, Outcome: o}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		run  Run
		max  int
		want RunOutcome
	}{
		{"recorded exhausted", Run{Outcome: RunExhausted, Attempts: attempts(RunFailed)}, 3, RunExhausted},
		{"3 of 3 failed", Run{Outcome: RunFailed, Attempts: attempts(RunFailed, RunLost, RunFailed)}, 3, RunExhausted},
		{"3 of 3, the last timed out", Run{Outcome: RunTimedOut, Attempts: attempts(RunFailed, RunFailed, RunTimedOut)}, 3, RunExhausted},
		{"2 of 3 failed", Run{Outcome: RunFailed, Attempts: attempts(RunFailed, RunFailed)}, 3, RunFailed},
		{"max_attempts raised", Run{Outcome: RunFailed, Attempts: attempts(RunFailed, RunFailed, RunFailed)}, 5, RunFailed},
		{"3 of 3, the last running", Run{Outcome: RunRunning, Attempts: attempts(RunFailed, RunFailed, RunRunning)}, 3, RunRunning},
		{"succeeded", Run{Outcome: RunSucceeded, Attempts: attempts(RunFailed, RunSucceeded)}, 2, RunSucceeded},
		{"no attempts", Run{Outcome: RunFailed}, 0, RunFailed},
	} {
		if got := tc.run.OutcomeUnder(tc.max); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got := tc.run.Exhausted(tc.max); got != (tc.want == RunExhausted) {
			t.Errorf("%s: Exhausted %v", tc.name, got)
		}
	}
}
