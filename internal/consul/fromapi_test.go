package consul

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// fromAPIClient is a caller-built *api.Client for the test agent, as a
// program using the concurrency package builds one.
func fromAPIClient(t *testing.T, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: agent.Addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFromAPI_aclNotFoundIsDecidedWithTokenSelf: a client made from a
// caller's *api.Client cannot see the token, and Consul answers an unknown
// token and a missing ACL object alike (403 "ACL not found"), so
// /v1/acl/token/self decides: an unknown token is an invalid token, never
// "not found" (on which a caller drops state), and the message cannot say
// "expired" as it does not know that a token was given; with a valid token
// a missing object stays not found. No message carries the token.
func TestFromAPI_aclNotFoundIsDecidedWithTokenSelf(t *testing.T) {
	ctx := context.Background()
	secret := testenv.NewUUID()
	bogus := FromAPI(fromAPIClient(t, secret))
	mgmt := FromAPI(fromAPIClient(t, agent.ManagementToken))
	const unknownToken = "the token is invalid or none was given"

	t.Run("unknown token: a refused write is an invalid token", func(t *testing.T) {
		_, err := bogus.KV().Put(&api.KVPair{Key: testenv.UniquePrefix(t.Name()) + "/k", Value: []byte("x")}, nil)
		e := bogus.Classify(ctx, "write key", err)
		assertKind(t, e, KindInvalidToken)
		if e.StatusCode != 403 || !strings.Contains(e.Message, aclNotFound) {
			t.Fatalf("not Consul's 403 %q: %+v", aclNotFound, e)
		}
		if msg := e.Error(); !strings.Contains(msg, unknownToken) || strings.Contains(msg, "expired") || strings.Contains(msg, secret) {
			t.Fatalf("message %q: want %q, no \"expired\", no token", msg, unknownToken)
		}
	})

	t.Run("unknown token: reading a missing ACL object is an invalid token", func(t *testing.T) {
		_, _, err := bogus.ACL().TokenRead(testenv.NewUUID(), nil)
		if err == nil {
			t.Fatal("reading a token with an unknown token returned no error")
		}
		assertKind(t, bogus.Classify(ctx, "read token", err), KindInvalidToken)
	})

	t.Run("unknown token: a batched read is an invalid token", func(t *testing.T) {
		_, err := bogus.Reads().Get(ctx, testenv.UniquePrefix(t.Name())+"/k")
		if KindOf(err) != KindInvalidToken || strings.Contains(err.Error(), secret) {
			t.Fatalf("read with an unknown token: %v (kind %s), want invalid token without the token", err, KindOf(err))
		}
	})

	t.Run("valid token: a missing ACL object is not found", func(t *testing.T) {
		_, _, err := mgmt.ACL().TokenRead(testenv.NewUUID(), nil)
		if err == nil {
			t.Fatal("reading a missing token returned no error; Consul answers 403 ACL not found")
		}
		e := mgmt.Classify(ctx, "read token", err)
		assertKind(t, e, KindNotFound)
		if strings.Contains(e.Error(), agent.ManagementToken) {
			t.Fatalf("message carries the token: %s", e)
		}
	})

	t.Run("a client that knows it has a token says invalid or expired", func(t *testing.T) {
		known := newClient(t, secret)
		_, err := known.KV().Put(&api.KVPair{Key: testenv.UniquePrefix(t.Name()) + "/k", Value: []byte("x")}, nil)
		e := known.Classify(ctx, "write key", err)
		assertKind(t, e, KindInvalidToken)
		if msg := e.Error(); !strings.Contains(msg, "invalid or expired") || strings.Contains(msg, unknownToken) {
			t.Fatalf("message %q: want \"invalid or expired\"", msg)
		}
	})
}
