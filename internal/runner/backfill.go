package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// consullock backfill: the slots of a lock's run_once.schedule in a range
// that have no succeeded run, oldest first, one at a time, each by the
// runner exactly as `consullock run -run-id <slot>` runs it (mainAs,
// with backfill set: a skipped or replaced slot is run again, the overlap
// policy is not applied, and, as for any -run-id, no starting deadline).
// The run ledger keeps two backfills on two nodes from running a slot
// twice: a runner that finds its slot succeeded exits without running it.

// ExitBackfillNotRun: a slot did not succeed but its runner exited 0 (the
// lock is paused, or -child-exit-code=false).
const ExitBackfillNotRun = 1

const backfillUsage = `Usage: consullock backfill -lock NAME -from T1 -to T2 [-dry-run] [-continue] [run options] -- command [args...]

Runs every slot of the lock's run_once.schedule from T1 to T2 (RFC 3339,
both included) that has no succeeded run, oldest first, one at a time, each
as "consullock run -lock NAME -run-id <slot> -- command" would: under the
lock and the run ledger, the command getting CONSUL_LOCK_RUN_ID and
CONSUL_LOCK_SCHEDULED_TIME of the slot. Slots already succeeded are skipped
and said so; a slot skipped or replaced under run_once.overlap is run
again; run_once.starting_deadline and run_once.overlap do not apply.
It stops at the first slot that does not succeed, unless -continue. Two
backfills of one range on two nodes run each slot once in total. At most
%d slots; slots before the lock's declaration are left out.

-dry-run prints the run IDs of the slots it would run, one per line, and
runs nothing. Every option of consullock run except -run-id applies to
each slot.

Exit codes: 0 every slot succeeded (now or before); 1 a slot did not
succeed but its runner exited 0 (the lock is paused); 2 usage error (also
a lock without run_once.schedule, a reversed range, a range reaching past
now or holding too many slots); 125 setup error; otherwise the runner's
exit code for the first slot that did not succeed (see consullock run -h),
with -continue after trying the rest.

Options:
`

// BackfillMain runs `consullock backfill` with args (the words after
// "backfill") and returns the exit code.
func BackfillMain(ctx context.Context, args []string) int {
	return backfill(ctx, args, os.Stdout, os.Stderr)
}

// backfillArgs is the parsed command line: the slots' range, the lock,
// and the arguments of each slot's runner (without -run-id).
type backfillArgs struct {
	lock, registry string
	from, to       time.Time
	dryRun, goOn   bool
	runArgs        []string
	command        []string
	logFormat      logformat.Format
	logLevel       slog.Level
}

func parseBackfill(args []string, stderr io.Writer) (backfillArgs, error) {
	var b backfillArgs
	fs := flag.NewFlagSet("consullock backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), backfillUsage, ledger.MaxBackfillSlots)
		fs.PrintDefaults()
	}
	var (
		cfg      config
		x        flagValues
		from, to string
	)
	cfg.defineFlags(fs, &x)
	fs.StringVar(&from, "from", "", "the range's first instant, RFC 3339 (e.g. 2026-12-01T00:00:00Z)")
	fs.StringVar(&to, "to", "", "the range's last instant, RFC 3339, at or before now")
	fs.BoolVar(&b.dryRun, "dry-run", false, "print the run IDs of the slots it would run, one per line, and run nothing")
	fs.BoolVar(&b.goOn, "continue", false, "go on with the next slot after one that did not succeed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return b, err
		}
		return b, fmt.Errorf("%w: %v", errUsage, err)
	}
	own := map[string]bool{"from": true, "to": true, "dry-run": true, "continue": true}
	keyOnly := map[string]bool{"key": true, "limit": true, "ttl": true, "lock-delay": true, "behavior": true, "renew-every": true}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "run-id":
			bad = usageErrorf("-run-id: backfill names each slot's run itself; give -from and -to")
		case keyOnly[f.Name]:
			bad = usageErrorf("-%s: backfill runs a declared lock's slots (-lock NAME), which takes its key and session settings from its declaration", f.Name)
		case !own[f.Name]:
			b.runArgs = append(b.runArgs, "-"+f.Name+"="+f.Value.String())
		}
	})
	if bad != nil {
		return b, bad
	}
	if cfg.lockName == "" {
		return b, usageErrorf("-lock NAME is required: backfill runs the slots of a declared lock's run_once.schedule")
	}
	if err := lockmodel.ValidateName("-lock", cfg.lockName); err != nil {
		return b, usageErrorf("%v", err)
	}
	for _, f := range []struct {
		name, v string
		t       *time.Time
	}{{"-from", from, &b.from}, {"-to", to, &b.to}} {
		t, err := time.Parse(time.RFC3339, f.v)
		if err != nil {
			return b, usageErrorf("%s %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", f.name, f.v)
		}
		*f.t = t
	}
	if err := cfg.checkValues(x); err != nil {
		return b, err
	}
	b.command = fs.Args()
	if len(b.command) == 0 && !b.dryRun {
		return b, usageErrorf("no command given; put it after the options, e.g. consullock backfill -lock NAME -from T1 -to T2 -- /usr/local/bin/job")
	}
	b.lock, b.registry, b.logFormat, b.logLevel = cfg.lockName, cfg.registryPrefix, cfg.logFormat, cfg.logLevel
	return b, nil
}

