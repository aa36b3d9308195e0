// Package testenv starts a real Consul agent (dev mode, ACLs on,
// default_policy = "deny") for tests, and mints least-privilege tokens.
//
// The binary comes from CONSUL_BIN or <repo>/bin/consul (built by
// `make tools`). A missing binary is an error, never a skip: tests that
// claim to run against Consul must do so.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// Agent is a running Consul dev agent.
type Agent struct {
	// Addr is host:port of the HTTP API.
	Addr string
	// ManagementToken is the initial management token (secret).
	ManagementToken string
	// NodeName is the agent's node name; sessions live on this node.
	NodeName string
	// Datacenter is the agent's datacenter.
	Datacenter string
	// Dir holds the agent's config, data and log.
	Dir string
	// Bin is the consul binary used.
	Bin string
	// HTTPSAddr is host:port of the TLS API when Options.TLS is set.
	HTTPSAddr string
	// CAFile is the CA that signed the agent's certificate (Options.TLS).
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate the TLS
	// API requires (verify_incoming is on with Options.TLS).
	ClientCertFile, ClientKeyFile string
	// DNSAddr is host:port of the DNS interface (UDP and TCP) when
	// Options.DNS is set.
	DNSAddr string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	ports   ports
	config  string
}

type ports struct{ HTTP, HTTPS, Server, SerfLAN, SerfWAN, DNS int }

// RepoRoot finds the directory holding the root go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/consullock/terraform-provider-consullock\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/consullock/terraform-provider-consullock) not found")
		}
		dir = parent
	}
}

// ToolPath returns the absolute path of a tool built into <repo>/bin, or the
// value of envVar when set. It fails with instructions when missing.
func ToolPath(envVar, name string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return filepath.Abs(p)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found at %s (set %s or run `make tools`)", name, p, envVar)
	}
	return p, nil
}

// Options tune an agent; the zero value is the standard test agent.
type Options struct {
	// NodeName defaults to "consullock-test".
	NodeName string
	// ExtraConfig is appended to the generated HCL configuration.
	ExtraConfig string
	// TLS also serves the HTTP API over TLS on HTTPSAddr, with a CA and a
	// server certificate made by `consul tls` in the agent's directory.
	TLS bool
	// DNS serves the DNS interface on DNSAddr (a free port).
	DNS bool
}

// Start launches an agent and waits until it has a leader and its own node
// is registered (sessions need that). Call Stop when done.
func Start(ctx context.Context, opts Options) (*Agent, error) {
	bin, err := ToolPath("CONSUL_BIN", "consul")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "consullock-agent-")
	if err != nil {
		return nil, err
	}
	a := &Agent{
		Bin:             bin,
		Dir:             dir,
		ManagementToken: NewUUID(),
		NodeName:        opts.NodeName,
		Datacenter:      "dc1",
		done:            make(chan struct{}),
	}
	if a.NodeName == "" {
		a.NodeName = "consullock-test"
	}
	free, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	a.ports = ports{HTTP: free[0], Server: free[1], SerfLAN: free[2], SerfWAN: free[3], HTTPS: -1, DNS: -1}
	if opts.DNS {
		a.ports.DNS = free[5]
		a.DNSAddr = fmt.Sprintf("127.0.0.1:%d", a.ports.DNS)
	}
	a.Addr = fmt.Sprintf("127.0.0.1:%d", a.ports.HTTP)
	extra := opts.ExtraConfig
	if opts.TLS {
		tlsConfig, err := a.makeCertificates(ctx)
		if err != nil {
			return nil, err
		}
		a.ports.HTTPS = free[4]
		a.HTTPSAddr = fmt.Sprintf("127.0.0.1:%d", a.ports.HTTPS)
		extra += tlsConfig
	}
	a.config = filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(a.config, []byte(a.renderConfig(extra)), 0o600); err != nil {
		return nil, err
	}
	if err := a.start(); err != nil {
		return nil, err
	}
	if err := a.waitReady(ctx); err != nil {
		a.Stop()
		return nil, fmt.Errorf("consul agent not ready: %w\n%s", err, a.LogTail(40))
	}
	return a, nil
}

func (a *Agent) renderConfig(extra string) string {
	// gRPC, gRPC-TLS and DNS (unless Options.DNS) are off: dev mode would
	// otherwise take fixed ports (8502, 8503, 8600) and collide with other
	// agents on the machine.
	return fmt.Sprintf(`node_name   = %q
datacenter  = %q
data_dir    = %q
bind_addr   = "127.0.0.1"
client_addr = "127.0.0.1"
log_level   = "INFO"
ports {
  http     = %d
  server   = %d
  serf_lan = %d
  serf_wan = %d
  grpc     = -1
  grpc_tls = -1
  dns      = %d
  https    = %d
}
# Tests configure many short-lived provider clients in one process, each
# with its own idle connection pool; Consul's default of 200 connections
# per client address would answer 429.
limits {
  http_max_conns_per_client = 4096
}
acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = false
  tokens {
    initial_management = %q
    agent              = %q
  }
}
%s
`, a.NodeName, a.Datacenter, filepath.Join(a.Dir, "data"), a.ports.HTTP, a.ports.Server, a.ports.SerfLAN, a.ports.SerfWAN, a.ports.DNS, a.ports.HTTPS, a.ManagementToken, a.ManagementToken, extra)
}

