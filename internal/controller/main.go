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

	"github.com/consullock/terraform-provider-consullock/internal/consul"
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
	o, err := parseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagSyntax):
		return 2 // the flag package has said why
	case err != nil:
		fmt.Fprintf(stderr, "controller: %v\n", err)
		return 2
	}
	log := logformat.New(stderr, o.logFormat, o.logLevel)
	client, watcher, ok := clients(log)
	if !ok {
		return 2
	}
	o.cfg.Logger, o.cfg.WatchClient = log, watcher
	c, err := New(client, o.cfg)
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
	ep, code := o.serve(ctx, c, client, log)
	if code >= 0 {
		return code
	}
	runErr := c.Run(ctx)
	ep.close(client, log)
	if runErr != nil {
		log.Error("controller failed", "error", runErr.Error())
		return 1
	}
	return 0
}

// clients builds the Consul client from the CLI's environment, and the one
// the watches use, which does not retry: the watch loop backs off and
// resets its index itself. It logs why when it cannot.
func clients(log *slog.Logger) (client, watcher *consul.Client, ok bool) {
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		log.Error("reading the Consul environment failed", "error", err.Error())
		return nil, nil, false
	}
	watchSettings := settings
	watchSettings.Retry.MaxAttempts = 1
	if client, err = consul.New(settings); err == nil {
		watcher, err = consul.New(watchSettings)
	}
	if err != nil {
		log.Error("building the Consul client failed", "error", err.Error())
		return nil, nil, false
	}
	return client, watcher, true
}

// endpoint is the HTTP server for /metrics, /healthz and /readyz and its
// registration with the agent (each nil when not asked for).
type endpoint struct {
	srv     *http.Server
	service *api.AgentServiceRegistration
}

// serve starts the endpoint (-listen) and registers it (-register-service).
// code is the exit code when the controller must not run (-1: run).
func (o options) serve(ctx context.Context, c *Controller, client *consul.Client, log *slog.Logger) (endpoint, int) {
	var ep endpoint
	if o.listen == "" {
		return ep, -1
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("listen failed", "listen", o.listen, "error", err.Error())
		return ep, 1
	}
	ep.srv = &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ep.srv.Serve(ln) }()
	log.Info("serving metrics and health", "listen", ln.Addr().String())
	if o.register == "" {
		return ep, -1
	}
	hostname, err := os.Hostname()
	if err != nil || hostname == "" {
		hostname = "controller"
	}
	addr, _ := ln.Addr().(*net.TCPAddr)
	service := endpointRegistration(o.register, o.advertise, addr, hostname)
	if err := registerEndpoint(ctx, client, service, log); err != nil {
		_ = ep.srv.Close()
		if ctx.Err() != nil {
			return ep, 0
		}
		log.Error("registering the metrics endpoint failed", "service", service.Name, "error", err.Error())
		return ep, 1
	}
	log.Info("metrics endpoint registered with the Consul agent", "service", service.Name, "id", service.ID,
		"address", service.Address, "port", service.Port, "check", service.Check.HTTP)
	ep.service = service
	return ep, -1
}

// close deregisters the endpoint and stops its server, each within 2s.
func (ep endpoint) close(client *consul.Client, log *slog.Logger) {
	if s := ep.service; s != nil {
		if err := deregisterEndpoint(client, s.ID, 2*time.Second); err != nil {
			log.Error("deregistering the metrics endpoint failed", "service", s.Name, "id", s.ID, "error", err.Error())
		} else {
			log.Info("metrics endpoint deregistered", "service", s.Name, "id", s.ID)
		}
	}
	if ep.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = ep.srv.Shutdown(sctx)
		cancel()
	}
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
