package consul

import (
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in, scheme, hostport, errPart string
	}{
		{in: "127.0.0.1:8500", hostport: "127.0.0.1:8500"},
		{in: "consul.service:8501", hostport: "consul.service:8501"},
		{in: "https://consul.example.com:8501", scheme: "https", hostport: "consul.example.com:8501"},
		{in: "http://10.0.0.1", scheme: "http", hostport: "10.0.0.1:8500"},
		{in: "https://10.0.0.1", scheme: "https", hostport: "10.0.0.1:8501"},
		{in: "localhost", hostport: "localhost:8500"},
		{in: "[::1]:8500", hostport: "[::1]:8500"},
		{in: "", errPart: "empty"},
		{in: "ftp://x:1", errPart: `scheme "ftp"`},
		{in: "https://x:1/v1/kv", errPart: "must not contain a path"},
		{in: "host:99999", errPart: "port"},
		{in: "host:abc", errPart: "port"},
		{in: "bad host:1", errPart: "no valid host"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			scheme, hostport, err := ParseAddress(tt.in)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("ParseAddress(%q) error = %v, want it to mention %q", tt.in, err, tt.errPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tt.in, err)
			}
			if scheme != tt.scheme || hostport != tt.hostport {
				t.Fatalf("ParseAddress(%q) = %q, %q; want %q, %q", tt.in, scheme, hostport, tt.scheme, tt.hostport)
			}
		})
	}
}

func TestSettingsFromEnv(t *testing.T) {
	t.Setenv(EnvAddress, "consul:8501")
	t.Setenv(EnvSSL, "true")
	t.Setenv(EnvSSLVerify, "false")
	t.Setenv(EnvToken, "from-env")
	t.Setenv(EnvNamespace, "ns1")
	s, err := SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s.Address != "consul:8501" || s.Scheme != "https" || !s.InsecureSkipVerify || s.Token != "from-env" || s.Namespace != "ns1" {
		t.Fatalf("unexpected settings %+v", s)
	}
	t.Setenv(EnvSSL, "maybe")
	if _, err := SettingsFromEnv(); err == nil || !strings.Contains(err.Error(), EnvSSL) {
		t.Fatalf("want error naming %s, got %v", EnvSSL, err)
	}
}

func TestNewRejectsSchemeConflict(t *testing.T) {
	_, err := New(Settings{Address: "https://x:8501", Scheme: "http"})
	if err == nil || !strings.Contains(err.Error(), "make them agree") {
		t.Fatalf("want scheme conflict error, got %v", err)
	}
}

func TestNewReportsUnreadableTokenFile(t *testing.T) {
	_, err := New(Settings{Address: "x:1", TokenFile: "/nonexistent/token"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/token") {
		t.Fatalf("want error naming the token file, got %v", err)
	}
}
