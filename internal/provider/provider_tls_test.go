package provider

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestAccProvider_tls talks to a second real agent that serves the API over
// mutual TLS, with the CA and the client certificate given as files, as PEM
// and through the CONSUL_* variables, and checks that a wrong CA and a
// missing client certificate are refused.
func TestAccProvider_tls(t *testing.T) {
	tlsAgent, err := testenv.Start(context.Background(), testenv.Options{TLS: true, NodeName: "consullock-tls"})
	if err != nil {
		t.Fatal(err)
	}
	defer tlsAgent.Stop()
	caPEM, err := os.ReadFile(tlsAgent.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(tlsAgent.ClientCertFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(tlsAgent.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientFiles := fmt.Sprintf("\ncert_file = %q\nkey_file = %q", tlsAgent.ClientCertFile, tlsAgent.ClientKeyFile)
	addr := "https://" + tlsAgent.HTTPSAddr
	token := tlsAgent.ManagementToken
	exists := []statecheck.StateCheck{
		statecheck.ExpectKnownValue("data.consullock_lock.probe", tfjsonpath.New("exists"), knownvalue.Bool(false)),
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            probeConfig(fmt.Sprintf("address = %q\ntoken = %q\nca_file = %q", addr, token, tlsAgent.CAFile)+clientFiles, "tls/.lock"),
				ConfigStateChecks: exists,
			},
			{
				Config:            probeConfig(fmt.Sprintf("address = %q\ntoken = %q\nca_pem = %q\ncert_pem = %q\nkey_pem = %q", addr, token, caPEM, certPEM, keyPEM), "tls/.lock"),
				ConfigStateChecks: exists,
			},
			{
				// host:port plus scheme, CA from the environment.
				PreConfig: func() {
					t.Setenv("CONSUL_CACERT", tlsAgent.CAFile)
					t.Setenv("CONSUL_CLIENT_CERT", tlsAgent.ClientCertFile)
					t.Setenv("CONSUL_CLIENT_KEY", tlsAgent.ClientKeyFile)
				},
				Config:            probeConfig(fmt.Sprintf("address = %q\nscheme = \"https\"\ntoken = %q", tlsAgent.HTTPSAddr, token), "tls/.lock"),
				ConfigStateChecks: exists,
			},
			{
				// Without the agent's CA the system roots do not trust it: a CA
				// mismatch fails at once instead of being retried.
				PreConfig:   func() { t.Setenv("CONSUL_CACERT", "") },
				Config:      probeConfig(fmt.Sprintf("address = %q\ntoken = %q", addr, token)+clientFiles, "tls/.lock"),
				ExpectError: regexp.MustCompile(`(?s)Cannot Reach Consul.*(certificate|x509)`),
			},
			{
				// verify_incoming is on: no client certificate, no connection,
				// and the error says which setting is missing (whether the
				// request saw the agent's refusal or only a broken pipe).
				PreConfig: func() {
					t.Setenv("CONSUL_CLIENT_CERT", "")
					t.Setenv("CONSUL_CLIENT_KEY", "")
				},
				Config:      probeConfig(fmt.Sprintf("address = %q\ntoken = %q\nca_file = %q", addr, token, tlsAgent.CAFile), "tls/.lock"),
				ExpectError: regexp.MustCompile(`(?s)Cannot Reach Consul.*asked\s+for\s+a\s+client\s+certificate.*cert_file\s+and\s+key_file`),
			},
			{
				Config:            probeConfig(fmt.Sprintf("address = %q\ntoken = %q\ninsecure_skip_verify = true", addr, token)+clientFiles, "tls/.lock"),
				ConfigStateChecks: exists,
			},
		},
	})
}
