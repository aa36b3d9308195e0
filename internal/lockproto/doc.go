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
package lockproto
