package runner

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// config is the parsed command line.
type config struct {
	lockName       string // -lock: a declared lock
	key            string // -key: an undeclared key
	limit          int    // -limit (only with -key)
	registryPrefix string
	timeout        time.Duration // 0 waits forever
	grace          time.Duration
	sessionName    string
	node           string
	childExitCode  bool
	logLevel       slog.Level
	logFormat      logformat.Format
	// runID (-run-id) names the run of a run-once job; "" derives it from
	// the lock's run_once period, or runs without the ledger.
	runID string
	// exitIfDone is the exit code when the run already succeeded.
	exitIfDone int
	// exitIfPaused is the exit code when the lock is paused.
	exitIfPaused int
	// Session settings for -key (the profile of an undeclared key),
	// validated and resolved once, by resolveLock.
	profile lockmodel.Profile
	command []string
	// serviceAddress and servicePort override the holder service's
	// address (default: the node's) and declared port for this holder.
	serviceAddress string
	servicePort    int
	// serviceVia is how the holder's instance is registered
	// (holdersvc.Via of -service-registration and -node).
	serviceVia, serviceViaReason string
	// clock is the wall clock (lockmodel.EnvClockOffset: fault injection).
	clock lockmodel.Clock
	// Job control (jobcontrol.go): -max-runtime (0: none, or the lock's
	// run_once.max_runtime), -keep-output bytes of stderr, -on-outcome
	// and whether it gets the runner's Consul token (-on-outcome-token).
	maxRuntime     time.Duration
	keepOutput     int
	onOutcome      string
	onOutcomeToken bool
	// treeProtection is -tree-protection (guard.go).
	treeProtection string
}

// Defaults of the flags.
const (
	defaultGrace = lockmodel.DefaultRunnerGrace
)

const usageText = `Usage: consullock run (-lock NAME | -key KEY) [options] -- command [args...]

Runs command while holding a Consul lock, like "consul lock", with the
session settings of the lock's declaration. Reads the declaration
<registry-prefix>/locks/NAME and its session profile, creates the session
exactly as declared, waits for the lock, runs the command with
CONSUL_LOCK_HELD=true, CONSUL_LOCK_FENCING_TOKEN (the fencing token),
CONSUL_LOCK_INDEX (Consul's LockIndex), CONSUL_LOCK_SESSION and
CONSUL_LOCK_KEY, and ends it (SIGTERM, -grace, SIGKILL) if the lock is
lost, or when no renewal succeeded for longer than the profile allows a
holder cut off from Consul. On exit it ends what the command left in its
process group, releases the lock, then destroys the session, so the next
holder starts without lock-delay.

Consul is reached with the CLI's environment: CONSUL_HTTP_ADDR,
CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...

Run once: with -run-id ID (or a lock declaring run_once, whose period slot
or latest schedule slot at or before the start names the run), the holder
reads the lock's run ledger <registry-prefix>/runs/NAME and runs the
command only if run ID has not succeeded and has attempts left; it records
the attempt's start before the command starts and its outcome in the
transaction that releases the lock. A waiter leaves as soon as the ledger
shows the run succeeded. The command gets CONSUL_LOCK_RUN_ID,
CONSUL_LOCK_ATTEMPT and, for a slot of the lock's period or schedule,
CONSUL_LOCK_SCHEDULED_TIME. With a schedule, a trigger up to 5s before a
slot waits for it and runs it, and a -run-id timestamp is an instant: any
RFC 3339 spelling of a slot's instant is that slot, another exits 2. A
runner starting more than run_once.starting_deadline after its slot exits
119 unless another runner began the slot (then it exits as on time); a
slot before the lock's declaration is never run. Backfill a missed slot
(status -lock lists them) with -run-id <its ID>, or a range with
consullock backfill: no deadline applies. With run_once.overlap skip, a
runner that finds another run's attempt holding the lock records its run
skipped and exits 117; with replace, it ends that attempt's session
(recorded replaced) and runs after the lock-delay.

Pause: a lock paused (consullock pause, or consullock_lock.paused) is not
run: the runner logs who paused it, when and why, and exits 0 (or
-exit-code-if-paused); a waiter leaves when the pause appears; a command
already running is left to finish.

Exit codes: the command's own; 0 (or -exit-code-if-done) the run already
succeeded; 0 (or -exit-code-if-paused) the lock is paused; 2 usage error;
117 run_once.overlap skipped the run (or found it skipped or
replaced); 118 the command ran past its max_runtime and was stopped
(outcome timed_out); 119 started past run_once.starting_deadline (or for a
slot before the lock's declaration) and no runner began the slot;
121 the run used up its attempts; 123 lock lost;
124 -timeout passed before the lock was acquired (or before the run's
next attempt may start: retry_after); 125 setup error (also an
unreadable or invalid run ledger); 126 command not executable; 127 command
not found; 128+N interrupted by signal N.

Options:
`

