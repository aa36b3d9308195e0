package testenv

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// The cluster's helpers do what they say on a real cluster: a leader kill
// elects another leader and the killed server rejoins; a cut client node is
// declared failed by the servers (its serfHealth goes critical, which is
// what invalidates its sessions) while its own HTTP API keeps answering,
// and recovers when healed; a frozen client is declared failed too.
func TestCluster_leaderKillCutAndFreeze(t *testing.T) {
	c := StartClusterT(t, ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := c.Clients[1].Client()

	// Default deny: the anonymous token reads nothing.
	if _, _, err := c.Clients[0].ClientWithToken("").KV().List("", nil); err == nil {
		// An empty list would also be "allowed"; write to be sure.
		if _, err := c.Clients[0].ClientWithToken("").KV().Put(&api.KVPair{Key: "x", Value: []byte("1")}, nil); err == nil {
			t.Error("an anonymous write was accepted: ACLs are not default-deny")
		}
	}

	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	leader.Kill()
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("the killed server %s is still reported as leader", leader.Name)
	}
	t.Logf("leader %s killed; %s elected after %s", leader.Name, next.Name, time.Since(start).Round(time.Millisecond))
	attempts, err := RetryWhile(ctx, consul.IsTransientText, func() error {
		_, err := admin.KV().Put(&api.KVPair{Key: "t/after-leader-kill", Value: []byte("1")}, nil)
		return err
	})
	if err != nil {
		t.Fatalf("write through a client after the election (attempt %d): %v", attempts, err)
	}
	t.Logf("write through a client after the election: accepted at attempt %d", attempts)
	if err := leader.Start(ctx); err != nil {
		t.Fatal(err)
	}

	for _, fault := range []struct {
		name        string
		inject, end func(*Node) error
	}{
		{"cut", (*Node).Cut, (*Node).Heal},
		{"freeze", (*Node).Freeze, (*Node).Thaw},
	} {
		victim := c.Clients[0]
		start := time.Now()
		if err := fault.inject(victim); err != nil {
			t.Fatal(err)
		}
		if err := waitNodeStatus(ctx, admin, victim.Name, api.HealthCritical); err != nil {
			t.Fatalf("%s: %v", fault.name, err)
		}
		t.Logf("%s %s: serfHealth critical after %s", fault.name, victim.Name, time.Since(start).Round(time.Millisecond))
		if fault.name == "cut" {
			// The cut node's own agent still answers its node's processes
			// (what needs the servers, token resolution included, does not).
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + victim.Addr + "/")
			if err != nil {
				t.Errorf("the cut node's HTTP API does not answer: %v", err)
			} else {
				_ = resp.Body.Close()
			}
		}
		if err := fault.end(victim); err != nil {
			t.Fatal(err)
		}
		healed := time.Now()
		if err := waitNodeStatus(ctx, admin, victim.Name, api.HealthPassing); err != nil {
			t.Fatalf("after %s: %v", fault.name, err)
		}
		t.Logf("%s %s ended: serfHealth passing after %s", fault.name, victim.Name, time.Since(healed).Round(time.Millisecond))
	}
}

func waitNodeStatus(ctx context.Context, cl *api.Client, node, want string) error {
	for {
		checks, _, err := cl.Health().Node(node, &api.QueryOptions{RequireConsistent: true})
		if err == nil {
			for _, ch := range checks {
				if ch.CheckID == "serfHealth" && ch.Status == want {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestRetryWhile(t *testing.T) {
	transient := errors.New("Unexpected response code: 500 (rpc error making call: EOF)")
	permanent := errors.New("Unexpected response code: 403 (Permission denied)")
	ctx := context.Background()

	calls := 0
	attempts, err := RetryWhile(ctx, consul.IsTransientText, func() error {
		if calls++; calls < 3 {
			return transient
		}
		return nil
	})
	if err != nil || attempts != 3 {
		t.Errorf("two transient failures then success: attempts %d, err %v; want 3, nil", attempts, err)
	}

	calls = 0
	attempts, err = RetryWhile(ctx, consul.IsTransientText, func() error { calls++; return permanent })
	if !errors.Is(err, permanent) || attempts != 1 || calls != 1 {
		t.Errorf("a permanent error: attempts %d, calls %d, err %v; want 1, 1, the error", attempts, calls, err)
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	attempts, err = RetryWhile(ended, consul.IsTransientText, func() error { return transient })
	if !errors.Is(err, transient) || attempts != 1 {
		t.Errorf("an ended context: attempts %d, err %v; want 1 and the last error", attempts, err)
	}
}
