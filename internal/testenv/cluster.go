package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// Cluster is a real Consul cluster on loopback: servers (Raft,
// bootstrap_expect = number of servers) and client agents, each with its
// own node name, ACLs on with default_policy = "deny", all started from
// the same binary (CONSUL_BIN). As in production, runners and the provider
// talk to a client agent.
//
// Every member is reached through proxies the test controls (see netSim),
// so that Cut can partition one member without root.
type Cluster struct {
	// ManagementToken is the initial management token (secret).
	ManagementToken string
	// Datacenter is the cluster's datacenter.
	Datacenter string
	// Servers and Clients are the members, in start order.
	Servers, Clients []*Node
	// Dir holds every member's configuration, data and log.
	Dir string
	// Bin is the consul binary used.
	Bin string

	net *netSim
}

// Node is one member of a Cluster.
type Node struct {
	// Name is the node name (sessions created through a client agent live
	// on its node).
	Name string
	// Server is true for a Raft server.
	Server bool
	// Addr is host:port of the member's HTTP API (on 127.0.0.1, never cut).
	Addr string
	// DNSAddr is host:port of the member's DNS interface (UDP and TCP, on
	// 127.0.0.1) with ClusterOptions.DNS, else "".
	DNSAddr string
	// BindIP is the loopback address the member binds; AdvertiseIP is the
	// one the others reach it at (its proxies).
	BindIP, AdvertiseIP string
	// Dir holds the member's configuration, data and log.
	Dir string

	c        *Cluster
	config   string
	serfAddr string // advertised Serf LAN address
	dnsPort  int    // -1: no DNS interface

	mu      sync.Mutex
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
}

// ClusterOptions size a cluster; the zero value is three servers and two
// clients.
type ClusterOptions struct {
	Servers, Clients int
	// ExtraConfig is appended to every member's configuration.
	ExtraConfig string
	// DNS serves each member's DNS interface on its DNSAddr, with
	// dns_config.allow_stale = false: every answer comes from the Raft
	// leader's state, so it reflects every write acknowledged before the
	// query (with Consul's default, true, a follower answers from its own
	// copy, which trails the leader by its replication lag).
	DNS bool
}

// Gossip and Raft timing for fast tests. Serf LAN timing is not in
// Consul's documented configuration, but 1.14 reads it from the
// (undocumented) gossip_lan block (agent/config/config.go GossipLANConfig,
// the same block `-dev` sets): probes every 500ms with a 300ms timeout, a
// suspicion multiplier of 4, so a silent node is declared failed within a
// few seconds instead of tens. The values leave room for a loaded 2-core
// machine: a healthy member must not be suspected. Autopilot promotes a
// (re)started server to voter after 2s of stability instead of 10s.
const fastTiming = `
performance {
  raft_multiplier = 1
}
autopilot {
  server_stabilization_time = "2s"
}
gossip_lan {
  gossip_interval = "100ms"
  probe_interval  = "500ms"
  probe_timeout   = "300ms"
  suspicion_mult  = 4
}
`

var clusterCounter struct {
	sync.Mutex
	n int
}

