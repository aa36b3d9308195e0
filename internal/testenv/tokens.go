package testenv

import (
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
)

// Token is a minted ACL token.
type Token struct {
	AccessorID string
	SecretID   string
	PolicyID   string
}

// MintToken creates a policy with rules and a token holding only it.
// ttl > 0 makes the token expire (Consul's minimum is 1m).
func (a *Agent) MintToken(name, rules string, ttl time.Duration) (Token, error) {
	acl := a.Client().ACL()
	policy, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		return Token{}, fmt.Errorf("creating policy %s: %w", name, err)
	}
	tok := &api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}
	if ttl > 0 {
		tok.ExpirationTTL = ttl
	}
	created, _, err := acl.TokenCreate(tok, nil)
	if err != nil {
		return Token{}, fmt.Errorf("creating token for %s: %w", name, err)
	}
	return Token{AccessorID: created.AccessorID, SecretID: created.SecretID, PolicyID: policy.ID}, nil
}

// DeleteToken removes a token (used to make a token invalid on purpose).
func (a *Agent) DeleteToken(accessorID string) error {
	_, err := a.Client().ACL().TokenDelete(accessorID, nil)
	return err
}
