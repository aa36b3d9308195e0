package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// ACL policies and tokens. Every error is classified with Client.Classify,
// so Consul's 403 "ACL not found" comes back as consul.KindNotFound only when the
// caller's own token was checked and is valid, and as KindInvalidToken
// otherwise. Errors never carry a token's SecretID: Consul does not echo it
// and nothing here adds it.

// aclObjectNotFound is the error for an ACL object Consul answered with "no such
// object" in a way that needs no token check (HTTP 404, or an empty 200 of a
// read by name).
func aclObjectNotFound(op string) *consul.Error {
	return &consul.Error{Kind: consul.KindNotFound, Op: op, StatusCode: http.StatusNotFound, Message: "ACL object not found"}
}

func aclQueryOpts(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

func aclWriteOpts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// ACLPolicy reads the policy with ID id.
func (c Store) ACLPolicy(ctx context.Context, id string) (*api.ACLPolicy, error) {
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
func (c Store) ACLPolicyByName(ctx context.Context, name string) (*api.ACLPolicy, error) {
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
//
// A create whose answer is lost is not sent again blindly (the second would
// fail with "already exists", leaving a policy no state knows): the policy
// is looked up by name, and one that is exactly p is the one created.
func (c Store) CreateACLPolicy(ctx context.Context, p *api.ACLPolicy) (*api.ACLPolicy, error) {
	op := "create ACL policy " + p.Name
	var lost *consul.Error
	for attempt := 1; ; attempt++ {
		out, _, err := c.ACL().PolicyCreate(p, aclWriteOpts(ctx))
		if err == nil {
			return out, nil
		}
		e := c.Classify(ctx, op, err)
		if e.Kind != consul.KindTransient && (lost == nil || !strings.Contains(e.Message, "already exists")) {
			return nil, e
		}
		if e.Kind == consul.KindTransient {
			lost = e
		}
		live, rerr := c.ACLPolicyByName(ctx, p.Name)
		switch {
		case rerr == nil && samePolicy(live, p):
			return live, nil
		case rerr == nil:
			return nil, e // a policy of that name, not ours
		case consul.KindOf(rerr) == consul.KindNotFound && attempt < consul.MaxSettleAttempts:
			continue
		default:
			return nil, lost
		}
	}
}

// samePolicy reports whether live is exactly what want asked for.
func samePolicy(live, want *api.ACLPolicy) bool {
	return live.Name == want.Name && live.Rules == want.Rules && live.Description == want.Description &&
		slices.Equal(sortedCopy(live.Datacenters), sortedCopy(want.Datacenters))
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// UpdateACLPolicy replaces the policy p.ID with p.
func (c Store) UpdateACLPolicy(ctx context.Context, p *api.ACLPolicy) (*api.ACLPolicy, error) {
	out, _, err := c.ACL().PolicyUpdate(p, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "update ACL policy "+p.ID, err)
	}
	return out, nil
}

// DeleteACLPolicy deletes the policy id; a policy that is already gone is
// not an error.
func (c Store) DeleteACLPolicy(ctx context.Context, id string) error {
	if _, err := c.ACL().PolicyDelete(id, aclWriteOpts(ctx)); err != nil {
		if e := c.Classify(ctx, "delete ACL policy "+id, err); e.Kind != consul.KindNotFound {
			return e
		}
	}
	return nil
}

// ACLToken reads the token with AccessorID accessorID. The result holds the
// SecretID when the caller has acl:write.
func (c Store) ACLToken(ctx context.Context, accessorID string) (*api.ACLToken, error) {
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
//
// The AccessorID is chosen here (unless t has one), so that a create whose
// answer is lost can be settled: the token is read by that ID, and sent
// again only when Consul does not have it. A blind retry would create a
// second token whose secret no state holds.
func (c Store) CreateACLToken(ctx context.Context, t *api.ACLToken) (*api.ACLToken, error) {
	if t.AccessorID == "" {
		id, err := newUUID()
		if err != nil {
			return nil, fmt.Errorf("create ACL token: choosing an accessor ID: %w", err)
		}
		cp := *t
		cp.AccessorID = id
		t = &cp
	}
	op := "create ACL token " + t.AccessorID
	var lost *consul.Error
	for attempt := 1; ; attempt++ {
		out, _, err := c.ACL().TokenCreate(t, aclWriteOpts(ctx))
		if err == nil {
			return out, nil
		}
		e := c.Classify(ctx, op, err)
		if e.Kind != consul.KindTransient && (lost == nil || !strings.Contains(e.Message, "already in use")) {
			return nil, e
		}
		if e.Kind == consul.KindTransient {
			lost = e
		}
		live, rerr := c.ACLToken(ctx, t.AccessorID)
		switch {
		case rerr == nil:
			return live, nil
		case consul.KindOf(rerr) == consul.KindNotFound && attempt < consul.MaxSettleAttempts:
			continue
		default:
			return nil, lost
		}
	}
}

// newUUID is a random (version 4) UUID, the form of Consul's ACL IDs.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// UpdateACLToken replaces the token t.AccessorID with t. Consul refuses to
// change Local and the expiration time.
func (c Store) UpdateACLToken(ctx context.Context, t *api.ACLToken) (*api.ACLToken, error) {
	out, _, err := c.ACL().TokenUpdate(t, aclWriteOpts(ctx))
	if err != nil {
		return nil, c.Classify(ctx, "update ACL token "+t.AccessorID, err)
	}
	return out, nil
}

// DeleteACLToken deletes the token accessorID; a token that is already gone
// is not an error.
func (c Store) DeleteACLToken(ctx context.Context, accessorID string) error {
	if _, err := c.ACL().TokenDelete(accessorID, aclWriteOpts(ctx)); err != nil {
		if e := c.Classify(ctx, "delete ACL token "+accessorID, err); e.Kind != consul.KindNotFound {
			return e
		}
	}
	return nil
}
