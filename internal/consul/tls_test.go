package consul

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestPing_anAgentThatRequiresAClientCertificateSaysSo: a real agent with
// verify_incoming on, reached over HTTPS without a client certificate. With
// TLS 1.3 its refusal comes after the handshake, so the request may fail
// with "certificate required" or only with a broken pipe, by timing; either
// way the error says that the agent asked for a client certificate and how
// to set one. With the certificate the same client settings reach it, and
// no error of theirs carries the hint.
func TestPing_anAgentThatRequiresAClientCertificateSaysSo(t *testing.T) {
	tlsAgent, err := testenv.Start(context.Background(), testenv.Options{TLS: true, NodeName: "consullock-tls"})
	if err != nil {
		t.Fatal(err)
	}
	defer tlsAgent.Stop()
	retry := RetrySettings{MaxAttempts: 2, MinWait: 10 * time.Millisecond, MaxWait: 20 * time.Millisecond}
	without, err := New(Settings{Address: "https://" + tlsAgent.HTTPSAddr, Token: tlsAgent.ManagementToken, CAFile: tlsAgent.CAFile, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // the refusal's two shapes come by timing: each must say it
		err := without.Ping(context.Background())
		if err == nil {
			t.Fatal("Ping without a client certificate succeeded against an agent with verify_incoming on")
		}
		for _, want := range []string{"asked for a client certificate", "CONSUL_CLIENT_CERT"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("Ping without a client certificate: %v\nwant it to say %q", err, want)
			}
		}
	}
	with, err := New(Settings{Address: "https://" + tlsAgent.HTTPSAddr, Token: tlsAgent.ManagementToken, CAFile: tlsAgent.CAFile,
		CertFile: tlsAgent.ClientCertFile, KeyFile: tlsAgent.ClientKeyFile, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	if err := with.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with the client certificate: %v", err)
	}
	tlsAgent.Stop()
	if err := with.Ping(context.Background()); err == nil || strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("Ping with a client certificate to a stopped agent: %v, want a connection error without the hint", err)
	}
}
