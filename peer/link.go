package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Link is this node's outgoing connection to one other node. It dials
// lazily, keeps the connection while it works and dials again on the first
// request after it broke.
type Link struct {
	p    *Peer
	id   string // the remote node's id, checked in the hello
	addr string

	dialMu sync.Mutex // one dial at a time

	mu        sync.Mutex
	conn      *linkConn
	closed    bool
	nextID    uint64
	up        bool
	downSince time.Time // zero while up or never tried
	lastErr   error
}

// linkConn is one connection of a link with its pending requests.
type linkConn struct {
	w       *connWriter
	mu      sync.Mutex
	pending map[uint64]func([]byte, error)
	dead    error
}

// Link returns the link to node id at addr, creating it on first use. A
// link whose node changed address is replaced.
func (p *Peer) Link(id, addr string) *Link {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.links[id]; ok {
		if l.addr == addr {
			return l
		}
		go l.close()
	}
	l := &Link{p: p, id: id, addr: addr}
	if p.closed {
		l.closed = true
	}
	p.links[id] = l
	return l
}

// Forget closes and drops the link to node id (a member that left).
func (p *Peer) Forget(id string) {
	p.mu.Lock()
	l := p.links[id]
	delete(p.links, id)
	p.mu.Unlock()
	if l != nil {
		l.close()
	}
}

// Node is the remote node's id; Addr its address.
func (l *Link) Node() string { return l.id }
func (l *Link) Addr() string { return l.addr }

// Health says whether the link's last connection attempt or connection is
// up, and since when it has been down (zero if it is up or was never
// used), with the last error.
func (l *Link) Health() (up bool, downSince time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.downSince, l.lastErr
}

// Call sends a request of type typ and waits for its reply or ctx.
func (l *Link) Call(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	l.goCtx(ctx, typ, payload, func(b []byte, err error) { ch <- result{b, err} })
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("peer call %s: %w", l.id, ctx.Err())
	}
}

// Go sends a request of type typ; done runs once with the reply or the
// failure, on the link's reader goroutine or (when the request could not be
// sent) before Go returns. done must not block.
func (l *Link) Go(typ uint8, payload []byte, done func(resp []byte, err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	l.goCtx(ctx, typ, payload, done)
}

func (l *Link) goCtx(ctx context.Context, typ uint8, payload []byte, done func([]byte, error)) {
	lc, err := l.connect(ctx)
	if err != nil {
		done(nil, err)
		return
	}
	l.p.stats.reqOut.Add(1)
	// The connection's writer lock orders the requests; registering the
	// pending entry under it too means a reply can never beat its entry.
	lc.w.mu.Lock()
	lc.mu.Lock()
	if lc.dead != nil {
		lc.mu.Unlock()
		lc.w.mu.Unlock()
		done(nil, fmt.Errorf("%w: %s: %v", ErrLinkDown, l.id, lc.dead))
		return
	}
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	l.mu.Unlock()
	lc.pending[id] = done
	lc.mu.Unlock()
	err = lc.w.writeLocked(kindRequest, typ, id, payload)
	lc.w.mu.Unlock()
	if err != nil {
		l.fail(lc, err)
	}
}

// connect returns the live connection, dialling when there is none.
func (l *Link) connect(ctx context.Context) (*linkConn, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ErrClosed)
	}
	if lc := l.conn; lc != nil {
		l.mu.Unlock()
		return lc, nil
	}
	l.mu.Unlock()

	l.dialMu.Lock()
	defer l.dialMu.Unlock()
	l.mu.Lock()
	if lc := l.conn; lc != nil || l.closed {
		l.mu.Unlock()
		if lc == nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ErrClosed)
		}
		return lc, nil
	}
	l.mu.Unlock()

	lc, err := l.dial(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.p.stats.dialErrors.Add(1)
		l.markDown(err)
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, err)
	}
	if l.closed {
		lc.w.c.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ErrClosed)
	}
	l.conn, l.up, l.downSince, l.lastErr = lc, true, time.Time{}, nil
	return lc, nil
}

