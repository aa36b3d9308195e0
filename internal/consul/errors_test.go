package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is a real Consul dev agent with ACLs on and default_policy = deny.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	var err error
	agent, err = testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting consul:", err)
		os.Exit(1)
	}
	code := m.Run()
	agent.Stop()
	os.Exit(code)
}

func newClient(t *testing.T, token string) *Client {
	t.Helper()
	c, err := New(Settings{Address: agent.Addr, Token: token, Retry: RetrySettings{MaxAttempts: 3, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClassify_againstRealAgent(t *testing.T) {
	ctx := context.Background()
	noRules, err := agent.MintToken("classify-no-rules-"+testenv.NewUUID()[:8], `key "unrelated" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := newClient(t, agent.ManagementToken)
	weak := newClient(t, noRules.SecretID)
	bogus := newClient(t, testenv.NewUUID())

	t.Run("not found: HTTP 404 from a key that does not exist", func(t *testing.T) {
		// KV().Get turns 404 into a nil pair; the raw endpoint shows the status.
		var out any
		_, err := mgmt.Raw().Query("/v1/kv/classify/missing-"+testenv.NewUUID(), &out, nil)
		assertKind(t, Classify("read key", err), KindNotFound)
	})

	t.Run("not found: ACL policy that does not exist, valid caller token", func(t *testing.T) {
		_, _, err := mgmt.ACL().PolicyRead(testenv.NewUUID(), nil)
		if err == nil {
			t.Fatal("reading a missing policy by ID returned no error; Consul 1.14 answers 403 ACL not found")
		}
		e := mgmt.Classify(ctx, "read policy", err)
		assertKind(t, e, KindNotFound)
	})

	t.Run("permission denied names permission and resource", func(t *testing.T) {
		_, err := weak.KV().Put(&api.KVPair{Key: "classify/denied", Value: []byte("x")}, nil)
		e := Classify("write key", err)
		assertKind(t, e, KindPermissionDenied)
		if e.Permission != "key:write" || e.Resource != "classify/denied" {
			t.Fatalf("permission = %q on %q, want key:write on classify/denied (%s)", e.Permission, e.Resource, e.Message)
		}
		if !strings.Contains(e.Error(), `"key:write"`) || !strings.Contains(e.Error(), `"classify/denied"`) {
			t.Fatalf("message does not name permission and resource: %s", e)
		}
	})

	t.Run("invalid token, decided with token/self", func(t *testing.T) {
		_, err := bogus.KV().Put(&api.KVPair{Key: "classify/x", Value: []byte("x")}, nil)
		e := bogus.Classify(ctx, "write key", err)
		assertKind(t, e, KindInvalidToken)
		if !strings.Contains(e.Error(), "invalid or expired") {
			t.Fatalf("message does not say the token is invalid: %s", e)
		}
	})

	t.Run("a missing ACL object with a valid token is not found, with an invalid token is invalid-token", func(t *testing.T) {
		// Consul answers both with 403 "ACL not found".
		_, _, errValid := mgmt.ACL().TokenRead(testenv.NewUUID(), nil)
		_, _, errBogus := bogus.ACL().TokenRead(testenv.NewUUID(), nil)
		if errValid == nil || errBogus == nil {
			t.Fatalf("expected errors, got %v and %v", errValid, errBogus)
		}
		assertKind(t, mgmt.Classify(ctx, "read token", errValid), KindNotFound)
		assertKind(t, bogus.Classify(ctx, "read token", errBogus), KindInvalidToken)
	})

	t.Run("validation 500 is classified and never retried", func(t *testing.T) {
		before := mgmt.Requests()
		_, _, err := mgmt.Session().Create(&api.SessionEntry{Node: agent.NodeName, TTL: "5s"}, nil)
		e := Classify("create session", err)
		assertKind(t, e, KindValidation)
		if !strings.Contains(e.Message, "Invalid Session TTL") {
			t.Fatalf("unexpected message %q", e.Message)
		}
		if sent := mgmt.Requests() - before; sent != 1 {
			t.Fatalf("validation error was sent %d times, want 1 (no retry)", sent)
		}
	})

	t.Run("permission denied is never retried", func(t *testing.T) {
		before := weak.Requests()
		_, err := weak.KV().Put(&api.KVPair{Key: "classify/denied2", Value: []byte("x")}, nil)
		assertKind(t, Classify("write", err), KindPermissionDenied)
		if sent := weak.Requests() - before; sent != 1 {
			t.Fatalf("403 was sent %d times, want 1", sent)
		}
	})

	t.Run("transient: unreachable address, retried within the bound", func(t *testing.T) {
		addr := closedPort(t)
		c, err := New(Settings{Address: addr, Retry: RetrySettings{MaxAttempts: 4, MinWait: 10 * time.Millisecond, MaxWait: 50 * time.Millisecond, MaxElapsed: 5 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Ping(ctx)
		assertKind(t, Classify("ping", err), KindTransient)
		if !strings.Contains(err.Error(), addr) {
			t.Fatalf("error does not name the address %s: %v", addr, err)
		}
		if sent := c.Requests(); sent != 4 {
			t.Fatalf("sent %d attempts, want exactly max_attempts = 4", sent)
		}
	})
}

func TestPing(t *testing.T) {
	ctx := context.Background()
	withToken := newClient(t, agent.ManagementToken)
	if err := withToken.Ping(ctx); err != nil {
		t.Fatalf("ping with management token: %v", err)
	}
	// Every plan configures the provider once: the check is one request.
	if sent := withToken.Requests(); sent != 1 {
		t.Fatalf("ping sent %d requests, want 1", sent)
	}
	// The anonymous token is a valid token, even under default deny.
	if err := newClient(t, "").Ping(ctx); err != nil {
		t.Fatalf("ping without a token: %v", err)
	}
	err := newClient(t, testenv.NewUUID()).Ping(ctx)
	if KindOf(err) != KindInvalidToken {
		t.Fatalf("ping with unknown token: kind %v (%v), want invalid token", KindOf(err), err)
	}
}

func assertKind(t *testing.T, e *Error, want ...Kind) {
	t.Helper()
	if e == nil {
		t.Fatalf("no error, want kind %v", want)
	}
	for _, k := range want {
		if e.Kind == k {
			return
		}
	}
	t.Fatalf("kind = %v, want %v: %v", e.Kind, want, e)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// The api reports some refusals as "Unexpected response code: N" without
// Consul's answer (Session().Renew): still classified by the status.
func TestClassify_statusWithoutBody(t *testing.T) {
	if k := Classify("renew", errors.New("Unexpected response code: 403")).Kind; k != KindPermissionDenied {
		t.Errorf("403 without a body: %s, want permission denied", k)
	}
	if k := Classify("renew", errors.New("Unexpected response code: 500")).Kind; k != KindValidation {
		t.Errorf("500 without a body: %s, want invalid input", k)
	}
}
