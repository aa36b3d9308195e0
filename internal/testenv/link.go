package testenv

import (
	"net"
	"sync"
)

// Link is a TCP path to a target (an agent's HTTP API) that the test can
// cut without root: while cut, new connections are accepted but never
// connected and data on open ones is held, as a dropped network would do
// (requests hang until the client gives up; nothing is refused). Heal
// lets the held data through.
type Link struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	changed *sync.Cond
	cut     bool
	closed  bool
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

// NewLink listens on listen ("127.0.0.1:0" for any port) and forwards to
// target.
func NewLink(listen, target string) (*Link, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]bool{}}
	l.changed = sync.NewCond(&l.mu)
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Addr is host:port to connect to instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut stops the traffic; Heal resumes it.
func (l *Link) Cut() { l.set(true) }

// Heal resumes the traffic held by Cut.
func (l *Link) Heal() { l.set(false) }

func (l *Link) set(cut bool) {
	l.mu.Lock()
	l.cut = cut
	l.changed.Broadcast()
	l.mu.Unlock()
}

// Close stops the link and closes every connection through it.
func (l *Link) Close() {
	_ = l.ln.Close()
	l.mu.Lock()
	l.closed = true
	l.changed.Broadcast()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *Link) waitOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.cut && !l.closed {
		l.changed.Wait()
	}
	return !l.closed
}

func (l *Link) track(c net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		if l.closed {
			return false
		}
		l.conns[c] = true
	} else {
		delete(l.conns, c)
	}
	return true
}

func (l *Link) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { _ = c.Close() }()
			if !l.track(c, true) {
				return
			}
			defer l.track(c, false)
			if !l.waitOpen() {
				return
			}
			up, err := net.Dial("tcp", l.target)
			if err != nil {
				return
			}
			defer func() { _ = up.Close() }()
			if !l.track(up, true) {
				return
			}
			defer l.track(up, false)
			done := make(chan struct{}, 2)
			go func() { l.copy(up, c); done <- struct{}{} }()
			go func() { l.copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

func (l *Link) copy(w, r net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if !l.waitOpen() {
				return
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
