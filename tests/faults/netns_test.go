package faults

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// partition puts one worker in a network namespace of its own, made by the
// test with `ip netns` and two veth pairs: one path to Consul (through a TCP
// forwarder, since the agent listens on loopback only), one to the store.
// Cutting the Consul path (link down on the host side) partitions the
// worker from its agent while its child can still reach the store: the
// worst case for a guarded resource.
type partition struct {
	ns         string
	consulLink string // host side of the Consul path
	consulAddr string // the forwarder, as the namespace reaches it
	storeHost  string // the host's address on the store path
	forwarder  net.Listener
}

// netnsAvailable reports whether this machine lets the test make network
// namespaces (root, iproute2, a kernel with veth).
func netnsAvailable() error {
	name := fmt.Sprintf("clfprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return nil
}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newPartition makes the namespace, the veth pairs and the forwarder to
// the agent. Everything is removed when the test ends.
func newPartition(t testing.TB, agentAddr string) *partition {
	t.Helper()
	id := os.Getpid() % 10000000
	// Two /30 subnets per process, so that concurrent test processes do
	// not collide: 10.213.<pid%250>.0/30 to Consul, .4/30 to the store.
	subnet := fmt.Sprintf("10.213.%d.", id%250)
	consulHost := subnet + "1"
	p := &partition{ns: fmt.Sprintf("clf%d", id), consulLink: fmt.Sprintf("clf%dh0", id), storeHost: subnet + "5"}
	ipCmd(t, "netns", "add", p.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.ns).Run() })
	for i, pair := range [][2]string{{consulHost, subnet + "2"}, {p.storeHost, subnet + "6"}} {
		host, peer := pair[0], pair[1]
		h, n := fmt.Sprintf("clf%dh%d", id, i), fmt.Sprintf("clf%dn%d", id, i)
		ipCmd(t, "link", "add", h, "type", "veth", "peer", "name", n)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", h).Run() })
		ipCmd(t, "link", "set", n, "netns", p.ns)
		ipCmd(t, "addr", "add", host+"/30", "dev", h)
		ipCmd(t, "link", "set", h, "up")
		ipCmd(t, "netns", "exec", p.ns, "ip", "addr", "add", peer+"/30", "dev", n)
		ipCmd(t, "netns", "exec", p.ns, "ip", "link", "set", n, "up")
	}
	ipCmd(t, "netns", "exec", p.ns, "ip", "link", "set", "lo", "up")
	ln, err := net.Listen("tcp", net.JoinHostPort(consulHost, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p.forwarder, p.consulAddr = ln, ln.Addr().String()
	go p.forward(agentAddr)
	t.Cleanup(func() { _ = ln.Close() })
	return p
}

// forward copies connections from the namespace to the agent.
func (p *partition) forward(target string) {
	for {
		c, err := p.forwarder.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			up, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer func() { _ = up.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// cut partitions the namespace from the agent; heal ends it.
func (p *partition) cut(t testing.TB)  { ipCmd(t, "link", "set", p.consulLink, "down") }
func (p *partition) heal(t testing.TB) { ipCmd(t, "link", "set", p.consulLink, "up") }

// wrap is the command prefix that runs a program in the namespace.
func (p *partition) wrap() []string { return []string{"ip", "netns", "exec", p.ns} }
