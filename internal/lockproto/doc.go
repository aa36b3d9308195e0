// Package lockproto is the one implementation of the Consul lock protocols
// consullock speaks: the api.Lock mutex and the api.Semaphore semaphore
// (acquire, watch, release), the holder's session (create exactly as
// declared, renew, destroy), and the loss model that decides when a holder
// must stop (LossJudge, applying lockmodel.StopRule). `consullock run` and
// the controller's leader election both use it, so a holder means the same
// thing everywhere.
//
// Observe, decide, act: renewals and watches observe and report
// Observations; LossJudge decides, pure; the caller acts (the runner stops
// its command, the controller stops acting). Hold packages the three for a
// caller with no command to run.
//
// The API follows etcd's client/v3/concurrency: AcquireHold is
// NewSession plus Mutex.Lock (a Grant with the fencing token, or an
// error); Hold.Done is Session.Done (closed when the lock is lost),
// Hold.IsOwner the fence a write commits under (Mutex.IsOwner, one
// check-session op), Hold.Unlock releases and ends the session, Close ends
// it without a release, Orphan leaves it to another renewer. Cleanup
// failures are returned, not logged; one caller's behaviour is an option
// (WithWatchClient, WithObserver, WithRuleWarned). The blocking reads use
// consul.Follower, the one index rule and back-off.
package lockproto
