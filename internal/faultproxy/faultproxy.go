// Package faultproxy is a TCP proxy for fault tests: it forwards connections to a target
// (a database server) and can freeze them, holding every byte while the connections stay
// open as a frozen network link does, and reset them, as a dropped link does.
package faultproxy

import (
	"net"
	"sync"
)

// Proxy forwards the connections it accepts on Addr to its target.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen; a fresh one while frozen
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

// link is one client connection and its connection to the target.
type link struct {
	client, server net.Conn
}

// Start listens on a loopback port and forwards what it accepts to target (host:port),
// until Close.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{target: target, ln: ln, thawed: thawed, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding: every byte sent either way, on open or new connections, is held
// until Thaw; connections stay open and new ones are accepted.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw forwards again what Freeze held and whatever follows.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// Reset drops every open connection, with a TCP reset to the client: what was in flight is
// lost, as when a link or the server goes down. New connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// Close stops accepting, drops every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Thaw()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c to the target, once the proxy is not frozen, and forwards both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.wait()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.forward(s, c) }()
	go func() { defer both.Done(); p.forward(c, s) }()
	both.Wait()
	l.reset()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// forward copies from src to dst, holding each read while the proxy is frozen, until either
// side fails; then it closes both, so that the other direction ends too.
func (p *Proxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

// wait returns once the proxy is not frozen.
func (p *Proxy) wait() {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	<-thawed
}

// reset closes both connections, the client's with a TCP reset.
func (l *link) reset() {
	if tc, ok := l.client.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	l.client.Close()
	l.server.Close()
}
