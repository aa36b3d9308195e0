// Package status is the `status` program: every declared lock, its
// holder(s), fencing token and compliance in one table, from a fixed number
// of Consul reads whatever the number of locks. Compliance is judged by the
// controller's own Decide, in observe mode.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
)

// Exit codes, for monitoring scripts.
const (
	ExitOK          = 0 // every lock compliant
	ExitViolation   = 1 // a finding, or an always-held lock without a holder
	ExitUsage       = 2
	ExitUnreachable = 3 // Consul unreachable, the token lacks a permission, or it cannot see the declarations (blind)
	// A run needs attention (no violation): ExitRunExhausted before
	// ExitSlotMissed. Distinct from the runner's codes (118-127).
	ExitRunExhausted = 4 // a run used up max_attempts without a success (RUN STATE EXHAUSTED)
	ExitSlotMissed   = 5 // a run_once slot passed with no run in the ledger (RUN STATE MISSED)
)

// Main is the `status` program:
//
//	status [-lock NAME] [-json] [-watch] [-always-held NAMES] [-registry-prefix P] [-print-rules]
func Main(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Run(ctx, args, os.Stdout, os.Stderr)
}

// options are the parsed flags.
type options struct {
	lock       string
	json       bool
	watch      bool
	alwaysHeld map[string]bool
	registry   string
	printRules bool
}

// Run is Main with its streams, for tests.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.lock, "lock", "", "show one lock in detail: its holders' session checks, holder values and worst_case_gap, and a queued mutex's waiters in line")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON (schema_version 1; see the status guide)")
	fs.BoolVar(&o.watch, "watch", false, "redraw whenever Consul reports a change (blocking queries, no polling); with -json, one document per line")
	always := fs.String("always-held", "", "comma-separated lock names that must always have a holder, in addition to the locks declared always_held (\"*\" = every lock); one without a holder exits 1")
	fs.StringVar(&o.registry, "registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declarations (the provider's registry_prefix)")
	fs.BoolVar(&o.printRules, "print-rules", false, "print the read-only ACL rules this program needs for the declared locks, and exit")
	var format logformat.Format
	logformat.Var(fs, &format, logformat.Text)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: consullock status [flags]\n\nEvery declared lock, its holders, fencing token and compliance. Consul settings come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...\n\nExit codes: 0 all compliant, 1 a violation or an always-held lock without a holder, 2 usage (also a lock name in -lock or -always-held that is not declared), 3 Consul unreachable, permission denied, or blind (no declaration visible and the token may not read the registry), 4 a run exhausted its attempts, 5 a slot was missed (1 before 4 before 5).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	// Diagnostics on stderr: as they are in text, one event a line in json.
	stderr = logformat.Messages(stderr, format, "status: ")
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "status: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	}
	p, err := lockmodel.ValidateRegistryPrefix(o.registry)
	if err != nil {
		fmt.Fprintf(stderr, "status: -registry-prefix: %v\n", err)
		return ExitUsage
	}
	o.registry = p
	o.alwaysHeld = map[string]bool{}
	for _, n := range strings.Split(*always, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.alwaysHeld[n] = true
		}
	}
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "status: reading the Consul environment: %v\n", err)
		return ExitUsage
	}
	client, err := consul.New(settings)
	if err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return ExitUsage
	}
	r := &reader{c: client, registry: o.registry}
	if o.printRules {
		return printRules(ctx, r, stdout, stderr)
	}
	if o.watch {
		return watch(ctx, r, o, stdout, stderr)
	}
	start := client.Requests()
	w, err := r.readOnce(ctx)
	if err != nil {
		return fail(stderr, err)
	}
	now := time.Now()
	rep := build(w, o.registry, o.alwaysHeld, now)
	if w.pending, err = r.pendingLocks(ctx, w, rep, nil, now); err != nil {
		return fail(stderr, err)
	}
	if len(w.pending) > 0 {
		rep = build(w, o.registry, o.alwaysHeld, now)
	}
	rep.ConsulRequests = int(client.Requests() - start)
	return show(rep, o, stdout, stderr)
}

