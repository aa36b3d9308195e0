package consul

import (
	"context"

	"github.com/hashicorp/consul/api"
)

// RenewSession renews session id: its entry on success, (nil, nil) when
// the session is gone (HTTP 404), else a classified *Error. Unlike the
// api's Session().Renew, which drops Consul's answer to a refusal, the
// error names what Consul said (a 403 names the permission and the node:
// "session:write" on "web-1").
func (c *Client) RenewSession(ctx context.Context, id string) (*api.SessionEntry, error) {
	var entries []*api.SessionEntry
	_, err := c.Raw().Write("/v1/session/renew/"+id, nil, &entries, (&api.WriteOptions{}).WithContext(ctx))
	op := "renew session " + id
	switch {
	case err == nil && len(entries) > 0:
		return entries[0], nil
	case err == nil:
		return nil, nil
	}
	e := c.Wrap(op, err)
	if KindOf(e) == KindNotFound {
		return nil, nil
	}
	return nil, e
}
