package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
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

// newClient is a store over a client of the agent with token.
func newClient(t *testing.T, token string) Store {
	t.Helper()
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: token, Retry: consul.RetrySettings{MaxAttempts: 3, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}