// show prints rep as o asks and returns the exit code.
func show(rep *Report, o options, stdout, stderr io.Writer) int {
	if err := rep.checkNames(o); err != nil {
		fmt.Fprintf(stderr, "status: Lock Not Declared: %v\n", err)
		return ExitUsage
	}
	if o.lock != "" {
		l := rep.Locks[rep.declared[o.lock]]
		l.Runs = l.runs
		if o.json {
			writeJSON(stdout, l)
		} else {
			renderDetail(stdout, l)
		}
		return l.exitCode()
	}
	if o.json {
		writeJSON(stdout, rep)
	} else {
		renderTable(stdout, rep)
	}
	return rep.Summary.ExitCode
}

// checkNames refuses a lock name in -lock or -always-held that rep does not
// declare, naming the flag, the value and the declared names.
func (rep *Report) checkNames(o options) error {
	var names []string
	flagOf := map[string]string{}
	if o.lock != "" {
		names, flagOf[o.lock] = append(names, o.lock), "-lock"
	}
	for _, n := range slices.Sorted(maps.Keys(o.alwaysHeld)) {
		if _, ok := flagOf[n]; !ok && n != "*" {
			names, flagOf[n] = append(names, n), "-always-held"
		}
	}
	for _, n := range names {
		if _, ok := rep.declared[n]; !ok {
			return fmt.Errorf("%s %q: no lock of that name under %s/locks/; declared: %s", flagOf[n], n, rep.RegistryPrefix, rep.declaredNames())
		}
	}
	return nil
}

// declaredNames lists the declared lock names for a message, at most 20.
func (rep *Report) declaredNames() string {
	const shown = 20
	names := make([]string, 0, len(rep.Locks))
	for _, l := range rep.Locks {
		names = append(names, l.Name)
	}
	switch {
	case len(names) == 0:
		return "(none)"
	case len(names) > shown:
		return strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return strings.Join(names, ", ")
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "%s\n", b)
}

// fail reports a read error: exit 3 for an unreachable Consul or a missing
// permission (named), 1 otherwise.
func fail(stderr io.Writer, err error) int {
	if b, ok := consul.IsBlind(err); ok {
		what := b.Token()
		if b.NoToken {
			what = "no token is set (CONSUL_HTTP_TOKEN and CONSUL_HTTP_TOKEN_FILE are empty), so Consul answered as the anonymous token, which"
		}
		fmt.Fprintf(stderr, "status: Blind: no declaration is visible under %s and this may be a denial, not an empty registry: %s lacks \"key:read\" on %q. "+
			"Set CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) to a token with the read-only rules of `consullock status -print-rules`.\n",
			b.Prefix, what, b.Prefix)
		return ExitUnreachable
	}
	var ce *consul.Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case consul.KindPermissionDenied:
			fmt.Fprintf(stderr, "status: Permission Denied: %v. Grant the token the read-only rules of `consullock status -print-rules` (the token needs %q on %q).\n",
				err, ce.Permission, ce.Resource)
			return ExitUnreachable
		case consul.KindInvalidToken:
			fmt.Fprintf(stderr, "status: Invalid Token: %v. Set CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) to a valid token.\n", err)
			return ExitUnreachable
		case consul.KindTransient, consul.KindUnknown:
			fmt.Fprintf(stderr, "status: Consul Unreachable: %v. Check CONSUL_HTTP_ADDR and that the agent is up.\n", err)
			return ExitUnreachable
		}
	}
	fmt.Fprintf(stderr, "status: Read Failed: %v. Check the agent's log.\n", err)
	return ExitViolation
}

// printRules prints the read-only rules, narrowed to the prefixes status
// lists when the registry is readable, else the broad ones.
func printRules(ctx context.Context, r *reader, stdout, stderr io.Writer) int {
	d, _, err := r.registryList(once(ctx))
	var prefixes []string
	if err != nil {
		fmt.Fprintf(stderr, "status: cannot read the declarations (%v); printing rules for every key prefix\n", err)
	} else {
		_, prefixes = listPrefixes(d)
	}
	fmt.Fprint(stdout, aclrules.ReadOnlyRules(r.registry, prefixes, d.holderServiceNames()...))
	return ExitOK
}
