package concurrency_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
)

// A token Consul does not know is reported as an invalid token, not as a
// missing object: the library cannot see the token of the caller's
// client, so after a 403 "ACL not found" it asks /v1/acl/token/self. The
// secret is in no message.
func TestNewSession_anUnknownTokenIsReportedAsInvalid(t *testing.T) {
	const unknown = "3f0c5a4e-1b2d-4c6e-8f90-a1b2c3d4e5f6"
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Token = agent.Addr, unknown
	client, err := api.NewClient(cfg)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := concurrency.NewSession(ctx, client, concurrency.WithTTL(10*time.Second))
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("NewSession with a token Consul does not know succeeded")
	}
	if !strings.Contains(err.Error(), "the token is invalid or none was given") {
		t.Errorf("NewSession: %v; want it to say the token is invalid or none was given", err)
	}
	if strings.Contains(err.Error(), unknown) {
		t.Error("the error carries the token")
	}
}
