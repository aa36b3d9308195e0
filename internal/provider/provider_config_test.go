package provider

import (
	"fmt"
	"net"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// probeConfig configures the provider with providerBody and makes it talk to
// Consul through the lock data source.
func probeConfig(providerBody, key string) string {
	return fmt.Sprintf(`
provider "consullock" {
%s
}

data "consullock_lock" "probe" {
  key = %q
}
`, providerBody, key)
}

func TestAccProvider_configuresAgainstRealAgent(t *testing.T) {
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// Settings from the environment (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN).
				Config: probeConfig("", key),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.consullock_lock.probe", tfjsonpath.New("exists"), knownvalue.Bool(false)),
				},
			},
			{
				// Explicit attributes win over the environment.
				Config: probeConfig(fmt.Sprintf("address = %q\ntoken = %q\nscheme = \"http\"", "http://"+agent.Addr, agent.ManagementToken), key),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.consullock_lock.probe", tfjsonpath.New("exists"), knownvalue.Bool(false)),
				},
			},
		},
	})
}

func TestAccProvider_unreachableAddressFailsWithinRetryBound(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: probeConfig(fmt.Sprintf(`address = %q
retry = {
  max_attempts = 3
  min_wait     = "10ms"
  max_wait     = "50ms"
  max_elapsed  = "2s"
}`, closed), "x/.lock"),
			ExpectError: regexp.MustCompile(`(?s)Cannot Reach Consul.*` + regexp.QuoteMeta(closed)),
		}},
	})
}

func TestAccProvider_badTokenIsReportedAsInvalid(t *testing.T) {
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      probeConfig(fmt.Sprintf("token = %q", testenv.NewUUID()), "x/.lock"),
			ExpectError: regexp.MustCompile(`(?s)Invalid Consul Token.*invalid or\s+expired`),
		}},
	})
}

func TestAccProvider_badConfigurationNamesTheAttribute(t *testing.T) {
	tests := []struct {
		name, body string
		want       *regexp.Regexp
	}{
		{"bad address", `address = "ftp://consul:8500"`, regexp.MustCompile(`(?s)Invalid Consul Address.*address.*use http:// or https://`)},
		{"bad port", `address = "consul:99999"`, regexp.MustCompile(`(?s)Invalid Consul Address.*port from 1 to 65535`)},
		{"bad scheme", `scheme = "gopher"`, regexp.MustCompile(`(?s)scheme.*value must be one of`)},
		{"token and token_file", `
token      = "x"
token_file = "/tmp/t"`, regexp.MustCompile(`(?s)token_file.*cannot be specified when.*token`)},
		{"unreadable ca_file", `
scheme  = "https"
ca_file = "/nonexistent/ca.pem"`, regexp.MustCompile(`(?s)Unreadable CA File.*ca_file.*/nonexistent/ca.pem`)},
		{"unreadable token_file", `token_file = "/nonexistent/token"`, regexp.MustCompile(`(?s)Unreadable Token File.*token_file.*/nonexistent/token`)},
		{"cert without key", `cert_pem = "x"`, regexp.MustCompile(`(?s)Missing Client Key`)},
		{"retry out of range", `
retry = {
  max_attempts = 0
}`, regexp.MustCompile(`(?s)retry.max_attempts.*between 1 and 20`)},
		{"bad registry prefix", `registry_prefix = "a/../b"`, regexp.MustCompile(`(?s)registry_prefix.*a/\.\./b`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      probeConfig(tt.body, "x/.lock"),
					PlanOnly:    true,
					ExpectError: tt.want,
				}},
			})
		})
	}
}

// TestAccProvider_unknownSettingIsAnErrorNamingIt: a setting that comes
// from a resource not created yet is unknown at plan. Falling back to the
// environment would plan against whatever CONSUL_HTTP_ADDR and
// CONSUL_HTTP_TOKEN name (here the same agent, so the old fallback passed
// silently); it must be an error naming the attribute.
func TestAccProvider_unknownSettingIsAnErrorNamingIt(t *testing.T) {
	tests := []struct {
		name, input, body string
		want              *regexp.Regexp
	}{
		{"address", agent.Addr, `address = terraform_data.later.output`, regexp.MustCompile(`(?s)Unknown Provider Setting.*address is not known until apply`)},
		{"token", agent.ManagementToken, `token = terraform_data.later.output`, regexp.MustCompile(`(?s)Unknown Provider Setting.*token is not known until apply`)},
		{"token_file", "/nonexistent", `token_file = terraform_data.later.output`, regexp.MustCompile(`(?s)Unknown Provider Setting.*token_file is not known until apply`)},
		{"datacenter", "dc1", `datacenter = terraform_data.later.output`, regexp.MustCompile(`(?s)Unknown Provider Setting.*datacenter is not known until apply`)},
		{"scheme", "http", `scheme = terraform_data.later.output`, regexp.MustCompile(`(?s)Unknown Provider Setting.*scheme is not known until apply`)},
		{"header", "x", `headers = { "X-Proxy-Auth" = terraform_data.later.output }`, regexp.MustCompile(`(?s)Unknown Provider Setting.*headers\["X-Proxy-Auth"\] is not known`)},
		{"retry", "2s", `retry = { max_wait = terraform_data.later.output }`, regexp.MustCompile(`(?s)Unknown Provider Setting.*retry.max_wait is not known until apply`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config: fmt.Sprintf(`
resource "terraform_data" "later" {
  input = %q
}
`, tt.input) + probeConfig(tt.body, "x/.lock"),
					ExpectError: tt.want,
				}},
			})
		})
	}
}