func backfill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Signals stop the backfill after the slot that runs (its runner
	// handles them while it runs).
	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigCh)

	b, err := parseBackfill(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "consullock backfill: %v\nRun 'consullock backfill -h' for usage.\n", trimUsage(err))
		return ExitUsage
	}
	log := logformat.New(stderr, b.logFormat, b.logLevel).With("lock", b.lock)
	client, ro, code := b.connect(ctx, log)
	if code >= 0 {
		return code
	}
	slots, err := ro.BackfillSlots(b.from, b.to, time.Now())
	if err != nil {
		log.Error("usage error", "error", err.Error())
		return ExitUsage
	}
	ledgerKey := record.RunLedgerKey(b.registry, b.lock)
	l, _, err := store.New(client).ReadLedger(ctx, ledgerKey, b.lock)
	if err != nil {
		log.Error("cannot read the run ledger", "ledger", ledgerKey, "error", err.Error())
		return ExitSetup
	}
	var todo []string
	for _, id := range slots {
		if succeeded(l, id, ro) {
			log.Info("slot already succeeded: not run again", "run_id", id)
			continue
		}
		todo = append(todo, id)
	}
	log.Info("backfill", "from", b.from.Format(time.RFC3339), "to", b.to.Format(time.RFC3339), "slots", len(slots), "to_run", len(todo), "dry_run", b.dryRun)
	if b.dryRun {
		for _, id := range todo {
			fmt.Fprintln(stdout, id)
		}
		return ExitOK
	}
	first := ExitOK
	for i, id := range todo {
		select {
		case sig := <-sigCh:
			log.Warn("interrupted: the remaining slots are not run", "signal", sig.String(), "not_run", len(todo)-i)
			return signalExitCode(sig)
		default:
		}
		runArgs := append(append(append([]string{}, b.runArgs...), "-run-id", id, "--"), b.command...)
		rc := mainAs(ctx, runArgs, stderr, true)
		if l, _, err = store.New(client).ReadLedger(ctx, ledgerKey, b.lock); err == nil && succeeded(l, id, ro) {
			continue
		}
		if rc == ExitOK {
			rc = ExitBackfillNotRun
		}
		log.Error("slot did not succeed", "run_id", id, "exit_code", rc, "continue", b.goOn)
		if first == ExitOK {
			first = rc
		}
		if !b.goOn {
			log.Info("backfill stopped at the first slot that did not succeed (-continue goes on)", "not_run", len(todo)-i-1)
			return first
		}
	}
	return first
}

// connect reads the lock's declaration: its run_once, which must have a
// schedule. code >= 0 ends the backfill.
func (b backfillArgs) connect(ctx context.Context, log *slog.Logger) (*consul.Client, ledger.RunOnce, int) {
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		log.Error("setup failed", "error", err.Error())
		return nil, ledger.RunOnce{}, ExitSetup
	}
	client, err := consul.New(settings)
	if err != nil {
		log.Error("setup failed", "error", err.Error())
		return nil, ledger.RunOnce{}, ExitSetup
	}
	l, _, err := lockproto.ReadDeclaration(ctx, client, b.registry, b.lock)
	if err != nil {
		log.Error("setup failed", "error", err.Error())
		return nil, ledger.RunOnce{}, ExitSetup
	}
	if l.RunOnce == nil || l.RunOnce.Schedule == "" {
		log.Error("usage error", "error", fmt.Sprintf("-lock %s: the lock declares no run_once.schedule; backfill runs the slots of a schedule (for another run, use consullock run -run-id)", b.lock))
		return nil, ledger.RunOnce{}, ExitUsage
	}
	return client, l.RunOnce.WithDefaults(), -1
}

// succeeded reports whether ledger l shows slot id succeeded.
func succeeded(l ledger.Ledger, id string, ro ledger.RunOnce) bool {
	run, done := l.DoneRun(id, ro.MaxAttempts)
	return done && run.Outcome != ledger.RunExhausted
}

func trimUsage(err error) string {
	s := err.Error()
	if p := errUsage.Error() + ": "; len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