// makeCertificates creates a CA and a server certificate (valid for
// 127.0.0.1 and localhost) with the consul CLI, and returns the TLS stanza.
func (a *Agent) makeCertificates(ctx context.Context) (string, error) {
	for _, args := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "-server", "-dc", a.Datacenter},
		{"tls", "cert", "create", "-client", "-dc", a.Datacenter},
	} {
		cmd := exec.CommandContext(ctx, a.Bin, args...)
		cmd.Dir = a.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("consul %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	a.CAFile = filepath.Join(a.Dir, "consul-agent-ca.pem")
	a.ClientCertFile = filepath.Join(a.Dir, a.Datacenter+"-client-consul-0.pem")
	a.ClientKeyFile = filepath.Join(a.Dir, a.Datacenter+"-client-consul-0-key.pem")
	return fmt.Sprintf(`
tls {
  defaults {
    ca_file         = %q
    cert_file       = %q
    key_file        = %q
    verify_incoming = true
  }
}
`, a.CAFile, filepath.Join(a.Dir, a.Datacenter+"-server-consul-0.pem"), filepath.Join(a.Dir, a.Datacenter+"-server-consul-0-key.pem")), nil
}

func (a *Agent) start() error {
	logFile, err := os.OpenFile(filepath.Join(a.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.Bin, "agent", "-dev", "-config-file", a.config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group, and die with the parent so a crashed test run
	// does not leave agents behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", a.Bin, err)
	}
	a.cmd, a.logFile, a.done = cmd, logFile, make(chan struct{})
	done := a.done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

func (a *Agent) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	client := a.Client()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-a.done:
			return errors.New("agent exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
		leader, err := client.Status().Leader()
		if err != nil || leader == "" {
			last = fmt.Errorf("no leader yet: %v", err)
			continue
		}
		node, _, err := client.Catalog().Node(a.NodeName, nil)
		if err != nil || node == nil {
			last = fmt.Errorf("node not registered yet: %v", err)
			continue
		}
		checks, _, err := client.Health().Node(a.NodeName, nil)
		if err != nil || len(checks) == 0 || checks.AggregatedStatus() != api.HealthPassing {
			last = fmt.Errorf("serfHealth not passing yet: %v", err)
			continue
		}
		return nil
	}
}

// Stop terminates the agent and removes its directory.
func (a *Agent) Stop() {
	a.kill()
	_ = os.RemoveAll(a.Dir)
}

func (a *Agent) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	if a.logFile != nil {
		_ = a.logFile.Close()
	}
}

// Restart stops and starts the agent on the same ports. A dev agent keeps
// no state across restarts: callers re-create what they need.
func (a *Agent) Restart(ctx context.Context) error {
	a.kill()
	if err := a.start(); err != nil {
		return err
	}
	return a.waitReady(ctx)
}

// LogTail returns the last n lines of the agent log.
func (a *Agent) LogTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(a.Dir, "agent.log"))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Client returns an API client with the management token.
func (a *Agent) Client() *api.Client {
	return a.ClientWithToken(a.ManagementToken)
}

// ClientWithToken returns an API client using token ("" = anonymous).
func (a *Agent) ClientWithToken(token string) *api.Client {
	c, err := api.NewClient(&api.Config{Address: a.Addr, Token: token, HttpClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		panic(err) // only on a malformed address, which Start controls
	}
	return c
}

// HTTPAddr returns "http://host:port".
func (a *Agent) HTTPAddr() string { return "http://" + a.Addr }

// Env returns the CONSUL_* variables that point the provider, the
// controller or the consul CLI at this agent with the management token.
func (a *Agent) Env() []string {
	return []string{"CONSUL_HTTP_ADDR=" + a.Addr, "CONSUL_HTTP_TOKEN=" + a.ManagementToken}
}

var prefixCounter atomic.Uint64

// UniquePrefix returns a KV prefix no other test in this process uses.
func UniquePrefix(name string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		default:
			return '-'
		}
	}, name)
	return fmt.Sprintf("t/%s-%d-%d", strings.ToLower(clean), os.Getpid(), prefixCounter.Add(1))
}

// NewUUID returns a random RFC 4122 version 4 UUID, as Consul tokens are.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("unexpected listener address %v", l.Addr())
		}
		out = append(out, addr.Port)
	}
	// Serf also needs the UDP port free; TCP and UDP ranges overlap rarely
	// enough on loopback that a collision shows as a failed start.
	return out, nil
}

// RunWithAgent is the body of a TestMain whose package shares one agent:
// it starts the agent into *agent, runs the tests, stops the agent and
// returns the exit code.
func RunWithAgent(m *testing.M, agent **Agent) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	a, err := Start(ctx, Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting consul:", err)
		return 1
	}
	*agent = a
	defer a.Stop()
	return m.Run()
}
