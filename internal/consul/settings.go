// Package consul builds Consul API clients from provider-style settings,
// retries the way Consul needs, and classifies Consul's errors so that
// callers never confuse "the object is gone" with "our token is bad".
package consul

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables shared with the Consul CLI.
const (
	EnvAddress       = "CONSUL_HTTP_ADDR"
	EnvToken         = "CONSUL_HTTP_TOKEN"
	EnvTokenFile     = "CONSUL_HTTP_TOKEN_FILE"
	EnvSSL           = "CONSUL_HTTP_SSL"
	EnvSSLVerify     = "CONSUL_HTTP_SSL_VERIFY"
	EnvCACert        = "CONSUL_CACERT"
	EnvClientCert    = "CONSUL_CLIENT_CERT"
	EnvClientKey     = "CONSUL_CLIENT_KEY"
	EnvTLSServerName = "CONSUL_TLS_SERVER_NAME"
	EnvNamespace     = "CONSUL_NAMESPACE"
	EnvPartition     = "CONSUL_PARTITION"
	EnvDatacenter    = "CONSUL_DATACENTER"
)

// DefaultAddress is the Consul CLI's default agent address.
const DefaultAddress = "127.0.0.1:8500"

// Settings is everything needed to talk to Consul. Zero values mean "not set".
type Settings struct {
	Address            string // host:port, or scheme://host:port
	Scheme             string // http or https
	Token              string
	TokenFile          string
	Datacenter         string
	Namespace          string
	Partition          string
	CAFile             string
	CAPEM              string
	CertFile           string
	CertPEM            string
	KeyFile            string
	KeyPEM             string
	TLSServerName      string
	InsecureSkipVerify bool
	Headers            map[string]string
	Retry              RetrySettings
}

// SettingsFromEnv reads the Consul CLI's environment variables. Malformed
// boolean variables are reported rather than silently ignored.
func SettingsFromEnv() (Settings, error) {
	s := Settings{
		Address:       os.Getenv(EnvAddress),
		Token:         os.Getenv(EnvToken),
		TokenFile:     os.Getenv(EnvTokenFile),
		CAFile:        os.Getenv(EnvCACert),
		CertFile:      os.Getenv(EnvClientCert),
		KeyFile:       os.Getenv(EnvClientKey),
		TLSServerName: os.Getenv(EnvTLSServerName),
		Namespace:     os.Getenv(EnvNamespace),
		Partition:     os.Getenv(EnvPartition),
		Datacenter:    os.Getenv(EnvDatacenter),
	}
	if v := os.Getenv(EnvSSL); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%s: %q is not a boolean", EnvSSL, v)
		}
		if on {
			s.Scheme = "https"
		}
	}
	if v := os.Getenv(EnvSSLVerify); v != "" {
		verify, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%s: %q is not a boolean", EnvSSLVerify, v)
		}
		s.InsecureSkipVerify = !verify
	}
	return s, nil
}

// ParseAddress splits "host:port", "http://host:port" or "https://host:port"
// into a scheme ("" when none was given) and host:port. A missing port means
// Consul's 8500 for http and 8501 for https, like the CLI.
func ParseAddress(addr string) (scheme, hostport string, err error) {
	raw := strings.TrimSpace(addr)
	if raw == "" {
		return "", "", fmt.Errorf("address is empty; use host:port or https://host:port")
	}
	if strings.Contains(raw, "://") {
		u, perr := url.Parse(raw)
		if perr != nil {
			return "", "", fmt.Errorf("%q is not a valid address: %w; use host:port or https://host:port", addr, perr)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", "", fmt.Errorf("%q has scheme %q; use http:// or https://", addr, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return "", "", fmt.Errorf("%q must not contain a path, query or user info; use host:port or https://host:port", addr)
		}
		scheme, raw = u.Scheme, u.Host
	}
	host, port, splitErr := net.SplitHostPort(raw)
	if splitErr != nil {
		// No port: take the scheme's default, as the Consul CLI does.
		host, port = raw, "8500"
		if scheme == "https" {
			port = "8501"
		}
	}
	if host == "" || strings.ContainsAny(host, " /\t\n") {
		return "", "", fmt.Errorf("%q has no valid host; use host:port or https://host:port", addr)
	}
	n, perr := strconv.Atoi(port)
	if perr != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("%q has port %q; use a port from 1 to 65535", addr, port)
	}
	return scheme, net.JoinHostPort(host, port), nil
}

// RetrySettings bounds retries of transient failures.
type RetrySettings struct {
	MaxAttempts int           // total attempts including the first; 1 disables retries
	MinWait     time.Duration // first backoff
	MaxWait     time.Duration // cap of one backoff
	MaxElapsed  time.Duration // no retry starts after this much time since the first attempt
}

// DefaultRetry is generous enough to ride out a leader election or an agent
// restart, and short enough that a wrong address fails a plan quickly.
var DefaultRetry = RetrySettings{
	MaxAttempts: 5,
	MinWait:     250 * time.Millisecond,
	MaxWait:     4 * time.Second,
	MaxElapsed:  30 * time.Second,
}

func (r RetrySettings) withDefaults() RetrySettings {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultRetry.MaxAttempts
	}
	if r.MinWait <= 0 {
		r.MinWait = DefaultRetry.MinWait
	}
	if r.MaxWait <= 0 {
		r.MaxWait = DefaultRetry.MaxWait
	}
	if r.MaxWait < r.MinWait {
		r.MaxWait = r.MinWait
	}
	if r.MaxElapsed <= 0 {
		r.MaxElapsed = DefaultRetry.MaxElapsed
	}
	return r
}
