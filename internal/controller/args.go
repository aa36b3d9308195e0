package controller

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// options is the parsed command line of `consullock controller`.
type options struct {
	// cfg is the controller's Config but for Logger and WatchClient.
	cfg       Config
	listen    string // -listen; "" serves nothing
	register  string // -register-service; "" registers nothing
	advertise string // -service-address
	logLevel  slog.Level
	logFormat logformat.Format
}

// errFlagSyntax is parseArgs's error for a command line the flag package
// could not parse (and has said why on stderr).
var errFlagSyntax = errors.New("bad command line")

const usageText = `Usage: consullock controller [flags]

Keeps live Consul matching the consullock declarations. Consul settings come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...

`

// parseArgs parses and checks the command line. It returns flag.ErrHelp
// for -h, errFlagSyntax when the flag package refused it, and otherwise an
// error naming the flag. Each flag's zero means what its usage says, and
// the same in Config: -apply-grace 0 is no grace, -max-lock-watches 0 the
// automatic cap.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	mode := fs.String("mode", string(compliance.ModeRepair), "observe (report only), repair (fix config drift, never touch holders) or enforce (also end violating holder sessions)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&o.cfg.RegistryPrefix, "registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declarations (the provider's registry_prefix)")
	fs.IntVar(&o.cfg.MaxLockWatches, "max-lock-watches", 0, fmt.Sprintf("most blocking queries on lock keys; keys are grouped by prefix, never into the whole KV store (more only when the keys begin with more different characters). 0 (the default): about one per %d locks, from %d to %d; each holds an HTTP connection to the agent", compliance.LocksPerWatch, compliance.DefaultMaxLockWatches, compliance.MaxAutoLockWatches))
	fs.DurationVar(&o.cfg.ApplyGrace, "apply-grace", compliance.DefaultApplyGrace, "how long after a declaration changes its object is left to the apply that wrote it (0 = none)")
	fs.BoolVar(&o.cfg.DisableHA, "no-leader-election", false, "act without electing a leader: only for a single replica")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	logformat.Var(fs, &o.logFormat, logformat.JSON)
	fs.StringVar(&o.register, "register-service", "", "register the -listen endpoint with the Consul agent as a service of this name (for Prometheus's consul_sd), with an HTTP check on /readyz; deregistered on a clean stop. Needs service:write on the name")
	fs.StringVar(&o.advertise, "service-address", "", "with -register-service: the address Consul lists for the endpoint and its check calls (default: the -listen IP, or the node's address when -listen has none, e.g. :9464)")
	fs.StringVar(&o.cfg.Notify.URL, "notify", "", "POST a JSON event to this http(s) URL, once per event, from the leading replica: a missed slot, a run that used up its attempts, a pause older than -notify-paused-after")
	fs.DurationVar(&o.cfg.Notify.PausedAfter, "notify-paused-after", DefaultNotifyPausedAfter, "with -notify: how old a pause is before it is notified")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errFlagSyntax
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("-log-level: %w", err)
	}
	return o, o.check(*mode)
}

// check validates the flags with the domain's rules (compliance,
// lockmodel) and the endpoint flags with each other.
func (o *options) check(mode string) error {
	if o.register != "" {
		if err := checkServiceName(o.register); err != nil {
			return err
		}
		if o.listen == "" {
			return fmt.Errorf("-register-service %q needs the endpoint: set -listen (e.g. :9464)", o.register)
		}
	} else if o.advertise != "" {
		return errors.New("-service-address is only used with -register-service")
	}
	var err error
	if o.cfg.Mode, err = compliance.ParseMode(mode); err != nil {
		return err
	}
	if o.cfg.RegistryPrefix, err = lockmodel.ValidateRegistryPrefix(o.cfg.RegistryPrefix); err != nil {
		return asFlag("-registry-prefix", err)
	}
	if err := compliance.ValidateApplyGrace("-apply-grace", o.cfg.ApplyGrace); err != nil {
		return err
	}
	if err := o.cfg.Notify.validate(); err != nil {
		return err
	}
	o.cfg.Clock, err = lockmodel.ClockFromEnv(os.Getenv)
	return err
}

// asFlag names the flag in a validation.FieldError about one setting.
func asFlag(name string, err error) error {
	if fes := validation.AsFieldErrors(err); len(fes) == 1 {
		fe := *fes[0]
		fe.Field = name
		return &fe
	}
	return err
}
