// Package peer is the data plane between edge nodes: long-lived TCP links
// that carry forwarded MQTT publishes, WAL replication and takeover
// requests. Membership and failure detection stay in package cluster
// (memberlist); memberlist dials a fresh TCP connection per reliable
// message, which is right for small gossip and wrong for a stream of data.
//
// Invariants:
//
//   - Requests on one Link reach the remote handler in the order they were
//     sent (Call/Go entered, serialised by the link's write lock), and the
//     remote invokes handlers of one connection one at a time in that order.
//     Replies may complete in any order; each is matched to its request by
//     id.
//   - Every request gets exactly one outcome: a reply, a *RemoteError, or an
//     error wrapping ErrLinkDown when the connection breaks (or the link is
//     closed) before the reply arrived. A request whose connection broke may
//     or may not have been handled: protocols on top make their messages
//     idempotent (offsets, versions) so a resend is harmless.
//   - A link never resends by itself. The next request after a failure
//     dials again (at most one dial in progress per link).
//
// Outline: Listen binds a TCP listener; each accepted connection starts with
// a hello exchange (protocol version and node ids, so a stale address that
// now belongs to another node is detected), then one goroutine reads frames
// and dispatches requests to the handler registered for their type. Link
// dials lazily, keeps one connection, and runs one reader goroutine per
// connection that completes pending requests.
//
// Frame: uint32 length of what follows (big endian), kind (1 byte: hello,
// request, reply, error), message type (1 byte), request id (uint64), then
// the payload. Frames are at most MaxFrame bytes.
package peer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/listen"
)

// MaxFrame bounds one frame (header excluded).
const MaxFrame = 64 << 20

// Types 1–31 are peer's own; others are free for the protocols on top
// (32–63 MQTT forwarding, 64–95 WAL replication and takeover).
const (
	// TypePing is answered by every Peer with an empty reply.
	TypePing uint8 = 1
)

const (
	kindHello byte = 1 + iota
	kindRequest
	kindReply
	kindError
)

const (
	protoVersion = 1
	headerLen    = 4 + 1 + 1 + 8
	dialTimeout  = 2 * time.Second
	helloTimeout = 5 * time.Second
)

var (
	// ErrLinkDown wraps every failure of a request whose connection could
	// not be made or broke before its reply.
	ErrLinkDown = errors.New("peer: link down")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("peer: closed")
	// ErrFrameTooLarge is a frame over MaxFrame.
	ErrFrameTooLarge = errors.New("peer: frame too large")
)

// RemoteError is the error a remote handler replied with.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return "peer: remote: " + e.Msg }

// Handler handles one request from node from. It runs on the connection's
// read goroutine, in arrival order; it must call reply exactly once, now or
// later from any goroutine, and must not block for long before returning.
type Handler func(from string, payload []byte, reply func(resp []byte, err error))

// Config configures a Peer.
type Config struct {
	NodeID string // this node's id, sent in the hello
	Addr   string // listen host:port; port 0 picks a free port
	Logger *slog.Logger
}

// Stats are cumulative counters of a Peer.
type Stats struct {
	Dials, DialErrors         int64
	Accepted                  int64
	RequestsOut, RequestsIn   int64
	BytesOut, BytesIn         int64
	LinkFailures, RemoteError int64
}

// Peer is this node's endpoint: a listener for incoming links and the set
// of outgoing links.
type Peer struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener

	mu       sync.Mutex
	handlers map[uint8]Handler
	links    map[string]*Link
	conns    map[net.Conn]struct{}
	closed   bool

	wg    sync.WaitGroup
	stats struct {
		dials, dialErrors, accepted, reqOut, reqIn, bytesOut, bytesIn, linkFail, remoteErr atomic.Int64
	}
}

// Listen binds cfg.Addr and starts accepting links.
func Listen(cfg Config) (*Peer, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("peer: empty node id")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The hello has its own deadline (helloTimeout); the listener adds the
	// connection caps and panic recovery.
	ln, err := listen.Listen(cfg.Addr, listen.Config{Name: "peer", HandshakeTimeout: -1, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("peer listen %s: %w", cfg.Addr, err)
	}
	p := &Peer{cfg: cfg, log: log.With("component", "peer"), ln: ln,
		handlers: map[uint8]Handler{}, links: map[string]*Link{}, conns: map[net.Conn]struct{}{}}
	p.handlers[TypePing] = func(_ string, _ []byte, reply func([]byte, error)) { reply(nil, nil) }
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// ListenerStats are the peer listener's connection counters.
func (p *Peer) ListenerStats() listen.Stats { return p.ln.(*listen.Listener).Stats() }

// Addr is the bound listen address.
func (p *Peer) Addr() string { return p.ln.Addr().String() }

// NodeID is this node's id.
func (p *Peer) NodeID() string { return p.cfg.NodeID }

// Handle registers h for message type typ, replacing any earlier handler.
// Register before peers send that type: a request of a type without a
// handler is answered with a RemoteError.
func (p *Peer) Handle(typ uint8, h Handler) {
	p.mu.Lock()
	p.handlers[typ] = h
	p.mu.Unlock()
}

func (p *Peer) handler(typ uint8) Handler {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handlers[typ]
}

// Stats returns the counters.
func (p *Peer) Stats() Stats {
	s := &p.stats
	return Stats{Dials: s.dials.Load(), DialErrors: s.dialErrors.Load(), Accepted: s.accepted.Load(),
		RequestsOut: s.reqOut.Load(), RequestsIn: s.reqIn.Load(), BytesOut: s.bytesOut.Load(), BytesIn: s.bytesIn.Load(),
		LinkFailures: s.linkFail.Load(), RemoteError: s.remoteErr.Load()}
}

// Close stops accepting, closes every connection (pending requests fail
// with ErrLinkDown) and waits for the goroutines, or ctx.
func (p *Peer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := make([]*Link, 0, len(p.links))
	for _, l := range p.links {
		links = append(links, l)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, l := range links {
		l.close()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("peer close: %w", ctx.Err())
	}
}

func (p *Peer) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Peer) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Peer) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			p.log.Warn("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.stats.accepted.Add(1)
		p.wg.Add(1)
		go p.ln.(*listen.Listener).Protect(c, func() { p.serve(c) })
	}
}

