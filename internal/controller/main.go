package controller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
)

// Main is the `controller` program:
//
//	controller -mode observe|repair|enforce -listen 127.0.0.1:9464 [-registry-prefix consul-lock]
//	           [-register-service consullock-controller [-service-address HOST]]
//
// It reads the Consul CLI's CONSUL_* environment, logs JSON (-log-format) to stderr, and
// exits 0 after SIGTERM or SIGINT once it has stopped acting and released
// its leader lock.
func Main(ctx context.Context, args []string) int {
	return run(ctx, args, os.Stderr)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", string(compliance.ModeRepair), "observe (report only), repair (fix config drift, never touch holders) or enforce (also end violating holder sessions)")
	listen := fs.String("listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz; empty disables")
	prefix := fs.String("registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declarations (the provider's registry_prefix)")
	maxWatches := fs.Int("max-lock-watches", 0, fmt.Sprintf("most blocking queries on lock keys; keys are grouped by prefix, never into the whole KV store (more only when the keys begin with more different characters). 0 (the default): about one per %d locks, from %d to %d; each holds an HTTP connection to the agent", compliance.LocksPerWatch, compliance.DefaultMaxLockWatches, compliance.MaxAutoLockWatches))
	grace := fs.Duration("apply-grace", compliance.DefaultApplyGrace, "how long after a declaration changes its object is left to the apply that wrote it (0 = none)")
	noHA := fs.Bool("no-leader-election", false, "act without electing a leader: only for a single replica")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	var format logformat.Format
	logformat.Var(fs, &format, logformat.JSON)
	register := fs.String("register-service", "", "register the -listen endpoint with the Consul agent as a service of this name (for Prometheus's consul_sd), with an HTTP check on /readyz; deregistered on a clean stop. Needs service:write on the name")
	advertise := fs.String("service-address", "", "with -register-service: the address Consul lists for the endpoint and its check calls (default: the -listen IP, or the node's address when -listen has none, e.g. :9464)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: consullock controller [flags]\n\nKeeps live Consul matching the consullock declarations. Consul settings come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "controller: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *register != "" {
		if err := checkServiceName(*register); err != nil {
			fmt.Fprintf(stderr, "controller: %v\n", err)
			return 2
		}
		if *listen == "" {
			fmt.Fprintf(stderr, "controller: -register-service %q needs the endpoint: set -listen (e.g. :9464)\n", *register)
			return 2
		}
	} else if *advertise != "" {
		fmt.Fprintf(stderr, "controller: -service-address is only used with -register-service\n")
		return 2
	}
	m, err := compliance.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(stderr, "controller: %v\n", err)
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "controller: -log-level: %v\n", err)
		return 2
	}
	log := logformat.New(stderr, format, lvl)

	settings, err := consul.SettingsFromEnv()
	if err != nil {
		log.Error("reading the Consul environment failed", "error", err.Error())
		return 2
	}
	client, err := consul.New(settings)
	if err != nil {
		log.Error("building the Consul client failed", "error", err.Error())
		return 2
	}
	watchSettings := settings
	watchSettings.Retry.MaxAttempts = 1 // the watch loop backs off and resets its index itself
	watcher, err := consul.New(watchSettings)
	if err != nil {
		log.Error("building the Consul client failed", "error", err.Error())
		return 2
	}
	if *grace < 0 {
		fmt.Fprintf(stderr, "controller: -apply-grace: %s is negative\n", *grace)
		return 2
	}
	applyGrace := *grace
	if applyGrace == 0 {
		applyGrace = -1 // Config: negative means none, 0 the default
	}
	clock, err := lockmodel.ClockFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "controller: %v\n", err)
		return 2
	}
	c, err := New(client, Config{Mode: m, RegistryPrefix: *prefix, Logger: log, MaxLockWatches: *maxWatches,
		DisableHA: *noHA, WatchClient: watcher, ApplyGrace: applyGrace, Clock: clock})
	if err != nil {
		fmt.Fprintf(stderr, "controller: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := client.CheckToken(ctx); err != nil {
		// Not fatal: the agent may be starting. The watches keep trying
		// and report every failure.
		log.Error("checking the Consul token failed", "error", err.Error())
	}

	var srv *http.Server
	var service *api.AgentServiceRegistration
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Error("listen failed", "listen", *listen, "error", err.Error())
			return 1
		}
		srv = &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		log.Info("serving metrics and health", "listen", ln.Addr().String())
		if *register != "" {
			hostname, err := os.Hostname()
			if err != nil || hostname == "" {
				hostname = "controller"
			}
			addr, _ := ln.Addr().(*net.TCPAddr)
			service = endpointRegistration(*register, *advertise, addr, hostname)
			if err := registerEndpoint(ctx, client, service, log); err != nil {
				_ = srv.Close()
				if ctx.Err() != nil {
					return 0
				}
				log.Error("registering the metrics endpoint failed", "service", service.Name, "error", err.Error())
				return 1
			}
			log.Info("metrics endpoint registered with the Consul agent", "service", service.Name, "id", service.ID,
				"address", service.Address, "port", service.Port, "check", service.Check.HTTP)
		}
	}

	runErr := c.Run(ctx)
	if service != nil {
		if err := deregisterEndpoint(client, service.ID, 2*time.Second); err != nil {
			log.Error("deregistering the metrics endpoint failed", "service", service.Name, "id", service.ID, "error", err.Error())
		} else {
			log.Info("metrics endpoint deregistered", "service", service.Name, "id", service.ID)
		}
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if runErr != nil {
		log.Error("controller failed", "error", runErr.Error())
		return 1
	}
	return 0
}

// Handler serves /metrics, /healthz (the process is alive) and /readyz
// (every watch has answered since start, none is failing now, and the
// token is not blind to the registry: consul.BlindError).
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if blind := c.blind.Load(); blind != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", *blind)
			return
		}
		if failing := c.failing.Load(); !c.Ready() || failing > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: initial sync done=%v, failing watches=%d\n", c.Ready(), failing)
			return
		}
		fmt.Fprintf(w, "ready (leader=%v)\n", c.IsLeader())
	})
	return mux
}
