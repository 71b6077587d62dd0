package testkit

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of one address whose traffic a test can
// cut silently, as a pulled cable does: while cut, it keeps every
// connection open and accepts new ones, but forwards nothing in either
// direction — no reset, no FIN, bytes held as a network holds
// retransmissions — until Heal, when what was held goes through. It is
// deterministic and needs no network namespaces or root.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	heal  chan struct{} // closed by Heal (replaced by Cut)
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards each connection
// to target; it is closed when the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, heal: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.heal)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops all forwarding, silently.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut, p.heal = true, make(chan struct{})
	}
}

// Heal resumes forwarding, held bytes first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.heal)
	}
}

// Retarget forwards the connections accepted from now on to target
// (those open stay with the old one): a seed address that moves to
// another server.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Close closes the listener and every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	if p.cut {
		p.cut = false
		close(p.heal)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			for c := range p.conns {
				c.Close()
			}
			p.conns = nil
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			in.Close()
			out.Close()
			return
		}
		p.wg.Add(2)
		go p.pump(out, in)
		go p.pump(in, out)
	}
}

// pump copies src to dst, each chunk — and the end of src, as a close of
// dst — only once the proxy is not cut.
func (p *Proxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		heal := p.heal
		p.mu.Unlock()
		<-heal
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			dst.Close()
			src.Close()
			return
		}
	}
}
