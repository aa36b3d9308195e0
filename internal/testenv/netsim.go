package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// netSim puts every cluster member behind proxies the test controls, so
// that one member can be cut off from the others without root: each member
// binds its own loopback address (bindIP) and advertises another one
// (proxyIP) where the proxies listen. Everything sent to a member (Serf
// gossip over UDP and TCP, Raft and RPC over TCP) goes through its proxies,
// which drop or hold whatever comes from or goes to a cut member.
//
// Senders are recognised by source address: Serf's UDP socket and Consul's
// RPC connections are bound to the member's bindIP. Memberlist's own TCP
// connections (push-pull, fallback probes) are not bound and come from
// 127.0.0.1: they cannot be attributed, so while any member is cut they
// are held for every member (a few seconds without anti-entropy between
// healthy members; their UDP probes and their RPC are untouched).
type netSim struct {
	mu      sync.Mutex
	changed *sync.Cond
	members map[string]*simMember // by bindIP
	cut     map[*simMember]bool
	closed  bool

	wg sync.WaitGroup
}

type simMember struct {
	name           string
	bindIP, proxIP string
	udp            *net.UDPConn     // the proxy's UDP socket on proxIP:serf
	serfPort       int              // bound on bindIP and proxIP (TCP and UDP)
	tcp            []net.Listener   // proxies for serf TCP and (servers) the RPC port
	conns          map[net.Conn]int // open proxied connections
}

func newNetSim() *netSim {
	n := &netSim{members: map[string]*simMember{}, cut: map[*simMember]bool{}}
	n.changed = sync.NewCond(&n.mu)
	return n
}

// add starts the proxies of one member: UDP and TCP on serfPort, TCP on
// each of tcpPorts (the server RPC port), all on proxIP, forwarding to the
// same ports on bindIP.
func (n *netSim) add(name, bindIP, proxIP string, serfPort int, tcpPorts ...int) error {
	m := &simMember{name: name, bindIP: bindIP, proxIP: proxIP, serfPort: serfPort, conns: map[net.Conn]int{}}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(proxIP), Port: serfPort})
	if err != nil {
		return fmt.Errorf("proxy for %s: %w", name, err)
	}
	m.udp = udp
	for _, port := range append([]int{serfPort}, tcpPorts...) {
		ln, err := net.Listen("tcp", net.JoinHostPort(proxIP, fmt.Sprint(port)))
		if err != nil {
			_ = udp.Close()
			for _, l := range m.tcp {
				_ = l.Close()
			}
			return fmt.Errorf("proxy for %s: %w", name, err)
		}
		m.tcp = append(m.tcp, ln)
	}
	n.mu.Lock()
	n.members[bindIP] = m
	n.mu.Unlock()
	n.wg.Add(1 + len(m.tcp))
	go n.serveUDP(m)
	for _, ln := range m.tcp {
		go n.serveTCP(m, ln)
	}
	return nil
}

// setCut cuts a member off (or heals it). Held TCP data flows again on heal.
func (n *netSim) setCut(name string, cut bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.members {
		if m.name == name {
			if cut {
				n.cut[m] = true
			} else {
				delete(n.cut, m)
			}
			n.changed.Broadcast()
			return nil
		}
	}
	return fmt.Errorf("no cluster member %q", name)
}

// blocked reports whether traffic from src (nil: not attributable) to dst
// is cut. Called with n.mu held.
func (n *netSim) blocked(src, dst *simMember) bool {
	if n.cut[dst] {
		return true
	}
	if src == nil {
		return len(n.cut) > 0
	}
	return n.cut[src]
}

func (n *netSim) serveUDP(dst *simMember) {
	defer n.wg.Done()
	to := &net.UDPAddr{IP: net.ParseIP(dst.bindIP), Port: dst.serfPort}
	buf := make([]byte, 65536)
	for {
		size, from, err := dst.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		n.mu.Lock()
		src := n.members[from.IP.String()]
		drop := src == nil || n.blocked(src, dst)
		n.mu.Unlock()
		if drop {
			continue // a partition drops datagrams
		}
		// Sent from the sender's own proxy socket, so that a reply to the
		// datagram's source goes back through the sender's proxy.
		_, _ = src.udp.WriteToUDP(buf[:size], to)
	}
}

func (n *netSim) serveTCP(dst *simMember, ln net.Listener) {
	defer n.wg.Done()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	target := net.JoinHostPort(dst.bindIP, port)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.pipe(dst, c, target)
		}()
	}
}

// pipe forwards one connection. While the link is cut, the data read is
// held (as TCP retransmits it until the partition heals or the sender
// gives up) and nothing is connected.
func (n *netSim) pipe(dst *simMember, c net.Conn, target string) {
	defer func() { _ = c.Close() }()
	var src *simMember
	if addr, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		n.mu.Lock()
		src = n.members[addr.IP.String()]
		n.mu.Unlock()
	}
	n.track(dst, c, 1)
	defer n.track(dst, c, -1)
	if !n.waitOpen(src, dst) {
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	n.track(dst, up, 1)
	defer n.track(dst, up, -1)
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { n.copy(src, dst, up, c); done <- struct{}{} }()
	go func() { n.copy(src, dst, c, up); done <- struct{}{} }()
	<-done
}

func (n *netSim) track(m *simMember, c net.Conn, delta int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if delta > 0 {
		m.conns[c]++
	} else {
		delete(m.conns, c)
	}
}

// waitOpen blocks while traffic between src and dst is cut; false once the
// simulation is closed.
func (n *netSim) waitOpen(src, dst *simMember) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for !n.closed && n.blocked(src, dst) {
		n.changed.Wait()
	}
	return !n.closed
}

func (n *netSim) copy(src, dst *simMember, w io.Writer, r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		size, err := r.Read(buf)
		if size > 0 {
			if !n.waitOpen(src, dst) {
				return
			}
			if _, werr := w.Write(buf[:size]); werr != nil {
				return
			}
		}
		if err != nil {
			if cw, ok := w.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
				_ = cw.CloseWrite()
			}
			return
		}
	}
}

// close stops every proxy and connection.
func (n *netSim) close() {
	n.mu.Lock()
	n.closed = true
	n.changed.Broadcast()
	for _, m := range n.members {
		_ = m.udp.Close()
		for _, ln := range m.tcp {
			_ = ln.Close()
		}
		for c := range m.conns {
			_ = c.Close()
		}
	}
	n.mu.Unlock()
	n.wg.Wait()
}
