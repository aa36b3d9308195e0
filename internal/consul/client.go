package consul

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
)

// Client is a Consul API client plus what consullock needs around it.
type Client struct {
	*api.Client
	// Address is host:port as dialled, for error messages.
	Address string
	// Scheme is http or https.
	Scheme string
	// Datacenter, Namespace and Partition as configured ("" = agent's).
	Datacenter, Namespace, Partition string

	requests atomic.Uint64
	http     *http.Client
	token    tokenKnowledge
	// certAsked is set when an HTTPS agent asked this client, which has
	// no client certificate, for one: Consul asks only when it requires
	// one (verify_incoming), and then the connection fails.
	certAsked atomic.Bool
}

// tokenKnowledge is what a client knows of the token its requests carry,
// which decides how a 403 "ACL not found" is read (Client.Classify).
type tokenKnowledge uint8

const (
	// tokenUnknown: the caller built the *api.Client (FromAPI), which does
	// not tell its token. The zero value, so that a Client built as a
	// literal is never taken for one without a token.
	tokenUnknown tokenKnowledge = iota
	// tokenAbsent: no token; Consul uses the anonymous token, which
	// /v1/acl/token/self cannot read (403 "ACL not found") although it is
	// valid.
	tokenAbsent
	// tokenPresent: a token is sent.
	tokenPresent
)

// requestsTotal counts HTTP requests sent to Consul by every client of this
// process; benchmarks read it to report requests per resource.
var requestsTotal atomic.Uint64

// RequestsSent returns the number of HTTP attempts sent by all clients.
func RequestsSent() uint64 { return requestsTotal.Load() }

// Requests returns the number of HTTP attempts this client has sent.
func (c *Client) Requests() uint64 { return c.requests.Load() }

// New builds a client from fully resolved settings (the caller has already
// applied attribute > environment > default). It does not contact Consul.
func New(s Settings) (*Client, error) {
	scheme, hostport, err := resolveScheme(s)
	if err != nil {
		return nil, err
	}
	token, err := resolveToken(s)
	if err != nil {
		return nil, err
	}
	c := &Client{Address: hostport, Scheme: scheme, Datacenter: s.Datacenter, Namespace: s.Namespace, Partition: s.Partition, token: tokenAbsent}
	if token != "" {
		c.token = tokenPresent
	}
	transport, err := newTransport(s, scheme, &c.certAsked)
	if err != nil {
		return nil, err
	}

	retry := s.Retry.withDefaults()
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: &countingTransport{next: transport, client: c, token: token}}
	rc.Logger = nil // requests carry tokens in headers; never log them
	rc.RetryMax = retry.MaxAttempts - 1
	rc.RetryWaitMin = retry.MinWait
	rc.RetryWaitMax = retry.MaxWait
	rc.CheckRetry = retryPolicy(retry)
	rc.Backoff = backoff
	// Hand the last response to the Consul api so it reports Consul's own
	// error text, not "giving up after N attempts".
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler

	headers := make(http.Header)
	for k, v := range s.Headers {
		headers.Set(k, v)
	}
	c.http = &http.Client{Transport: &startTransport{next: &retryablehttp.RoundTripper{Client: rc}}}
	apiClient, err := api.NewClient(&api.Config{
		Address:    hostport,
		Scheme:     scheme,
		Datacenter: s.Datacenter,
		Namespace:  s.Namespace,
		Partition:  s.Partition,
		Token:      token,
		HttpClient: c.http,
	})
	if err != nil {
		return nil, err
	}
	apiClient.SetHeaders(headers)
	c.Client = apiClient
	return c, nil
}

// FromAPI wraps a client its caller built, whose token (if any) it cannot
// see: a 403 "ACL not found" is then read with /v1/acl/token/self, and an
// unknown token and no token at all are the same invalid-token error. The
// caller's client keeps its own transport: Address, Scheme and HTTPClient
// are empty and Requests does not count.
func FromAPI(client *api.Client) *Client {
	return &Client{Client: client, token: tokenUnknown}
}

