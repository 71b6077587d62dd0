package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is this node's outgoing connection to one other node. It dials
// lazily, keeps the connection while it works (pinging it, see the
// package comment) and, once it broke, redials in the background while
// it is in use.
type Link struct {
	p    *Peer
	id   string // the remote node's id, checked in the hello
	addr string

	dialSem chan struct{} // one dial at a time (a slot, so waiting obeys a context)
	stop    chan struct{} // closed by close: ends the redial loop
	kicks   chan struct{} // Kick: the redial loop dials again now

	mu        sync.Mutex
	conn      *linkConn
	closed    bool
	nextID    uint64
	up        bool
	downSince time.Time // zero while up or never tried
	lastErr   error
	redialing bool      // the redial loop runs: Go fails at once while down
	lastUse   time.Time // last request (the redial loop stops when idle)
	wasDown   bool      // a connection of this link failed: log when it is up again
}

// linkConn is one connection of a link with its pending requests.
type linkConn struct {
	w        *connWriter
	mu       sync.Mutex
	pending  map[uint64]func([]byte, error)
	dead     error
	r        *bufio.Reader // until the reader goroutine takes it
	gone     chan struct{} // closed when the connection failed
	lastRecv atomic.Int64  // unix nanos of the last byte read
}

// recvReader notes when bytes arrive on a link's connection.
type recvReader struct {
	c  net.Conn
	lc *linkConn
}

func (r *recvReader) Read(b []byte) (int, error) {
	n, err := r.c.Read(b)
	if n > 0 {
		r.lc.lastRecv.Store(time.Now().UnixNano())
	}
	return n, err
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
	l := &Link{p: p, id: id, addr: addr, dialSem: make(chan struct{}, 1), stop: make(chan struct{}), kicks: make(chan struct{}, 1)}
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

// Down tells whether the link is known to be down (its last connection
// or dial failed). Asking counts as using it: a link that is down keeps
// redialing, so that a caller that holds requests back while it is down
// (admission under the refuse policy) sees it up again after a heal.
func (l *Link) Down() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up || l.downSince.IsZero() {
		return false
	}
	l.lastUse = time.Now()
	if l.conn == nil {
		l.startRedial()
	}
	return true
}

// Call sends a request of type typ and waits for its reply or ctx.
func (l *Link) Call(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	l.goCtx(ctx, true, typ, payload, func(b []byte, err error) { ch <- result{b, err} })
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("peer call %s: %w", l.id, ctx.Err())
	}
}

// Go sends a request of type typ; done runs once with the reply or the
// failure, on the link's reader goroutine or (when the request could not be
// sent) before Go returns. done must not block. On a link that is down
// and redialing, Go fails at once (ErrLinkDown) instead of waiting for a
// dial through what may be a cut.
func (l *Link) Go(typ uint8, payload []byte, done func(resp []byte, err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout+helloTimeout)
	defer cancel()
	l.goCtx(ctx, false, typ, payload, done)
}

func (l *Link) goCtx(ctx context.Context, wait bool, typ uint8, payload []byte, done func([]byte, error)) {
	lc, err := l.connect(ctx, wait)
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

// connect returns the live connection, dialling when there is none. A
// request of Go (wait false) on a link that is down and redialing fails
// at once rather than wait for a dial that may take dialTimeout.
func (l *Link) connect(ctx context.Context, wait bool) (*linkConn, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ErrClosed)
	}
	l.lastUse = time.Now()
	if lc := l.conn; lc != nil {
		l.mu.Unlock()
		return lc, nil
	}
	if l.redialing && !wait {
		err := l.lastErr
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %v (redialing)", ErrLinkDown, l.id, err)
	}
	l.mu.Unlock()
	return l.dialOnce(ctx)
}

// dialOnce dials unless a connection is there by the time this caller
// has the dial slot.
func (l *Link) dialOnce(ctx context.Context) (*linkConn, error) {
	select {
	case l.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ctx.Err())
	}
	defer func() { <-l.dialSem }()
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
	if err != nil {
		l.p.stats.dialErrors.Add(1)
		l.markDown(err)
		l.startRedial()
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, err)
	}
	if l.closed {
		l.mu.Unlock()
		lc.w.c.Close()
		l.p.untrack(lc.w.c)
		return nil, fmt.Errorf("%w: %s: %w", ErrLinkDown, l.id, ErrClosed)
	}
	again := l.wasDown || !l.downSince.IsZero()
	if again {
		l.p.log.Info("peer link to "+l.id+" up again", "node", l.id, "addr", l.addr, "down_for", time.Since(l.downSince).Round(time.Millisecond))
		l.wasDown = false
	}
	l.conn, l.up, l.downSince, l.lastErr, l.redialing = lc, true, time.Time{}, nil, false
	l.p.wg.Add(2)
	go l.readLoop(lc, lc.r)
	go l.heartbeat(lc)
	lc.r = nil
	l.mu.Unlock()
	if again {
		l.p.linkUp(l.id)
	}
	return lc, nil
}

