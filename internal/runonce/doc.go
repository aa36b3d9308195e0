// Package runonce is the run-once ledger protocol, written once for every
// holder that keeps a run ledger: `consullock run -run-id` (internal/runner)
// and the public library's RunOnce.Do (concurrency). It sits beside
// lockproto, over the pure rules of internal/ledger and the writes of
// internal/store, and holds:
//
//   - Begin: decide on a copy of the ledger (ledger.BeginWith) and record the
//     attempt "running" in a write fenced by the holder's session
//     (store.BeginRun), decided again on a fresh read when its
//     check-and-set lost (up to LedgerTries), and tried again after a
//     transient failure while the hold lasts;
//   - Finish: record the attempt's outcome and release the lock in one
//     transaction (store.FinishRunAndRelease), sent again after a transient
//     failure within lockmodel.NewOutcomeDeadlines' bound;
//   - RecordAfterLoss: once the session may no longer hold the lock, the
//     outcome by check-and-set of the ledger, only while the attempt still
//     reads running, within the lock-delay that follows;
//   - Follow and Done: waiting for a run's end without a session, by
//     following the ledger with blocking queries until it shows the run
//     done.
//
// What differs between its callers is a parameter, not a copy: the clock,
// the logger, the hold (its fence, whether it is still held, why it was
// lost, what the release writes back) and, for the runner, the copy of the
// ledger its waiter already watched. Process control (the runner's
// supervisor, guard and signals; the library's cancellation of the
// function) stays with the caller.
package runonce