// resolveScheme reads the scheme from the address and the scheme
// setting, which must agree; http when neither says.
func resolveScheme(s Settings) (scheme, hostport string, err error) {
	scheme, hostport, err = ParseAddress(s.Address)
	if err != nil {
		return "", "", err
	}
	if s.Scheme != "" {
		if scheme != "" && scheme != s.Scheme {
			return "", "", fmt.Errorf("address %q says %s but scheme is %q; make them agree", s.Address, scheme, s.Scheme)
		}
		scheme = s.Scheme
	}
	if scheme == "" {
		scheme = "http"
	}
	return scheme, hostport, nil
}

// resolveToken is the token, read from the token file when one is set.
func resolveToken(s Settings) (string, error) {
	if s.TokenFile == "" {
		return s.Token, nil
	}
	data, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading token file %s: %w", s.TokenFile, err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("token file %s is empty", s.TokenFile)
	}
	return token, nil
}

// newTransport is a pooled transport with TLS 1.2 or later for https.
func newTransport(s Settings, scheme string, certAsked *atomic.Bool) (*http.Transport, error) {
	transport := cleanhttp.DefaultPooledTransport()
	transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if scheme != "https" {
		return transport, nil
	}
	tlsConf, err := api.SetupTLSConfig(&api.TLSConfig{
		Address:            s.TLSServerName,
		CAFile:             s.CAFile,
		CAPem:              []byte(s.CAPEM),
		CertFile:           s.CertFile,
		CertPEM:            []byte(s.CertPEM),
		KeyFile:            s.KeyFile,
		KeyPEM:             []byte(s.KeyPEM),
		InsecureSkipVerify: s.InsecureSkipVerify,
	})
	if err != nil {
		return nil, fmt.Errorf("TLS configuration: %w", err)
	}
	tlsConf.MinVersion = tls.VersionTLS12
	if len(tlsConf.Certificates) == 0 && tlsConf.GetClientCertificate == nil {
		// With TLS 1.3 the agent's refusal ("certificate required") comes
		// after the handshake, and a request written meanwhile may only see
		// a broken pipe: remember the request for a certificate, so that
		// the error can say what is missing. None is sent, as without this.
		tlsConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			certAsked.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	transport.TLSClientConfig = tlsConf
	return transport, nil
}

// HTTPClient is the client's HTTP client (the token pinned, TLS and retries
// as configured), for a request whose body the caller decodes itself: the
// controller's lock key watches, which decode only the keys that changed.
func (c *Client) HTTPClient() *http.Client { return c.http }

// startTransport stamps the time of the first attempt, and whether the
// request may be sent again after it reached Consul, into the context.
type startTransport struct{ next http.RoundTripper }

func (t *startTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := withReplaySafety(withStart(req.Context()), replaySafe(req))
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil && resp != nil {
		// go-retryablehttp returns the last response with the retry
		// policy's error (a context cancelled as the answer came), and
		// net/http would print "RoundTripper returned a response & error"
		// on the process's stderr: the error is the answer.
		_ = resp.Body.Close()
		return nil, err
	}
	return resp, err
}

// countingTransport counts attempts and pins the resolved token: the Consul
// api falls back to CONSUL_HTTP_TOKEN(_FILE) on its own, which would break
// "attribute > environment" precedence.
type countingTransport struct {
	next   http.RoundTripper
	client *Client
	token  string
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.client.requests.Add(1)
	requestsTotal.Add(1)
	req = req.Clone(req.Context())
	if t.token != "" {
		req.Header.Set("X-Consul-Token", t.token)
	} else {
		req.Header.Del("X-Consul-Token")
	}
	return t.next.RoundTrip(req)
}

// Ping checks that the agent answers and, when ACLs are on, that the
// caller's token is valid, in one request: the token check needs an answer
// from the agent too. It is called once when the provider is configured,
// never per operation.
func (c *Client) Ping(ctx context.Context) error {
	if c.token == tokenPresent {
		err := c.CheckToken(ctx)
		if err == nil || KindOf(err) == KindInvalidToken {
			return err
		}
		var e *Error
		if errors.As(err, &e) {
			err = e.Err
		}
		return c.Wrap("reach Consul", err)
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	if _, err := c.Status().LeaderWithQueryOptions(q); err != nil {
		return c.Wrap("reach Consul", err)
	}
	return nil
}