// StartCluster starts the cluster and waits until it has a leader and every
// client's node is registered with a passing serfHealth. Call Stop (or use
// StartClusterT) when done.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Servers == 0 {
		opts.Servers = 3
	}
	if opts.Clients == 0 {
		opts.Clients = 2
	}
	bin, err := ToolPath("CONSUL_BIN", "consul")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "consullock-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{ManagementToken: NewUUID(), Datacenter: "dc1", Dir: dir, Bin: bin, net: newNetSim()}
	ok := false
	defer func() {
		if !ok {
			c.Stop(true)
		}
	}()
	// Each member binds 127.<a>.<b>.<2i+1> and advertises .<2i+2>: a
	// block of addresses per cluster, so that clusters of concurrent test
	// processes do not share addresses.
	clusterCounter.Lock()
	clusterCounter.n++
	seq := clusterCounter.n
	clusterCounter.Unlock()
	block := (os.Getpid()*7 + seq) % 25000
	ipBase := fmt.Sprintf("127.%d.%d.", 100+block/250, block%250)
	total := opts.Servers + opts.Clients
	var joins []string
	for i := range total {
		n, err := c.newNode(i, ipBase, opts)
		if err != nil {
			return nil, err
		}
		if n.Server {
			joins = append(joins, n.serfAddr)
			c.Servers = append(c.Servers, n)
		} else {
			c.Clients = append(c.Clients, n)
		}
	}
	for _, n := range c.all() {
		join := fmt.Sprintf("\nretry_join = [%s]\nretry_interval = \"1s\"\n", quoteList(joins))
		if err := os.WriteFile(filepath.Join(n.Dir, "agent.hcl"), []byte(n.config+join), 0o600); err != nil {
			return nil, err
		}
		if err := n.start(); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// newNode makes member i of the cluster (servers first): its directory,
// addresses, ports and configuration, not yet started.
func (c *Cluster) newNode(i int, ipBase string, opts ClusterOptions) (*Node, error) {
	n := &Node{c: c, Server: i < opts.Servers, BindIP: ipBase + fmt.Sprint(2*i+1), AdvertiseIP: ipBase + fmt.Sprint(2*i+2)}
	if n.Server {
		n.Name = fmt.Sprintf("server-%d", i+1)
	} else {
		n.Name = fmt.Sprintf("client-%d", i-opts.Servers+1)
	}
	n.Dir = filepath.Join(c.Dir, n.Name)
	if err := os.MkdirAll(n.Dir, 0o700); err != nil {
		return nil, err
	}
	serf, server, http, err := n.pickPorts()
	if err != nil {
		return nil, err
	}
	n.Addr = fmt.Sprintf("127.0.0.1:%d", http)
	var rpcPorts []int
	n.serfAddr = net.JoinHostPort(n.AdvertiseIP, fmt.Sprint(serf))
	if n.Server {
		rpcPorts = append(rpcPorts, server)
	}
	if err := c.net.add(n.Name, n.BindIP, n.AdvertiseIP, serf, rpcPorts...); err != nil {
		return nil, err
	}
	n.dnsPort = -1
	if opts.DNS {
		if n.dnsPort, err = freeDNSPort(); err != nil {
			return nil, err
		}
		n.DNSAddr = fmt.Sprintf("127.0.0.1:%d", n.dnsPort)
	}
	n.config = n.renderConfig(serf, server, http, opts.Servers) + fastTiming + opts.ExtraConfig
	if opts.DNS {
		n.config += "dns_config {\n  allow_stale = false\n}\n"
	}
	return n, nil
}

// StartClusterT starts a cluster that is stopped when t ends; its logs are
// kept (and their place logged) when t failed.
func StartClusterT(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartCluster(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		keep := t.Failed()
		if keep {
			t.Logf("Consul cluster logs kept in %s", c.Dir)
		}
		c.Stop(keep)
	})
	return c
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// freeDNSPort is a port free on 127.0.0.1 for both TCP and UDP.
func freeDNSPort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			_ = l.Close()
			return 0, fmt.Errorf("unexpected listener address %v", l.Addr())
		}
		port := addr.Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		_ = l.Close()
		if err == nil {
			_ = pc.Close()
			return port, nil
		}
	}
	return 0, errors.New("no port free for TCP and UDP")
}

func (c *Cluster) all() []*Node { return append(append([]*Node{}, c.Servers...), c.Clients...) }

// pickPorts finds a serf port free for TCP and UDP on both of the member's
// addresses, a server port free on both, and an HTTP port on 127.0.0.1.
func (n *Node) pickPorts() (serf, server, httpPort int, err error) {
	free := func(udp bool) (int, error) {
		for range 50 {
			l, err := net.Listen("tcp", n.BindIP+":0")
			if err != nil {
				return 0, fmt.Errorf("binding %s (loopback addresses other than 127.0.0.1 are needed): %w", n.BindIP, err)
			}
			addr, ok := l.Addr().(*net.TCPAddr)
			if !ok {
				_ = l.Close()
				return 0, fmt.Errorf("unexpected listener address %v", l.Addr())
			}
			port := addr.Port
			holds := []interface{ Close() error }{l}
			good := true
			try := func(network, ip string) {
				if !good {
					return
				}
				addr := net.JoinHostPort(ip, fmt.Sprint(port))
				if network == "udp" {
					pc, err := net.ListenPacket("udp", addr)
					if err != nil {
						good = false
						return
					}
					holds = append(holds, pc)
					return
				}
				l, err := net.Listen("tcp", addr)
				if err != nil {
					good = false
					return
				}
				holds = append(holds, l)
			}
			try("tcp", n.AdvertiseIP)
			if udp {
				try("udp", n.BindIP)
				try("udp", n.AdvertiseIP)
			}
			for _, h := range holds {
				_ = h.Close()
			}
			if good {
				return port, nil
			}
		}
		return 0, errors.New("no free port found")
	}
	if serf, err = free(true); err != nil {
		return
	}
	if server, err = free(false); err != nil {
		return
	}
	ports, err := freePorts(1)
	if err != nil {
		return
	}
	return serf, server, ports[0], nil
}

