package store

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// lossyClient is a store that talks to the agent through a proxy that
// loses the answer to the first request drop matches.
func lossyClient(t *testing.T, drop func(*http.Request, []byte) bool) Store {
	t.Helper()
	srv := testenv.LossyProxy(t, agent.HTTPAddr(), drop)
	c, err := consul.New(consul.Settings{Address: srv.URL, Token: agent.ManagementToken,
		Retry: consul.RetrySettings{MaxAttempts: 3, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}

func TestCreateACLToken_lostAnswerLeavesExactlyOneToken(t *testing.T) {
	ctx := context.Background()
	description := "lost-answer " + testenv.NewUUID()
	c := lossyClient(t, testenv.PutTo("/v1/acl/token"))
	got, err := c.CreateACLToken(ctx, &api.ACLToken{Description: description})
	if err != nil {
		t.Fatalf("create with a lost answer: %v", err)
	}
	tokens, _, err := agent.Client().ACL().TokenList(nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, tok := range tokens {
		if tok.Description == description {
			found = append(found, tok.AccessorID)
			t.Cleanup(func() { _, _ = agent.Client().ACL().TokenDelete(tok.AccessorID, nil) })
		}
	}
	if len(found) != 1 || found[0] != got.AccessorID {
		t.Fatalf("tokens with the description: %v; want exactly the one returned (%s)", found, got.AccessorID)
	}
	live, _, err := agent.Client().ACL().TokenRead(got.AccessorID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SecretID == "" || live.SecretID != got.SecretID {
		t.Fatal("the returned secret is not the live token's secret")
	}
}

func TestCreateACLPolicy_lostAnswerLeavesExactlyOnePolicy(t *testing.T) {
	ctx := context.Background()
	name := "lost-answer-" + testenv.NewUUID()[:8]
	c := lossyClient(t, testenv.PutTo("/v1/acl/policy"))
	want := &api.ACLPolicy{Name: name, Description: "d", Rules: "key \"lost\" {\n  policy = \"read\"\n}\n"}
	got, err := c.CreateACLPolicy(ctx, want)
	if err != nil {
		t.Fatalf("create with a lost answer: %v", err)
	}
	t.Cleanup(func() { _, _ = agent.Client().ACL().PolicyDelete(got.ID, nil) })
	policies, _, err := agent.Client().ACL().PolicyList(nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range policies {
		if p.Name == name {
			found = append(found, p.ID)
		}
	}
	if len(found) != 1 || found[0] != got.ID {
		t.Fatalf("policies named %s: %v; want exactly the one returned (%s)", name, found, got.ID)
	}

	// A policy of that name that is not ours is still an error.
	other := *want
	other.Rules = "key \"other\" {\n  policy = \"read\"\n}\n"
	if _, err := newClient(t, agent.ManagementToken).CreateACLPolicy(ctx, &other); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating a second, different policy of the same name: %v; want already exists", err)
	}
}

func TestRegistryPut_lostAnswerIsNotAConflict(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.UniquePrefix(t.Name())
	reg := lossyClient(t, testenv.PutTo("/v1/txn")).Registry(prefix)
	index, err := reg.Put(ctx, lockmodel.KindLock, "a", []byte("v1"), 0)
	if err != nil {
		t.Fatalf("create-only Put with a lost answer: %v; want success, not a conflict with itself", err)
	}
	pair, _, err := agent.Client().KV().Get(reg.Key(lockmodel.KindLock, "a"), &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || string(pair.Value) != "v1" || pair.ModifyIndex != index {
		t.Fatalf("record after Put: %+v, %v; want v1 at the returned index %d", pair, err, index)
	}

	// An update whose answer is lost, then a real conflict.
	reg2 := lossyClient(t, testenv.PutTo("/v1/txn")).Registry(prefix)
	next, err := reg2.Put(ctx, lockmodel.KindLock, "a", []byte("v2"), index)
	if err != nil || next <= index {
		t.Fatalf("update Put with a lost answer: %d, %v; want success at a higher index", next, err)
	}
	var conflict *ErrConflict
	if _, err := reg2.Put(ctx, lockmodel.KindLock, "a", []byte("v3"), index); !errors.As(err, &conflict) {
		t.Fatalf("Put at a stale index: %v; want a conflict", err)
	}
}

func TestCreateKeyOnly_lostAnswerCountsAsCreated(t *testing.T) {
	ctx := context.Background()
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	c := lossyClient(t, func(r *http.Request, _ []byte) bool { return r.Method == http.MethodPut && r.URL.Query().Has("cas") })
	created, err := c.CreateKeyOnly(ctx, key, lockmodel.LockFlagValue, nil)
	if err != nil || !created {
		t.Fatalf("create-only with a lost answer: created %v, %v; want created", created, err)
	}
	if created, err := c.CreateKeyOnly(ctx, key, lockmodel.LockFlagValue, nil); err != nil || created {
		t.Fatalf("second create-only: created %v, %v; want false (exists)", created, err)
	}
}
