package ledger

// Exhausted reports whether run r used up maxAttempts without a success:
// its record says so, or its latest attempt ended with an outcome that is
// retried (Retried) and it had maxAttempts attempts, so that no runner
// starts another (the next one to try writes RunExhausted). The
// controller's consullock_lock_runs_total{outcome="exhausted"}, status and
// the data source read a run by this one rule.
func (r Run) Exhausted(maxAttempts int) bool {
	if r.Outcome == RunExhausted {
		return true
	}
	if _, ok := r.Succeeded(); ok || len(r.Attempts) == 0 || r.Counted() < maxAttempts {
		return false
	}
	return r.Attempts[len(r.Attempts)-1].Outcome.Retried()
}

// OutcomeUnder is r's outcome under max_attempts maxAttempts: RunExhausted
// when Exhausted, else the outcome its record holds.
func (r Run) OutcomeUnder(maxAttempts int) RunOutcome {
	if r.Exhausted(maxAttempts) {
		return RunExhausted
	}
	return r.Outcome
}