// kick makes a link that is down dial again now (Peer.Kick): the kick
// is left in the buffered channel for the redial loop, which it starts
// if none runs yet (a link whose failure was just noticed may not have
// started one), so a kick that arrives before the loop is never lost. A
// link that is up is left alone.
func (l *Link) kick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil || l.closed {
		return
	}
	select {
	case l.kicks <- struct{}{}:
	default:
	}
	l.startRedial()
}

// startRedial starts the redial loop unless it runs (l.mu held).
func (l *Link) startRedial() {
	if l.redialing || l.closed {
		return
	}
	l.redialing = true
	l.p.wg.Add(1)
	go l.redialLoop()
}

// redialLoop dials a link that is down until it is up again, closed, or
// unused for linkRedialIdle (then the next request dials itself).
func (l *Link) redialLoop() {
	defer l.p.wg.Done()
	wait := linkRedialMin
	kicked := false
	for {
		if !kicked {
			t := time.NewTimer(wait/2 + rand.N(wait/2+1))
			select {
			case <-l.stop:
				t.Stop()
				return
			case <-l.kicks:
				t.Stop()
			case <-t.C:
			}
			wait = min(2*wait, linkRedialMax)
		}
		kicked = false
		l.mu.Lock()
		if l.closed || l.conn != nil || time.Since(l.lastUse) > linkRedialIdle {
			if l.conn == nil {
				l.redialing = false
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout+helloTimeout)
		var kick atomic.Bool
		go func() {
			select {
			case <-l.stop:
			case <-l.kicks: // the node is back: a dial through the cut may wait long for its SYN's retransmission
				kick.Store(true)
			case <-ctx.Done():
			}
			cancel()
		}()
		_, err := l.dialOnce(ctx)
		cancel()
		if err == nil {
			return
		}
		kicked = kick.Load()
		l.p.log.Debug("peer redial", "node", l.id, "addr", l.addr, "err", err)
	}
}

// heartbeat pings lc every Heartbeat and fails it when nothing arrived
// for LinkTimeout.
func (l *Link) heartbeat(lc *linkConn) {
	defer l.p.wg.Done()
	every, deadline := l.p.cfg.Heartbeat, l.p.cfg.LinkTimeout
	// Check often enough that a dead link is failed within a tenth of a
	// heartbeat after its deadline.
	tick := time.NewTicker(every / 10)
	defer tick.Stop()
	lastPing := time.Now()
	for {
		select {
		case <-lc.gone:
			return
		case <-tick.C:
		}
		if silent := time.Since(time.Unix(0, lc.lastRecv.Load())); silent >= deadline {
			l.fail(lc, fmt.Errorf("no frame for %s", deadline))
			l.p.stats.linkTimeout.Add(1) // after fail: whoever sees the count sees the link down
			return
		}
		if time.Since(lastPing) < every {
			continue
		}
		lastPing = time.Now()
		lc.w.mu.Lock()
		lc.mu.Lock()
		if lc.dead != nil {
			lc.mu.Unlock()
			lc.w.mu.Unlock()
			return
		}
		l.mu.Lock()
		l.nextID++
		id := l.nextID
		l.mu.Unlock()
		lc.pending[id] = func([]byte, error) {}
		lc.mu.Unlock()
		err := lc.w.writeLocked(kindRequest, TypePing, id, nil)
		lc.w.mu.Unlock()
		if err != nil {
			l.fail(lc, fmt.Errorf("heartbeat: %w", err))
			return
		}
	}
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
	l.p.tune(c)
	c.SetDeadline(time.Now().Add(helloTimeout))
	// The hello obeys ctx too (a redial that Close cancels).
	stopCancel := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
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
	w := &connWriter{c: c, bw: bufio.NewWriterSize(c, 64<<10), stats: &l.p.stats.bytesOut, timeout: l.p.cfg.LinkTimeout}
	lc := &linkConn{w: w, pending: map[uint64]func([]byte, error){}, gone: make(chan struct{})}
	r := bufio.NewReaderSize(&recvReader{c: c, lc: lc}, 64<<10)
	remote, err := l.p.dialHello(r, w)
	if !stopCancel() && err == nil { // ctx ended: the deadline may be in the past now
		err = ctx.Err()
	}
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
	lc.lastRecv.Store(time.Now().UnixNano())
	lc.r = r // the caller starts the reader and the heartbeat
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
	close(lc.gone)
	lc.mu.Unlock()
	lc.w.c.Close()
	l.mu.Lock()
	if l.conn == lc {
		l.conn = nil
		l.markDown(err)
	}
	closed := l.closed
	if !closed {
		l.wasDown = true
		l.startRedial()
	}
	l.mu.Unlock()
	if !closed {
		l.p.stats.linkFail.Add(1)
		l.p.log.Warn("peer link to "+l.id+" down: "+err.Error(), "node", l.id, "addr", l.addr, "pending", len(pending))
	}
	for _, done := range pending {
		done(nil, fmt.Errorf("%w: %s: %v", ErrLinkDown, l.id, err))
	}
	if !closed {
		l.p.linkDown(l.id, err)
	}
}

func (l *Link) close() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	lc := l.conn
	l.mu.Unlock()
	if lc != nil {
		l.fail(lc, ErrClosed)
	}
}
