// Package controller keeps live Consul matching the declared lock policy
// between applies: it watches the registry, the lock keys, the sessions and
// the ACL policies with blocking queries, decides with the pure compliance.Decide, and
// (when this replica is the leader) acts through a thin actuator.
//
// # Leader election
//
// The leader election holds a Consul lock of the controller's own, with
// the protocol, session and loss model of `consullock run` (package
// lockproto), and a built-in session profile chosen for quick, safe
// take-over:
//
//   - TTL 10s (Consul's minimum), renewed every 5s: a replica that dies
//     without a word (SIGKILL) is invalidated by Consul after about
//     2 x TTL = 20s.
//   - LockDelay 10s and the serfHealth node check (Consul's default): a
//     leader whose node fails, or that is cut off from its agent, may be
//     replaced lock_delay after its last renewal; the loss model ends its
//     term before then (after 10s - 1s margin - LeaderGrace = 8s without
//     a renewal).
//   - Behavior release. A clean shutdown releases before destroying, so
//     no delay applies then.
//
// Worst case take-over after SIGKILL: 20s + 10s + one blocking-query
// round.
//
// What a term fences. Each leadership term has a context (term.ctx) that
// is cancelled the moment the term ends, before the leader key is
// released; every action of the term runs under it, and each write under
// a deadline of LeaderGrace on top (retries of transient errors included):
// no request of a term is still being sent or retried once the term has
// ended, and no write for longer than LeaderGrace. A request already
// handed to an agent that then stalls (a frozen agent) may still reach
// the servers later; so:
//
//   - Lock key writes (re-create, restore flags or limit) are one Consul
//     transaction with a check that the term's session holds the leader
//     key: Consul commits them only while this replica leads, however
//     late they arrive.
//   - Ending a session and restoring ACL rules have no such check in
//     Consul (the HTTP transaction API takes no session or ACL ops, and
//     policy updates have no check-and-set). Right before each, a
//     consistent read confirms the term's session still holds the leader
//     key (and, for a policy, that its ModifyIndex is the one decided
//     on), and the write must be sent within the same LeaderGrace
//     deadline. What remains: a request an agent accepted and then held
//     (frozen) is applied when it resumes, possibly after another replica
//     took over. A late policy write is seen by the new leader as drift
//     and put back to the declaration (an update of a deleted policy
//     fails); a late session end ends a session the decision found
//     violating when it was sent.
package controller
