package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is the one real Consul agent (ACLs on, default deny) shared by the
// tests of this package; each test works under its own key prefix.
var agent *testenv.Agent

// testAccProtoV6ProviderFactories runs the provider in-process for
// terraform-plugin-testing, which drives the real OpenTofu from bin/. It is
// served as the binary serves it: through QuietServer unless the test asks
// for logs, so that the acceptance tests run through that path too.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"consullock": func() (tfprotov6.ProviderServer, error) {
		server := providerserver.NewProtocol6(New("test")())()
		if len(QuietLogEnv(os.Environ())) > 0 {
			server = QuietServer(server)
		}
		return server, nil
	},
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if err := setupAcceptanceEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "acceptance environment:", err)
		return 1
	}
	var err error
	agent, err = testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting consul:", err)
		return 1
	}
	defer agent.Stop()
	// The provider reads the Consul CLI's variables, like users' shells do.
	os.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	os.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
	return m.Run()
}

// testAccProviderSource is the provider's full source address as the
// testing framework declares it: TF_ACC_PROVIDER_HOST is OpenTofu's
// registry by default and Terraform's when make test-compat runs Terraform.
func testAccProviderSource() string {
	return os.Getenv("TF_ACC_PROVIDER_HOST") + "/" + os.Getenv("TF_ACC_PROVIDER_NAMESPACE") + "/consullock"
}

// setupAcceptanceEnv points terraform-plugin-testing at the real OpenTofu.
// Acceptance tests in this package always run: a skipped acceptance test
// would pass without proving anything.
func setupAcceptanceEnv() error {
	tofu, err := testenv.ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		return err
	}
	emptyCLIConfig := filepath.Join(os.TempDir(), "consullock-empty.tfrc")
	if err := os.WriteFile(emptyCLIConfig, nil, 0o600); err != nil {
		return err
	}
	for k, v := range map[string]string{
		"TF_ACC":                    "1",
		"TF_ACC_TERRAFORM_PATH":     tofu,
		"TF_ACC_PROVIDER_HOST":      "registry.opentofu.org",
		"TF_ACC_PROVIDER_NAMESPACE": "consullock",
		"TF_CLI_CONFIG_FILE":        emptyCLIConfig,
		"CHECKPOINT_DISABLE":        "1",
	} {
		if os.Getenv(k) == "" || k == "TF_ACC" || k == "TF_ACC_TERRAFORM_PATH" {
			os.Setenv(k, v)
		}
	}
	// A CLI config variable naming a missing file makes every tofu run
	// print a warning; fall back to the empty one.
	if _, err := os.Stat(os.Getenv("TF_CLI_CONFIG_FILE")); err != nil {
		os.Setenv("TF_CLI_CONFIG_FILE", emptyCLIConfig)
	}
	return nil
}