// serve runs one accepted connection: hello, then requests in order.
func (p *Peer) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetDeadline(time.Now().Add(helloTimeout))
	f, err := readFrameMax(r, maxHelloFrame)
	if err != nil || f.kind != kindHello {
		p.log.Debug("bad hello", "remote", c.RemoteAddr(), "err", err)
		return
	}
	from, err := decodeHello(f.payload)
	if err != nil {
		p.log.Debug("bad hello", "remote", c.RemoteAddr(), "err", err)
		return
	}
	w := &connWriter{c: c, bw: bufio.NewWriterSize(c, 64<<10), stats: &p.stats.bytesOut}
	if err := w.write(kindHello, 0, 0, encodeHello(p.cfg.NodeID)); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	listen.Ready(c)
	for {
		f, err := readFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Debug("link read", "from", from, "err", err)
			}
			return
		}
		p.stats.bytesIn.Add(int64(headerLen + len(f.payload)))
		if f.kind != kindRequest {
			p.log.Warn("unexpected frame kind on incoming link", "from", from, "kind", f.kind)
			return
		}
		p.stats.reqIn.Add(1)
		id := f.id
		var once atomic.Bool
		reply := func(resp []byte, err error) {
			if !once.CompareAndSwap(false, true) {
				return
			}
			if err != nil {
				w.write(kindError, f.typ, id, []byte(err.Error()))
				return
			}
			w.write(kindReply, f.typ, id, resp)
		}
		h := p.handler(f.typ)
		if h == nil {
			reply(nil, fmt.Errorf("no handler for message type %d", f.typ))
			continue
		}
		h(from, f.payload, reply)
	}
}

// connWriter serialises frame writes on one connection.
type connWriter struct {
	mu    sync.Mutex
	c     net.Conn
	bw    *bufio.Writer
	err   error
	stats *atomic.Int64
}

func (w *connWriter) write(kind, typ byte, id uint64, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(kind, typ, id, payload)
}

func (w *connWriter) writeLocked(kind, typ byte, id uint64, payload []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(payload) > MaxFrame-headerLen+4 {
		return ErrFrameTooLarge
	}
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:], uint32(headerLen-4+len(payload)))
	h[4], h[5] = kind, typ
	binary.BigEndian.PutUint64(h[6:], id)
	w.bw.Write(h[:])
	w.bw.Write(payload)
	if err := w.bw.Flush(); err != nil {
		w.err = err
		w.c.Close()
		return err
	}
	w.stats.Add(int64(headerLen + len(payload)))
	return nil
}

type frame struct {
	kind, typ byte
	id        uint64
	payload   []byte
}

func readFrame(r *bufio.Reader) (frame, error) { return readFrameMax(r, MaxFrame) }

// maxHelloFrame bounds the first frame of an inbound connection, read
// before the remote is known to be a node: a stranger cannot make the node
// allocate a large frame.
const maxHelloFrame = 4 << 10

func readFrameMax(r *bufio.Reader, max uint32) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:4]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:])
	if n < headerLen-4 {
		return frame{}, fmt.Errorf("peer: frame length %d below header size", n)
	}
	if n > max {
		return frame{}, fmt.Errorf("%w: %d bytes (at most %d here)", ErrFrameTooLarge, n, max)
	}
	if _, err := io.ReadFull(r, h[4:]); err != nil {
		return frame{}, err
	}
	f := frame{kind: h[4], typ: h[5], id: binary.BigEndian.Uint64(h[6:])}
	f.payload = make([]byte, int(n)-(headerLen-4))
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return frame{}, err
	}
	return f, nil
}

func encodeHello(node string) []byte {
	b := []byte{protoVersion}
	return append(b, node...)
}

func decodeHello(b []byte) (string, error) {
	if len(b) < 2 {
		return "", errors.New("peer: short hello")
	}
	if b[0] != protoVersion {
		return "", fmt.Errorf("peer: protocol version %d, want %d", b[0], protoVersion)
	}
	return string(b[1:]), nil
}