func (l *Link) markDown(err error) {
	if l.up || l.downSince.IsZero() {
		l.downSince = time.Now()
	}
	l.up, l.lastErr = false, err
}

func (l *Link) dial(ctx context.Context) (*linkConn, error) {
	l.p.stats.dials.Add(1)
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", l.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.SetDeadline(time.Now().Add(helloTimeout))
	if cfg := l.p.cfg.ClientTLS; cfg != nil {
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(l.addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			var bad *tls.CertificateVerificationError
			if !errors.As(err, &bad) { // the network, or the listener refusing us (it counts that)
				return nil, fmt.Errorf("TLS: %w", err)
			}
			err = fmt.Errorf("%w: TLS: %v", ErrRefused, err)
			l.p.refused(c.RemoteAddr(), l.id, err)
			return nil, err
		}
		c = tc
	}
	w := &connWriter{c: c, bw: bufio.NewWriterSize(c, 64<<10), stats: &l.p.stats.bytesOut}
	r := bufio.NewReaderSize(c, 64<<10)
	remote, err := l.p.dialHello(r, w)
	if err != nil {
		c.Close()
		if errors.Is(err, ErrRefused) {
			l.p.refused(c.RemoteAddr(), l.id, err)
		}
		return nil, err
	}
	if remote != l.id {
		c.Close()
		return nil, fmt.Errorf("%s answers as node %q, want %q", l.addr, remote, l.id)
	}
	c.SetDeadline(time.Time{})
	if !l.p.track(c) {
		c.Close()
		return nil, ErrClosed
	}
	lc := &linkConn{w: w, pending: map[uint64]func([]byte, error){}}
	l.p.wg.Add(1)
	go l.readLoop(lc, r)
	return lc, nil
}

// readLoop completes pending requests until the connection breaks.
func (l *Link) readLoop(lc *linkConn, r *bufio.Reader) {
	defer l.p.wg.Done()
	defer l.p.untrack(lc.w.c)
	for {
		f, err := readFrame(r)
		if err != nil {
			l.fail(lc, err)
			return
		}
		l.p.stats.bytesIn.Add(int64(headerLen + len(f.payload)))
		lc.mu.Lock()
		done := lc.pending[f.id]
		delete(lc.pending, f.id)
		lc.mu.Unlock()
		if done == nil {
			l.fail(lc, fmt.Errorf("reply to unknown request %d", f.id))
			return
		}
		switch f.kind {
		case kindReply:
			done(f.payload, nil)
		case kindError:
			l.p.stats.remoteErr.Add(1)
			done(nil, &RemoteError{Msg: string(f.payload)})
		default:
			done(nil, fmt.Errorf("%w: %s: unexpected frame kind %d", ErrLinkDown, l.id, f.kind))
			l.fail(lc, fmt.Errorf("unexpected frame kind %d", f.kind))
			return
		}
	}
}

// fail closes lc and fails its pending requests (once).
func (l *Link) fail(lc *linkConn, err error) {
	lc.mu.Lock()
	if lc.dead != nil {
		lc.mu.Unlock()
		return
	}
	if err == nil {
		err = errors.New("closed")
	}
	lc.dead = err
	pending := lc.pending
	lc.pending = nil
	lc.mu.Unlock()
	lc.w.c.Close()
	l.mu.Lock()
	if l.conn == lc {
		l.conn = nil
		l.markDown(err)
	}
	closed := l.closed
	l.mu.Unlock()
	if !closed {
		l.p.stats.linkFail.Add(1)
		l.p.log.Info("peer link down", "node", l.id, "addr", l.addr, "err", err, "pending", len(pending))
	}
	for _, done := range pending {
		done(nil, fmt.Errorf("%w: %s: %v", ErrLinkDown, l.id, err))
	}
}

func (l *Link) close() {
	l.mu.Lock()
	l.closed = true
	lc := l.conn
	l.mu.Unlock()
	if lc != nil {
		l.fail(lc, ErrClosed)
	}
}
