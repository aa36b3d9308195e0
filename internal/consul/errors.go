package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	"github.com/hashicorp/consul/api"
)

// Kind is what an error means for the caller's next step.
type Kind int

const (
	// KindUnknown is anything not classified below; treat it as fatal.
	KindUnknown Kind = iota
	// KindNotFound: the object does not exist (decided for certain).
	KindNotFound
	// KindPermissionDenied: the token is valid but lacks a permission.
	KindPermissionDenied
	// KindInvalidToken: the caller's own token is unknown or expired.
	KindInvalidToken
	// KindValidation: Consul rejected the input; retrying cannot help.
	KindValidation
	// KindTransient: connection trouble, no leader, overload; retry later.
	KindTransient

	// The kinds below say why Consul refused a lock or a check-and-set
	// (TxnError; KindSessionInvalid also from Classify).

	// KindHeld: the key is held by another session (a lock or unlock op),
	// or not by the session a check-session op named (also when the key
	// is gone).
	KindHeld
	// KindLockDelay: the key is in the lock-delay that followed its
	// holder's session; a lock op succeeds once it has passed.
	KindLockDelay
	// KindStaleIndex: the key is not at the index the op expected (a
	// check-and-set, index check or create-only check lost).
	KindStaleIndex
	// KindSessionInvalid: the session no longer exists.
	KindSessionInvalid
)

func (k Kind) String() string {
	switch k {
	case KindNotFound:
		return "not found"
	case KindPermissionDenied:
		return "permission denied"
	case KindInvalidToken:
		return "invalid or expired token"
	case KindValidation:
		return "invalid input"
	case KindTransient:
		return "transient"
	case KindHeld:
		return "held by another session"
	case KindLockDelay:
		return "in lock-delay"
	case KindStaleIndex:
		return "stale index"
	case KindSessionInvalid:
		return "invalid session"
	default:
		return "unknown"
	}
}

// Error is a classified Consul error.
type Error struct {
	Kind       Kind
	Op         string // what we were doing, e.g. "read lock key jobs/a/.lock"
	StatusCode int    // 0 for transport errors
	Message    string // Consul's text
	// Permission and Resource are set for KindPermissionDenied, as Consul
	// reported them (e.g. "key:write" on "jobs/a/.lock").
	Permission, Resource string
	// TokenUnknown is set for KindInvalidToken when the client could not
	// see its token (FromAPI): Consul answers an unknown token and no
	// token alike there, so the message cannot say "expired".
	TokenUnknown bool
	Err          error
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindPermissionDenied:
		if e.Permission != "" {
			return fmt.Sprintf("%s: permission denied: the token lacks %q on %q (HTTP %d)", e.Op, e.Permission, e.Resource, e.StatusCode)
		}
	case KindInvalidToken:
		if e.TokenUnknown {
			return fmt.Sprintf("%s: the token is invalid or none was given (HTTP %d %s)", e.Op, e.StatusCode, e.Message)
		}
		return fmt.Sprintf("%s: the Consul token is invalid or expired (HTTP %d %s)", e.Op, e.StatusCode, e.Message)
	}
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s: %s (HTTP %d %s)", e.Op, e.Kind, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s: %s: %s", e.Op, e.Kind, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, &Error{Kind: KindNotFound}) match by kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrNotFound         = &Error{Kind: KindNotFound}
	ErrPermissionDenied = &Error{Kind: KindPermissionDenied}
	ErrInvalidToken     = &Error{Kind: KindInvalidToken}
	ErrValidation       = &Error{Kind: KindValidation}
	ErrTransient        = &Error{Kind: KindTransient}
)

