package consul

import (
	"math/rand/v2"
	"strings"
	"time"
)

// Backoff is the pause after the failures-th consecutive failure (from 1):
// minWait, doubling with every further failure, capped at maxWait. It is
// the one backoff of consullock: the HTTP retries, the controller's
// watches and the lock protocol all use it (with Jitter where many clients
// may retry in step).
func Backoff(minWait, maxWait time.Duration, failures int) time.Duration {
	d := minWait
	for i := 1; i < failures && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

// Jitter spreads d to between half and all of it, so that clients that
// failed together do not retry together.
func Jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// transientMessages are texts of Consul errors that mean "try again": the
// cluster is electing a leader, an RPC to the servers failed, or the
// connection did. Consul answers the server-side ones as HTTP 500 (every
// other 500 is a validation error that fails the same way on every retry),
// and some api calls (Txn, Session.Renew) report them without a status
// code. This is the one list: the HTTP retry policy, error classification
// and the lock protocol all read it.
var transientMessages = []string{
	"No cluster leader",
	"leadership lost",
	"raft is already shutdown",
	"Raft leader not found",
	"rpc error making call: EOF",
	"rpc error making call: i/o timeout",
	// yamux: the agent's multiplexed connection to a server went away
	// mid-call (a killed leader); the write may have been applied.
	"rpc error making call: stream closed",
	"rpc error making call: session shutdown",
	"rpc error making call: connection reset",
	// The agent's connection to the server reset while it wrote a nested
	// RPC (seen in TestRunOnce_clusterRunnersAcrossClientsAndLeaderKills
	// right after the leader was killed): "rpc error making call: rpc
	// error making call: write tcp ...: write: connection reset by peer"
	// (or "write: broken pipe", "use of closed network connection").
	"connection reset by peer",
	// The same write on a connection the server had already closed, or
	// that the agent had closed.
	"broken pipe",
	"use of closed network connection",
	"rpc error getting client",
	"connection refused",
	"i/o deadline reached",
	"i/o timeout",
	// raft.ErrNotLeader: a server that lost the leadership while it
	// served a consistent read or a write (seen under a 2-core burst
	// benchmark, the servers starved: a leader election).
	"node is not the leader",
	// structs.ErrNoServers: a client agent that knows no server to forward
	// to (all of them failed its health checks: seen under a 2-core burst
	// benchmark, servers starved through a leader election).
	"No known Consul servers",
}

// isTransientServerError reports whether an HTTP 500 body (or an error
// text) from Consul describes a passing condition rather than invalid
// input.
func isTransientServerError(body string) bool {
	for _, m := range transientMessages {
		if strings.Contains(body, m) {
			return true
		}
	}
	return false
}

// IsTransientText reports whether err's text names a passing condition,
// for errors that carry no status code Classify can read.
func IsTransientText(err error) bool {
	return err != nil && isTransientServerError(err.Error())
}
