// Command terraform-provider-consullock serves the consullock provider, and
// runs consullock's other programs when called with their name.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/provider"
	"github.com/consullock/terraform-provider-consullock/internal/runner"
	"github.com/consullock/terraform-provider-consullock/internal/status"
)

// version is set by the release build (goreleaser) with -ldflags.
var version = "dev"

// commands are the programs in this binary besides the provider. Only
// programs that work are listed here.
var commands = map[string]func(ctx context.Context, args []string) int{
	"controller": controller.Main,
	"run":        runner.Main,
	"status":     status.Main,
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stderr))
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, ok := commands[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "consullock: unknown command %q\n\n", args[0])
			usage(stderr)
			return 2
		}
		return cmd(ctx, args[1:])
	}
	return serve(ctx, args, stderr)
}

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	flags := flag.NewFlagSet("consullock", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() { usage(stderr) }
	debug := flags.Bool("debug", false, "start the provider in debug mode for a debugger (prints TF_REATTACH_PROVIDERS)")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Println(version)
		return 0
	}
	for _, name := range quietLogEnv(os.Environ()) {
		_ = os.Setenv(name, "OFF")
	}
	err := providerserver.Serve(ctx, provider.New(version), providerserver.ServeOpts{
		Address:         "registry.terraform.io/consullock/consullock",
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	// The CLI shut the provider down: end any ephemeral lock or token it
	// did not close (OpenTofu skips Close after a failure or an
	// interrupt). It kills a provider that has not exited after 2s.
	provider.CloseUnclosed(1500 * time.Millisecond)
	if err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// providerLogEnv is the provider's own log level variable, derived by
// terraform-plugin-go from the provider address.
const providerLogEnv = "TF_LOG_PROVIDER_CONSULLOCK"

// quietLogEnv returns the log level variables to set to OFF before serving.
// Unless told otherwise by the environment, the plugin SDKs log every RPC at
// trace level, JSON-encoded to stderr, and the CLI throws it all away when
// the user did not set TF_LOG: a third of the provider's CPU during a plan.
// When the user asked for any provider or SDK log, nothing is changed, so
// everything is logged as before.
func quietLogEnv(environ []string) []string {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value == "" || name == "TF_LOG_PATH" || name == "TF_LOG_SDK_PROTO_DATA_DIR" || name == "TF_LOG_CORE" {
			continue
		}
		if name == "TF_LOG" || strings.HasPrefix(name, "TF_LOG_PROVIDER") || strings.HasPrefix(name, "TF_LOG_SDK") {
			return nil
		}
	}
	return []string{"TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK", "TF_LOG_PROVIDER", providerLogEnv}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage:
  consullock [-debug]        serve the Terraform/OpenTofu provider (what Terraform runs)
  consullock -version        print the version
`)
	for name := range commands {
		fmt.Fprintf(w, "  consullock %s ...\n", name)
	}
}