// KindOf returns the kind of a classified error, or classifies it.
func KindOf(err error) Kind {
	if err == nil {
		return KindUnknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Classify("", err).Kind
}

var lacksPermission = regexp.MustCompile(`lacks permission '([^']+)'(?: on "([^"]*)")?`)

// aclNotFound is Consul's answer both for a missing ACL object and for an
// unknown caller token; only /v1/acl/token/self can tell them apart.
const aclNotFound = "ACL not found"

// Classify turns an error from the Consul api into an *Error without further
// requests. A 403 "ACL not found" is classified as KindInvalidToken here;
// callers that read ACL objects use Client.Classify, which asks Consul.
func Classify(op string, err error) *Error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return already
	}
	out := &Error{Op: op, Err: err, Kind: KindUnknown}
	var se api.StatusError
	if !errors.As(err, &se) {
		// The api reports some statuses only as text.
		if code, body, ok := parseStatusText(err.Error()); ok {
			se = api.StatusError{Code: code, Body: body}
		} else {
			out.Message = err.Error()
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return out
			}
			if isNetworkError(err) && isTransientTransportError(err) {
				out.Kind = KindTransient
			}
			return out
		}
	}
	out.StatusCode = se.Code
	out.Message = strings.TrimSpace(se.Body)
	switch {
	case se.Code == http.StatusNotFound:
		out.Kind = KindNotFound
	case se.Code == http.StatusForbidden && strings.Contains(se.Body, aclNotFound):
		out.Kind = KindInvalidToken
	case se.Code == http.StatusForbidden || se.Code == http.StatusUnauthorized:
		out.Kind = KindPermissionDenied
		if m := lacksPermission.FindStringSubmatch(se.Body); m != nil {
			out.Permission, out.Resource = m[1], m[2]
		}
	case se.Code == http.StatusBadRequest || se.Code == http.StatusConflict || se.Code == http.StatusRequestEntityTooLarge:
		out.Kind = KindValidation
	case se.Code == http.StatusInternalServerError && txnOpKind(se.Body) == KindSessionInvalid:
		// "raft apply failed: invalid session": an acquire's words.
		out.Kind = KindSessionInvalid
	case se.Code == http.StatusInternalServerError:
		if isTransientServerError(se.Body) {
			out.Kind = KindTransient
		} else {
			out.Kind = KindValidation
		}
	case se.Code == http.StatusTooManyRequests || se.Code >= 502 && se.Code <= 504:
		out.Kind = KindTransient
	}
	return out
}

// isNetworkError reports errors of the connection itself, as opposed to,
// say, a response that did not decode.
func isNetworkError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

var (
	// statusText is the api's error for an answer but 200; some calls
	// (Session().Renew) leave Consul's answer out.
	statusText = regexp.MustCompile(`^Unexpected response code: (\d{3})(?: \((.*)\))?$`)
	// failedTxnText is how api.KV.Txn reports any answer but 200 and 409:
	// the body without its status. A read-only transaction cannot go
	// through writeTxn (only KV.Txn sends ?consistent), so the status is
	// recovered from the bodies Consul sends only with 403.
	failedTxnText = regexp.MustCompile(`^Failed request: ((?:` + aclNotFound + `|Permission denied).*)$`)
)

func parseStatusText(s string) (int, string, bool) {
	if m := failedTxnText.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
		return http.StatusForbidden, m[1], true
	}
	m := statusText.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, "", false
	}
	var code int
	_, _ = fmt.Sscanf(m[1], "%d", &code)
	return code, m[2], true
}

// Classify classifies err and, for Consul's ambiguous 403 "ACL not found",
// asks /v1/acl/token/self whether the caller's token is valid: if it is, the
// object is gone (KindNotFound); if not, the token is (KindInvalidToken). A
// failure of that check itself is returned as it is, never as not-found, so
// that no caller drops state on a guess. A client that cannot see its token
// (FromAPI) asks too, and an answer of "ACL not found" there means an
// invalid token or none (the anonymous token cannot read itself either).
func (c *Client) Classify(ctx context.Context, op string, err error) *Error {
	e := Classify(op, err)
	if e == nil || e.Kind != KindInvalidToken {
		return e
	}
	selfErr := c.CheckToken(ctx)
	if selfErr == nil {
		e.Kind = KindNotFound
		return e
	}
	if se := Classify(op, selfErr); se.Kind != KindInvalidToken {
		se.Op = op + " (while checking the token after HTTP 403 " + aclNotFound + ")"
		return se
	}
	e.TokenUnknown = c.token == tokenUnknown
	return e
}

// CheckToken returns nil when the caller's token is valid (or ACLs are off).
// Without a token it is nil. When the client cannot see its token (FromAPI)
// it asks as with one, and no token at all is then reported as invalid.
func (c *Client) CheckToken(ctx context.Context) error {
	if c.token == tokenAbsent {
		return nil
	}
	_, _, err := c.ACL().TokenReadSelf((&api.QueryOptions{}).WithContext(ctx))
	if err != nil && strings.Contains(err.Error(), "ACL support disabled") {
		return nil
	}
	if err != nil {
		e := Classify("check the Consul token", err)
		e.TokenUnknown = e.Kind == KindInvalidToken && c.token == tokenUnknown
		return e
	}
	return nil
}

// Wrap classifies err with op and names the address on transport errors.
func (c *Client) Wrap(op string, err error) error {
	e := Classify(op, err)
	if e.StatusCode == 0 && c.Address != "" {
		e.Op = fmt.Sprintf("%s at %s://%s", op, c.Scheme, c.Address)
		if c.certAsked.Load() {
			e.Message += "; the agent asked for a client certificate and none is configured (Consul asks when verify_incoming " +
				"is on, and then refuses the connection without one): set a client certificate and key (cert_file and key_file, " +
				"or CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY)"
		}
	}
	return e
}
