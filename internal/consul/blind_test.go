package consul

import (
	"context"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestCheckListable: with ACLs on and default deny, a missing token, the
// anonymous token and a token without key:read on the prefix are blind
// there (the error names the token by accessor, never by secret); a token
// with key_prefix read passes, with or without keys under the prefix.
func TestCheckListable(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.UniquePrefix(t.Name()) + "/registry/"
	noRules, err := agent.MintToken("listable-none-"+testenv.NewUUID()[:8], `key_prefix "nothing/" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := agent.MintToken("listable-reader-"+testenv.NewUUID()[:8], `key_prefix "`+prefix+`" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, names string
	}{
		{"missing token", "", "no token set (Consul used the anonymous token)"},
		{"anonymous", "anonymous", "the anonymous token"},
		{"token with no rules", noRules.SecretID, "the token with accessor ID " + noRules.AccessorID},
	} {
		err := newClient(t, tc.token).CheckListable(ctx, prefix)
		b, ok := IsBlind(err)
		if !ok || b.Token() != tc.names || b.Prefix != prefix || KindOf(err) != KindPermissionDenied {
			t.Errorf("%s: %v; want blind, naming %q", tc.name, err, tc.names)
		}
	}
	if err := newClient(t, reader.SecretID).CheckListable(ctx, prefix); err != nil {
		t.Errorf("reader: %v", err)
	}
	if err := newClient(t, agent.ManagementToken).CheckListable(ctx, prefix); err != nil {
		t.Errorf("management: %v", err)
	}
}
