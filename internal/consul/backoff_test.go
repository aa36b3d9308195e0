package consul

import (
	"errors"
	"testing"
	"time"
)

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	const lo, hi = 250 * time.Millisecond, 5 * time.Second
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := Backoff(lo, hi, i+1); got != w {
			t.Errorf("Backoff(%s, %s, %d) = %s, want %s", lo, hi, i+1, got, w)
		}
	}
	if got := Backoff(lo, hi, 1000); got != hi {
		t.Errorf("Backoff after 1000 failures = %s, want the cap %s", got, hi)
	}
	for range 100 {
		if d := Jitter(time.Second); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("Jitter(1s) = %s, want between 500ms and 1s", d)
		}
	}
}

func TestIsTransientText(t *testing.T) {
	for _, text := range []string{
		"Unexpected response code: 500 (No cluster leader)", "rpc error making call: EOF", "dial tcp: connection refused",
		// A write through an agent right after the Raft leader was killed
		// (seen in TestCluster_leaderKillCutAndFreeze): the agent's
		// multiplexed connection to the dead server went away mid-call.
		"Unexpected response code: 500 (rpc error making call: stream closed)",
		"rpc error making call: session shutdown",
		"rpc error making call: connection reset",
		"Unexpected response code: 500 (rpc error making call: node is not the leader)",
		// A client agent whose servers all failed (a midnight burst of
		// 300 runners starving a 3-server cluster on 2 cores).
		"Unexpected response code: 500 (No known Consul servers)",
		"Unexpected response code: 500 (rpc error making call: rpc error making call: write tcp 127.148.118.5:49885->127.148.118.2:37863: write: connection reset by peer)",
		"Unexpected response code: 500 (rpc error making call: rpc error making call: write tcp 127.174.118.1:46163->127.174.118.4:37833: write: broken pipe)",
		"Unexpected response code: 500 (rpc error making call: rpc error making call: write tcp 127.143.38.5:34477->127.143.38.2:35313: use of closed network connection)",
	} {
		if !IsTransientText(errors.New(text)) {
			t.Errorf("%q: want transient", text)
		}
	}
	for _, text := range []string{"Unexpected response code: 500 (Invalid Session TTL)", "Permission denied", "rpc error making call: Permission denied"} {
		if IsTransientText(errors.New(text)) {
			t.Errorf("%q: want not transient", text)
		}
	}
}
