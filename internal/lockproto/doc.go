// Package lockproto is the one implementation of the Consul lock protocols
// consullock speaks: the api.Lock mutex and the api.Semaphore semaphore
// (acquire, watch, release: Protocol), the holder's session (create exactly
// as declared, renew, destroy), and the loss model that decides when a
// holder must stop (LossJudge, applying lockmodel.StopRule).
//
// Observe, decide, act: renewals and watches observe and report
// Observations; LossJudge decides, pure; the caller acts. The public
// library (package concurrency) packages the three as a session and its
// holds, and every holder in the module holds through it: `consullock
// run` and the ephemeral lock through internal/libhold, the controller's
// leader election through the library's API. One acquisition's choices
// (try, a blocking key, a clock, a watch client) are Settings, given to
// New. The blocking reads use consul.Follower, the one index rule and
// back-off.
package lockproto
