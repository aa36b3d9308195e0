package consul

import (
	"context"
	"net/http"

	"github.com/hashicorp/consul/api"
)

// ACL policies and tokens. Every error is classified with Client.Classify,
// so Consul's 403 "ACL not found" comes back as KindNotFound only when the
// caller's own token was checked and is valid, and as KindInvalidToken
// otherwise. Errors never carry a token's SecretID: Consul does not echo it
// and nothing here adds it.

// aclObjectNotFound is the error for an ACL object Consul answered with "no such
// object" in a way that needs no token check (HTTP 404, or an empty 200 of a
// read by name).
func aclObjectNotFound(op string) *Error {
	return &Error{Kind: KindNotFound, Op: op, StatusCode: http.StatusNotFound, Message: "ACL object not found"}
}

func aclQueryOpts(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

func aclWriteOpts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// ACLPolicy reads the policy with ID id.
func (c *Client) ACLPolicy(ctx context.Context, id string) (*api.ACLPolicy, error) {
	op := "read ACL policy " + id
	p, _, err := c.ACL().PolicyRead(id, aclQueryOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, op, err)
	}
	if p == nil {
		return nil, aclObjectNotFound(op)
	}
	return p, nil
}

// ACLPolicyByName reads the policy called name.
func (c *Client) ACLPolicyByName(ctx context.Context, name string) (*api.ACLPolicy, error) {
	op := "read ACL policy named " + name
	p, _, err := c.ACL().PolicyReadByName(name, aclQueryOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, op, err)
	}
	if p == nil {
		return nil, aclObjectNotFound(op)
	}
	return p, nil
}

// CreateACLPolicy creates p and returns it as Consul stored it.
func (c *Client) CreateACLPolicy(ctx context.Context, p *api.ACLPolicy) (*api.ACLPolicy, error) {
	out, _, err := c.ACL().PolicyCreate(p, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "create ACL policy "+p.Name, err)
	}
	return out, nil
}

// UpdateACLPolicy replaces the policy p.ID with p.
func (c *Client) UpdateACLPolicy(ctx context.Context, p *api.ACLPolicy) (*api.ACLPolicy, error) {
	out, _, err := c.ACL().PolicyUpdate(p, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "update ACL policy "+p.ID, err)
	}
	return out, nil
}

// DeleteACLPolicy deletes the policy id; a policy that is already gone is
// not an error.
func (c *Client) DeleteACLPolicy(ctx context.Context, id string) error {
	if _, err := c.ACL().PolicyDelete(id, aclWriteOpts(ctx)); err != nil {
		if e := c.Classify(ctx, "delete ACL policy "+id, err); e.Kind != KindNotFound {
			return e
		}
	}
	return nil
}

// ACLToken reads the token with AccessorID accessorID. The result holds the
// SecretID when the caller has acl:write.
func (c *Client) ACLToken(ctx context.Context, accessorID string) (*api.ACLToken, error) {
	op := "read ACL token " + accessorID
	t, _, err := c.ACL().TokenRead(accessorID, aclQueryOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, op, err)
	}
	if t == nil {
		return nil, aclObjectNotFound(op)
	}
	return t, nil
}

// CreateACLToken creates t and returns it as Consul stored it.
func (c *Client) CreateACLToken(ctx context.Context, t *api.ACLToken) (*api.ACLToken, error) {
	out, _, err := c.ACL().TokenCreate(t, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "create ACL token", err)
	}
	return out, nil
}

// UpdateACLToken replaces the token t.AccessorID with t. Consul refuses to
// change Local and the expiration time.
func (c *Client) UpdateACLToken(ctx context.Context, t *api.ACLToken) (*api.ACLToken, error) {
	out, _, err := c.ACL().TokenUpdate(t, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "update ACL token "+t.AccessorID, err)
	}
	return out, nil
}

// DeleteACLToken deletes the token accessorID; a token that is already gone
// is not an error.
func (c *Client) DeleteACLToken(ctx context.Context, accessorID string) error {
	if _, err := c.ACL().TokenDelete(accessorID, aclWriteOpts(ctx)); err != nil {
		if e := c.Classify(ctx, "delete ACL token "+accessorID, err); e.Kind != KindNotFound {
			return e
		}
	}
	return nil
}