// errUsage marks command-line errors (exit 2).
var errUsage = errors.New("usage error")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// parseArgs parses the command line of `consullock run`. It returns
// flag.ErrHelp for -h, and errors wrapping errUsage for bad input.
func parseArgs(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("consullock run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var x flagValues
	cfg.defineFlags(fs, &x)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg.command = fs.Args()
	if len(cfg.command) == 0 {
		return cfg, usageErrorf("no command given; put it after the options, e.g. consullock run -lock NAME -- /usr/local/bin/job --flag")
	}
	if err := cfg.checkValues(x); err != nil {
		return cfg, err
	}

	if err := cfg.resolveLock(set, x.ttl, x.lockDelay, x.behavior, x.renewEvery); err != nil {
		return cfg, err
	}
	return cfg, cfg.checkRunOnce(set)
}

// flagValues are the flags parsed into locals before they become config.
type flagValues struct {
	logLevel, serviceRegistration, behavior string
	ttl, lockDelay, renewEvery              time.Duration
}

// defineFlags defines every flag of consullock run on fs.
func (cfg *config) defineFlags(fs *flag.FlagSet, x *flagValues) {
	fs.StringVar(&cfg.lockName, "lock", "", "name of the declared lock (consullock_lock) to hold")
	fs.StringVar(&cfg.key, "key", "", "KV key to lock when it has no declaration; session settings then come from -ttl, -lock-delay, -behavior")
	fs.IntVar(&cfg.limit, "limit", 1, "with -key: number of holders; above 1 the key must be <prefix>/.lock and the api.Semaphore protocol is used (as consul lock -n)")
	fs.StringVar(&cfg.registryPrefix, "registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declaration registry")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "give up waiting for the lock after this long and exit 124 (0 waits forever)")
	fs.DurationVar(&cfg.grace, "grace", defaultGrace, "after the lock is lost, how long the command has between SIGTERM and SIGKILL; it counts against the lock-delay, see the runner guide")
	fs.StringVar(&cfg.sessionName, "name", "", "session name (default \"consullock run <lock>\")")
	fs.StringVar(&cfg.node, "node", "", "create the session on this node (default: the node of the agent at CONSUL_HTTP_ADDR); for a lock with holder_service and -service-registration auto or catalog the holder's instance is on it too, so it must then be a DNS label (1 to 63 letters, digits or '-'; else exit 125)")
	fs.BoolVar(&cfg.childExitCode, "child-exit-code", true, "exit with the command's exit code; false exits 0 whenever the command ran, as consul lock does without -child-exit-code")
	fs.StringVar(&cfg.runID, "run-id", "", "run once: the run's ID, the same on every node for one firing of the schedule (default with run_once: the period slot of the start, e.g. 2026-12-01T00:00:00Z, or the latest schedule slot at or before it, e.g. 2026-12-01T02:00:00+01:00); with a schedule, a timestamp is an instant: any RFC 3339 spelling of a slot's is that slot, another is refused; a missed slot's ID backfills it")
	fs.IntVar(&cfg.exitIfDone, "exit-code-if-done", ledger.ExitRunAlreadySucceeded, "run once: exit code when the run already succeeded and the command was not started (e.g. 122 to tell it from running it)")
	fs.IntVar(&cfg.exitIfPaused, "exit-code-if-paused", record.ExitPaused, "exit code when the lock is paused (consullock pause, consullock_lock.paused) and the command was not started, e.g. 120 to tell it from a run")
	fs.StringVar(&cfg.serviceAddress, "service-address", "", "holder_service: this holder's address in the catalog and DNS (default: its node's address)")
	fs.IntVar(&cfg.servicePort, "service-port", 0, "holder_service: this holder's port (default: the declared holder_service.port), e.g. for several holders on one host")
	fs.StringVar(&x.serviceRegistration, "service-registration", holdersvc.ViaAuto, "holder_service: agent (the agent at CONSUL_HTTP_ADDR), catalog (on the -node in the catalog, agentless) or auto (catalog with -node, agent without)")
	fs.DurationVar(&cfg.maxRuntime, "max-runtime", 0, "stop the command this long after it started (SIGTERM, SIGKILL after -grace) and exit 118; run once: the attempt is timed_out (default: the lock's run_once.max_runtime; the shorter wins when both are set)")
	fs.IntVar(&cfg.keepOutput, "keep-output", ledger.DefaultKeepOutput, fmt.Sprintf("run once: keep the last SIZE bytes of the command's stdout and of its stderr in the attempt's ledger entry (status -lock shows them); 0 keeps none, at most %d and what keep x max_attempts attempts fit in the ledger", ledger.MaxKeepOutput))
	fs.StringVar(&cfg.onOutcome, "on-outcome", "", "run this shell command (sh -c) after the outcome is recorded, with CONSUL_LOCK_RUN_ID, CONSUL_LOCK_ATTEMPT, CONSUL_LOCK_OUTCOME, CONSUL_LOCK_EXIT_CODE, CONSUL_LOCK_NODE and CONSUL_LOCK_FENCING_TOKEN, and without the runner's Consul token (see -on-outcome-token); also when the command was not started for a missed slot, a run out of attempts or a paused lock (CONSUL_LOCK_OUTCOME missed, exhausted, paused); its failure is logged and changes nothing")
	fs.BoolVar(&cfg.onOutcomeToken, "on-outcome-token", false, "pass the runner's CONSUL_HTTP_TOKEN and CONSUL_HTTP_TOKEN_FILE on to the -on-outcome command (default: it gets neither)")
	fs.StringVar(&cfg.treeProtection, "tree-protection", ProtectionGuard, "what ends the command's process tree when the runner is killed: guard (a guard process in its own process group; a kill of runner and guard together leaves the tree) or pid-namespace (the guard is the init of a PID namespace, so the kernel ends the tree whatever is killed; needs CAP_SYS_ADMIN, and the command sees PIDs of its namespace), see the guarantees guide")
	fs.StringVar(&x.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	logformat.Var(fs, &cfg.logFormat, logformat.Text)
	fs.DurationVar(&x.ttl, "ttl", lockmodel.DefaultSessionTTL, "with -key: session TTL")
	fs.DurationVar(&x.lockDelay, "lock-delay", lockmodel.DefaultLockDelay, "with -key: session lock-delay (0s for none)")
	fs.StringVar(&x.behavior, "behavior", "", "with -key: session behavior, release or delete (default release; delete with -limit above 1, as api.Semaphore)")
	fs.DurationVar(&x.renewEvery, "renew-every", 0, "with -key: renewal interval (default ttl/3)")
}

// checkValues checks the flags that stand alone (each error names the flag,
// the value and what is allowed) and applies the log level, the registry
// prefix, the clock and the service registration.
func (cfg *config) checkValues(x flagValues) error {
	if err := cfg.logLevel.UnmarshalText([]byte(x.logLevel)); err != nil {
		return usageErrorf("-log-level %q: want debug, info, warn or error", x.logLevel)
	}
	prefix, err := lockmodel.ValidateRegistryPrefix(cfg.registryPrefix)
	if err != nil {
		return usageErrorf("-registry-prefix: %v", flagNames(err))
	}
	cfg.registryPrefix = prefix
	if cfg.clock, err = lockmodel.ClockFromEnv(os.Getenv); err != nil {
		return usageErrorf("%v", err)
	}
	if cfg.servicePort < 0 || cfg.servicePort > holdersvc.MaxPort {
		return usageErrorf("-service-port %d: want a port from 1 to %d (0: the declared port)", cfg.servicePort, holdersvc.MaxPort)
	}
	if cfg.serviceVia, cfg.serviceViaReason, err = holdersvc.Via(x.serviceRegistration, cfg.node); err != nil {
		return usageErrorf("%v", err)
	}
	if cfg.exitIfPaused < 0 || cfg.exitIfPaused > 255 {
		return usageErrorf("-exit-code-if-paused %d: want an exit code from 0 to 255", cfg.exitIfPaused)
	}
	if cfg.timeout < 0 {
		return usageErrorf("-timeout %s: want 0 (wait forever) or a positive duration", cfg.timeout)
	}
	if cfg.grace < 0 {
		return usageErrorf("-grace %s: want 0 or a positive duration", cfg.grace)
	}
	if cfg.treeProtection != ProtectionGuard && cfg.treeProtection != ProtectionPIDNamespace {
		return usageErrorf("-tree-protection %q: want %s or %s", cfg.treeProtection, ProtectionGuard, ProtectionPIDNamespace)
	}
	if err := ledger.ValidateMaxRuntime(ledger.FlagMaxRuntime, cfg.maxRuntime); err != nil {
		return usageErrorf("%v", err)
	}
	if err := ledger.ValidateKeepOutput(cfg.keepOutput, 0, 0); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

// checkRunOnce checks -run-id and -exit-code-if-done. A run ID needs a
// declared lock: the ledger is the lock's, <registry-prefix>/runs/NAME.
func (cfg *config) checkRunOnce(set map[string]bool) error {
	if set["run-id"] {
		if err := ledger.ValidateRunID(cfg.runID); err != nil {
			return usageErrorf("%v", err)
		}
		if cfg.lockName == "" {
			return usageErrorf("-run-id needs -lock NAME: the run ledger is a declared lock's")
		}
	}
	if cfg.exitIfDone < 0 || cfg.exitIfDone > 255 {
		return usageErrorf("-exit-code-if-done %d: want an exit code from 0 to 255", cfg.exitIfDone)
	}
	return nil
}

// resolveLock checks the choice between -lock and -key and, for -key, the
// key, -limit and the session flags, and builds the profile from them. set
// names the flags given.
func (cfg *config) resolveLock(set map[string]bool, ttl, lockDelay time.Duration, behavior string, renewEvery time.Duration) error {
	switch {
	case cfg.lockName == "" && cfg.key == "":
		return usageErrorf("name the lock with -lock NAME (a declared lock) or -key KEY (an undeclared key)")
	case cfg.lockName != "" && cfg.key != "":
		return usageErrorf("-lock and -key exclude each other: -lock reads the key from the declaration")
	case cfg.lockName != "":
		if err := lockmodel.ValidateName("-lock", cfg.lockName); err != nil {
			return usageErrorf("%v", err)
		}
		var keyOnly []string
		for _, name := range []string{"limit", "ttl", "lock-delay", "behavior", "renew-every"} {
			if set[name] {
				keyOnly = append(keyOnly, "-"+name)
			}
		}
		if len(keyOnly) > 0 {
			return usageErrorf("%s only apply with -key: a declared lock takes its limit and session settings from its declaration",
				strings.Join(keyOnly, ", "))
		}
		return nil
	}

	// -key: an undeclared lock with session settings from the flags.
	key, err := lockmodel.NormalizeKeyPath("-key", cfg.key)
	if err != nil {
		return usageErrorf("%v", err)
	}
	cfg.key = key
	if err := lockmodel.ValidateLimit("-limit", cfg.limit); err != nil {
		return usageErrorf("%v", err)
	}
	if _, err := cfg.undeclaredLock(); err != nil {
		return usageErrorf("%v", flagNames(err))
	}
	b := lockmodel.Behavior(behavior)
	if b == "" {
		b = lockmodel.BehaviorRelease
		if cfg.limit > 1 {
			b = lockmodel.BehaviorDelete
		}
	}
	declared := lockmodel.SessionProfile{Name: "flags", TTL: ttl, LockDelay: lockDelay, Behavior: b, RenewEvery: renewEvery}
	if err := declared.Validate(); err != nil {
		return usageErrorf("%v", flagNames(err))
	}
	cfg.profile = declared.Resolve()
	return nil
}

// undeclaredLock is the lock -key and -limit describe: a mutex on the key
// itself, or a semaphore whose key is <prefix>/.lock.
func (cfg config) undeclaredLock() (lockmodel.Lock, error) {
	l := lockmodel.Lock{Name: "undeclared", Prefix: cfg.key, Key: cfg.key, Limit: cfg.limit}
	if cfg.limit > 1 {
		prefix, ok := strings.CutSuffix(cfg.key, "/"+lockmodel.LockKeyName)
		if !ok || prefix == "" {
			return l, fmt.Errorf("-key %q: with -limit above 1 the key is the semaphore's holder table <prefix>/%s, as consul lock -n uses it",
				cfg.key, lockmodel.LockKeyName)
		}
		l.Prefix = prefix
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	return l.Normalize()
}

// flagNames rewrites the attribute names of field errors as the flags that
// set them.
func flagNames(err error) error {
	fes := validation.AsFieldErrors(err)
	if len(fes) == 0 {
		return err
	}
	names := map[string]string{
		"ttl": "-ttl", "lock_delay": "-lock-delay", "behavior": "-behavior", "renew_every": "-renew-every",
		"key": "-key", "prefix": "-key", "limit": "-limit", "registry_prefix": "-registry-prefix",
	}
	out := make(validation.FieldErrors, 0, len(fes))
	for _, fe := range fes {
		c := *fe
		if n, ok := names[c.Field]; ok {
			c.Field = n
		}
		out = append(out, &c)
	}
	return out
}
