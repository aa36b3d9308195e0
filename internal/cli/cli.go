// Package cli is the entry of the one consullock binary: it serves the
// Terraform/OpenTofu provider, or runs one of consullock's other programs
// when the first argument names it. Both mains call Main with the version
// the release build set: the module root (the provider binary,
// terraform-provider-consullock, the name the registries require) and
// cmd/consullock (the release's `consullock` and the OCI image's
// entrypoint, /ko-app/consullock). They behave identically.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/jobctl"
	"github.com/consullock/terraform-provider-consullock/internal/provider"
	"github.com/consullock/terraform-provider-consullock/internal/runner"
	"github.com/consullock/terraform-provider-consullock/internal/status"
	"github.com/consullock/terraform-provider-consullock/internal/systemdtimer"
)

// ProviderAddress is the provider's registry address, which the plugin
// server announces.
const ProviderAddress = "registry.terraform.io/consullock/consullock"

// commands are the programs in this binary besides the provider. Only
// programs that work are listed here.
var commands = map[string]func(ctx context.Context, args []string) int{
	"backfill":   runner.BackfillMain,
	"controller": controller.Main,
	"pause":      jobctl.PauseMain,
	"release":    jobctl.ReleaseMain,
	"resume":     jobctl.ResumeMain,
	"run":        runner.Main,
	"status":     status.Main,
	"timer":      systemdtimer.Main,
}

// Main runs the binary with the process's arguments and returns its exit
// code.
func Main(version string) int {
	return Run(context.Background(), version, os.Args[1:], os.Stdout, os.Stderr)
}

// Run dispatches args: a first argument that is not a flag names a
// program; otherwise the flags are the provider server's.
func Run(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == runner.GuardCommand {
		return runner.GuardMain(args[1:]) // `consullock run` started itself as its command's guard
	}
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, ok := commands[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "consullock: unknown command %q\n\n", args[0])
			usage(stderr)
			return 2
		}
		return cmd(ctx, args[1:])
	}
	return serve(version, args, stdout, stderr)
}

// serveGCPercent is the provider process's GOGC when the environment sets
// none: the heap may grow to five times what is live before a collection.
const serveGCPercent = 400

// collectLessOften sets serveGCPercent unless the user set GOGC. A provider
// process serves one CLI command and keeps little alive between requests,
// but every request decodes and re-encodes whole objects: at Go's default
// (100) a 200-lock plan spent a sixth of the provider's CPU collecting.
func collectLessOften() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}

func serve(version string, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("consullock", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() { usage(stderr) }
	debug := flags.Bool("debug", false, "start the provider in debug mode for a debugger (prints TF_REATTACH_PROVIDERS)")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version)
		return 0
	}
	quiet := provider.QuietLogEnv(os.Environ())
	for _, name := range quiet {
		_ = os.Setenv(name, "OFF")
	}
	collectLessOften()
	framework := providerserver.NewProtocol6(provider.New(version)())
	server := framework
	if len(quiet) > 0 {
		server = func() tfprotov6.ProviderServer { return provider.QuietServer(framework()) }
	}
	var opts []tf6server.ServeOpt
	if *debug {
		opts = append(opts, tf6server.WithManagedDebug())
	}
	err := tf6server.Serve(ProviderAddress, server, opts...)
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
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "  consullock %s ...\n", name)
	}
}
