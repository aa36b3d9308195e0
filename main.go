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
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

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
	return serve(args, stderr)
}

func serve(args []string, stderr io.Writer) int {
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
	quiet := provider.QuietLogEnv(os.Environ())
	for _, name := range quiet {
		_ = os.Setenv(name, "OFF")
	}
	framework := providerserver.NewProtocol6(provider.New(version)())
	server := framework
	if len(quiet) > 0 {
		server = func() tfprotov6.ProviderServer { return provider.QuietServer(framework()) }
	}
	var opts []tf6server.ServeOpt
	if *debug {
		opts = append(opts, tf6server.WithManagedDebug())
	}
	err := tf6server.Serve("registry.terraform.io/consullock/consullock", server, opts...)
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

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage:
  consullock [-debug]        serve the Terraform/OpenTofu provider (what Terraform runs)
  consullock -version        print the version
`)
	for name := range commands {
		fmt.Fprintf(w, "  consullock %s ...\n", name)
	}
}
