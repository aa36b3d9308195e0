// Package concurrency is consullock's lock protocol and run-once ledger as a
// Go library, for a program that schedules its own jobs (robfig/cron, a
// ticker) in several replicas and must run each job once, not merely one at
// a time. It is shaped like etcd's client/v3/concurrency and Consul's
// api.Lock, and speaks the same protocol as `consullock run` and
// `consul lock`, so all of them exclude each other on one key:
//
//   - a Session is a Consul session, created from a declared profile
//     (WithProfile) or an explicit TTL and lock-delay, renewed until Close;
//     Done is closed when it is lost, closed or orphaned (Orphan hands it
//     to another process);
//   - a Mutex (a declared lock or a raw key) and a Semaphore (a declared
//     semaphore or a raw prefix) are held through a Session, with Lock,
//     TryLock and Unlock; each hold has a fencing token (Token, the Raft
//     index of the acquisition: it only grows) and a Done channel closed when
//     the lock is lost;
//   - RunOnce.Do runs a function once per run ID across every process that
//     calls it, with the ledger, outcomes and exit semantics of `consullock
//     run -run-id`: the attempt is recorded before the function starts, the
//     outcome in the transaction that releases the lock, and the function's
//     context is cancelled when the lock is lost (the stop rule).
//
// `consullock run` holds its lock with this package's Session and hold, so
// loss is decided as the runner decides it: a session whose renewals have
// failed for longer than the stop rule allows counts as lost before Consul
// can hand the lock to another holder, so a function that returns when its
// context is cancelled (within WithGrace) never overlaps the next holder.
//
// Every call that talks to Consul takes a context; every goroutine a
// Session or a hold starts ends when it is closed, unlocked or lost.
// Errors are sentinel values to test with errors.Is.
//
// What differs from the runner: Do takes the run ID as `consullock run
// -run-id` does (run_once.starting_deadline is not applied), its waiters
// wait with a session rather than without one, and a function that ignores
// its context cannot be killed: it overlaps the next holder if it runs on
// past the loss.
//
// # Stability and versioning
//
// The package follows the module's tags (github.com/consullock/terraform-provider-consullock).
// Until the module's 1.0 it is v0: the exported names below may change in a
// minor release, and every change is listed in CHANGELOG.md. The protocol
// on the wire (keys, flags, the ledger record) is the product's and changes
// only with it. The module also holds the Terraform provider; this package
// imports none of the terraform-plugin modules, and a test keeps it so.
package concurrency
