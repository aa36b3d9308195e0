package consul

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/hashicorp/consul/api"
)

// AnonymousTokenAccessorID is the accessor ID of Consul's anonymous token
// (acl.AnonymousTokenID in Consul), used for requests without a token.
const AnonymousTokenAccessorID = "00000000-0000-0000-0000-000000000002"

// BlindError says that the caller sees nothing under Prefix and that this
// may be a denial, not an empty registry: Consul answers a listing the
// token may not read with nothing (it filters, and reports the filtering
// only to some tokens). A program that reads declarations must not report
// "no locks, all healthy" then.
type BlindError struct {
	Prefix string
	// NoToken: the request carried no token, so Consul answered as the
	// anonymous token.
	NoToken bool
	// AccessorID is the accessor ID of the token Consul used, from its
	// denial; "" when Consul did not name it. Never the secret.
	AccessorID string
	// Err is Consul's denial (KindPermissionDenied).
	Err *Error
}

// Token names the token Consul used, without its secret.
func (e *BlindError) Token() string {
	switch {
	case e.NoToken:
		return "no token set (Consul used the anonymous token)"
	case e.AccessorID == AnonymousTokenAccessorID:
		return "the anonymous token"
	case e.AccessorID != "":
		return "the token with accessor ID " + e.AccessorID
	default:
		return "the token"
	}
}

func (e *BlindError) Error() string {
	return fmt.Sprintf("blind: no declaration is visible under %q and the token may not read there: %s lacks \"key:read\" on %q, and Consul answers such a listing with nothing",
		e.Prefix, e.Token(), e.Prefix)
}

func (e *BlindError) Unwrap() error { return e.Err }

var deniedAccessor = regexp.MustCompile(`token with AccessorID '([^']+)'`)

// CheckListable checks, in one request, that the caller's token may read
// the keys under prefix: nil when Consul lets it (or ACLs are off), a
// *BlindError when Consul denies it, another classified error when Consul
// could not answer. It reads the key named prefix itself: Consul refuses a
// single-key read without key:read with HTTP 403 naming the token's
// accessor, where it answers a listing with nothing. Call it when a
// listing came back empty or filtered.
func (c *Client) CheckListable(ctx context.Context, prefix string) error {
	_, _, err := c.KV().Get(prefix, (&api.QueryOptions{}).WithContext(ctx))
	if err == nil {
		return nil
	}
	e := Classify("read "+prefix, err)
	if e.Kind != KindPermissionDenied {
		return c.Wrap("read "+prefix, err)
	}
	b := &BlindError{Prefix: prefix, NoToken: c.token == tokenAbsent, Err: e}
	if m := deniedAccessor.FindStringSubmatch(e.Message); m != nil {
		b.AccessorID = m[1]
	}
	return b
}

// IsBlind reports whether err is a *BlindError and returns it.
func IsBlind(err error) (*BlindError, bool) {
	var b *BlindError
	ok := errors.As(err, &b)
	return b, ok
}