func (n *Node) renderConfig(serf, server, httpPort, servers int) string {
	role := "server = false\n"
	initial := ""
	if n.Server {
		role = fmt.Sprintf("server = true\nbootstrap_expect = %d\n", servers)
		initial = fmt.Sprintf("    initial_management = %q\n", n.c.ManagementToken)
	}
	return fmt.Sprintf(`node_name      = %q
datacenter     = %q
data_dir       = %q
bind_addr      = %q
advertise_addr = %q
client_addr    = "127.0.0.1"
log_level      = "INFO"
%sports {
  http     = %d
  server   = %d
  serf_lan = %d
  serf_wan = -1
  grpc     = -1
  grpc_tls = -1
  dns      = %d
  https    = -1
}
limits {
  http_max_conns_per_client = 4096
}
acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = false
  tokens {
%s    agent = %q
  }
}
`, n.Name, n.c.Datacenter, filepath.Join(n.Dir, "data"), n.BindIP, n.AdvertiseIP, role, httpPort, server, serf, n.dnsPort, initial, n.c.ManagementToken)
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	logFile, err := os.OpenFile(filepath.Join(n.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.c.Bin, "agent", "-config-file", filepath.Join(n.Dir, "agent.hcl"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", n.c.Bin, err)
	}
	done := make(chan struct{})
	n.cmd, n.logFile, n.done = cmd, logFile, done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// Running reports whether the member's process is alive (frozen counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// PID is the member's process id (0 when not running).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Kill ends the member with SIGKILL, as a crash or a power loss would: it
// does not leave the cluster.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done, logFile := n.cmd, n.done, n.logFile
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen member cannot die otherwise
	_ = cmd.Process.Kill()
	<-done
	_ = logFile.Close()
}

// Start starts a killed member again with its data and waits until it is
// back: a server until the cluster has a leader and it answers, a client
// until its node's serfHealth passes.
func (n *Node) Start(ctx context.Context) error {
	if n.Running() {
		return fmt.Errorf("%s is already running", n.Name)
	}
	if err := n.start(); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	if n.Server {
		return n.c.waitVoters(ctx)
	}
	return nil
}

// Restart kills the member and starts it again.
func (n *Node) Restart(ctx context.Context) error {
	n.Kill()
	return n.Start(ctx)
}

// Freeze stops the member's process (SIGSTOP), as a VM pause or a stuck
// host would: its HTTP API accepts connections but never answers, and it
// stops answering gossip. Thaw resumes it.
func (n *Node) Freeze() error { return n.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen member (SIGCONT).
func (n *Node) Thaw() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s is not running", n.Name)
	}
	return n.cmd.Process.Signal(sig)
}

// Cut partitions the member from every other member (gossip, Raft, RPC in
// both directions); its HTTP API stays reachable, as the agent on a cut
// node is for the processes on that node. Heal ends the partition.
func (n *Node) Cut() error { return n.c.net.setCut(n.Name, true) }

// Heal ends a partition made by Cut. During the cut each side declared the
// other failed, and Serf only retries failed members every 30s; Heal then
// asks the member to join the servers again, as that retry would.
func (n *Node) Heal() error {
	if err := n.c.net.setCut(n.Name, false); err != nil {
		return err
	}
	var last error
	for _, s := range n.c.Servers {
		if s == n || !s.Running() {
			continue
		}
		if last = n.quickClient().Agent().Join(s.serfAddr, false); last == nil {
			return nil
		}
	}
	return last
}

// Client returns an API client for this member with the management token.
func (n *Node) Client() *api.Client { return n.ClientWithToken(n.c.ManagementToken) }

// ClientWithToken returns an API client for this member using token.
func (n *Node) ClientWithToken(token string) *api.Client {
	cl, err := api.NewClient(&api.Config{Address: n.Addr, Token: token, HttpClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		panic(err) // only on a malformed address, which StartCluster controls
	}
	return cl
}

// Env returns the CONSUL_* variables that point a program at this member
// with the management token.
func (n *Node) Env() []string {
	return []string{"CONSUL_HTTP_ADDR=" + n.Addr, "CONSUL_HTTP_TOKEN=" + n.c.ManagementToken}
}

// LogTail returns the last lines of the member's log.
func (n *Node) LogTail(lines int) string {
	data, _ := os.ReadFile(filepath.Join(n.Dir, "agent.log"))
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Node returns the member with this node name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.all() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Leader returns the server that is the Raft leader, as a running server
// reports it (/v1/status/leader gives the leader's advertised RPC address).
func (c *Cluster) Leader() (*Node, error) {
	var last error
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		cl := s.quickClient()
		addr, err := cl.Status().Leader()
		if err != nil {
			last = err
			continue
		}
		if addr == "" {
			last = errors.New("no cluster leader")
			continue
		}
		host, _, _ := net.SplitHostPort(addr)
		for _, cand := range c.Servers {
			if cand.AdvertiseIP == host {
				return cand, nil
			}
		}
		return nil, fmt.Errorf("leader %s is not a member of this cluster", addr)
	}
	if last == nil {
		last = errors.New("no server running")
	}
	return nil, last
}

// WaitLeader waits until a running server reports a leader, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (*Node, error) {
	var last error
	for {
		l, err := c.Leader()
		if err == nil && l.Running() {
			return l, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RetryWhile runs op until it succeeds, fails with an error that transient
// does not accept, or ctx ends; it returns the attempts made and the last
// error. Right after an election a client agent's first RPC may still go
// out on its connection to the dead server and fail transiently ("rpc error
// making call: EOF", or "... stream closed"): tests that write then pass
// consul.IsTransientText, the same list consullock's client retries on.
func RetryWhile(ctx context.Context, transient func(error) bool, op func() error) (int, error) {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || !transient(err) {
			return attempt, err
		}
		select {
		case <-ctx.Done():
			return attempt, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// quickClient answers fast or not at all (a frozen member never answers).
func (n *Node) quickClient() *api.Client {
	cl, err := api.NewClient(&api.Config{Address: n.Addr, Token: n.c.ManagementToken, HttpClient: &http.Client{Timeout: 2 * time.Second}})
	if err != nil {
		panic(err)
	}
	return cl
}

// WaitHealthy waits until there is a leader, every running server knows it
// and every running client's node is registered with a passing serfHealth.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, n := range c.all() {
		if !n.Running() {
			continue
		}
		if err := n.waitReady(ctx); err != nil {
			return err
		}
	}
	return c.waitVoters(ctx)
}

// waitVoters waits until every running server is a Raft voter. A server
// that has just (re)joined is a non-voter until autopilot promotes it:
// killing the leader before that could leave no quorum.
func (c *Cluster) waitVoters(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		if last = c.votersReady(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("servers not all voters: %w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) votersReady() error {
	var via *Node
	for _, s := range c.Servers {
		if s.Running() {
			via = s
			break
		}
	}
	if via == nil {
		return errors.New("no server running")
	}
	cfg, err := via.quickClient().Operator().RaftGetConfiguration(&api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err
	}
	voters := map[string]bool{}
	for _, srv := range cfg.Servers {
		host, _, _ := net.SplitHostPort(srv.Address)
		voters[host] = srv.Voter
	}
	for _, s := range c.Servers {
		if s.Running() && !voters[s.AdvertiseIP] {
			return fmt.Errorf("%s is not a voter yet", s.Name)
		}
	}
	return nil
}

func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("%s exited\n%s", n.Name, n.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)\n%s", n.Name, ctx.Err(), last, n.LogTail(30))
		case <-time.After(100 * time.Millisecond):
		}
		last = n.ready()
		if last == nil {
			return nil
		}
	}
}

func (n *Node) ready() error {
	cl := n.quickClient()
	leader, err := cl.Status().Leader()
	if err != nil || leader == "" {
		return fmt.Errorf("no leader yet: %v", err)
	}
	// Its own node registered with a passing serfHealth, seen through
	// the servers (a consistent read): sessions need that.
	checks, _, err := cl.Health().Node(n.Name, &api.QueryOptions{RequireConsistent: true})
	if err != nil || len(checks) == 0 || checks.AggregatedStatus() != api.HealthPassing {
		return fmt.Errorf("serfHealth of %s not passing yet: %v", n.Name, err)
	}
	return nil
}

// Stop kills every member, stops the proxies, and removes the cluster's
// directory unless keepLogs.
func (c *Cluster) Stop(keepLogs bool) {
	var wg sync.WaitGroup
	for _, n := range c.all() {
		wg.Go(n.Kill)
	}
	wg.Wait()
	c.net.close()
	if !keepLogs {
		_ = os.RemoveAll(c.Dir)
	}
}
