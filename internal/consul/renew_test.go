package consul

import (
	"context"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestRenewSession_classifiesARefusal: a renewal refused with 403 is
// classified like every other Consul error, naming the permission and the
// node (the api's Session().Renew drops Consul's answer: "unknown:
// Unexpected response code: 403"); a session that is gone is (nil, nil),
// as with Session().Renew; a renewal that works returns the session.
func TestRenewSession_classifiesARefusal(t *testing.T) {
	ctx := context.Background()
	mgmt := newClient(t, agent.ManagementToken)
	id, _, err := mgmt.Session().Create(&api.SessionEntry{TTL: "10s", Behavior: "release"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = mgmt.Session().Destroy(id, nil) }()
	weak, err := agent.MintToken("renew-no-session-"+testenv.NewUUID()[:8], `key "unrelated" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, weak.SecretID).RenewSession(ctx, id)
	e := Classify("", err)
	if e == nil || e.Kind != KindPermissionDenied || e.Permission != "session:write" || e.Resource != agent.NodeName {
		t.Fatalf("renewal without session:write: %v (%+v); want permission denied naming session:write on %q", err, e, agent.NodeName)
	}
	if entry, err := mgmt.RenewSession(ctx, id); err != nil || entry == nil || entry.ID != id {
		t.Fatalf("renewal: %+v, %v", entry, err)
	}
	if entry, err := mgmt.RenewSession(ctx, testenv.NewUUID()); err != nil || entry != nil {
		t.Fatalf("renewal of a session that is gone: %+v, %v; want nil, nil", entry, err)
	}
}
