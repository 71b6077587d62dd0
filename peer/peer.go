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
//   - A link never resends by itself. A broken one redials in the
//     background while in use (one dial at a time, ≤ linkRedialMax plus
//     jitter apart); meanwhile Go fails at once, Call dials itself.
//   - A silent cut is noticed within LinkTimeout: the dialer pings every
//     Heartbeat and drops a connection on which nothing arrived for
//     LinkTimeout, the listener drops one silent as long, frame writes
//     have that deadline, TCP_USER_TIMEOUT and keepalive the same bound.
//     A drop is logged once with its cause, counted, and heard by
//     OnLinkDown listeners after its pending requests failed.
//   - Only an authenticated node is served. When the Peer is configured
//     with mutual TLS and/or a cluster secret (Config), no request frame of
//     a connection is read, and no request is sent on one, before the other
//     end presented a certificate of the cluster's CA (both directions)
//     and/or proved the secret in the hello (hello.go). A refused
//     connection is closed at once, counted (Stats.HandshakesRefused) and
//     logged. The secret itself never crosses the wire, and a recorded
//     hello cannot be replayed. Everything that rides on peer links (MQTT
//     forwarding, WAL replication, takeover) therefore comes from a node of
//     the cluster. Without either, any process that reaches the port is
//     trusted: only for loopback or a network of its own.
//   - Before the hello is done a connection costs little: its first frames
//     are at most 4 KiB, and the TLS handshake and hello share one deadline.
//
// Outline: Listen binds a TCP listener; each accepted connection runs the
// TLS handshake (with ServerTLS), then the hello exchange (protocol version,
// nonces, proofs of the secret, node ids, so a stale address that now
// belongs to another node is detected), then one goroutine reads frames
// and dispatches requests to the handler registered for their type. Link
// dials lazily, keeps one connection with a reader goroutine that
// completes pending requests and a heartbeat goroutine. A secret authenticates the
// ends, it does not encrypt or sign what follows the hello: on a network an
// attacker can write to, use mutual TLS.
//
// Frame: uint32 length of what follows (big endian), kind (1 byte: hello,
// request, reply, error), message type (1 byte), request id (uint64), then
// the payload. Frames are at most MaxFrame bytes.
package peer

import (
	"bufio"
	"context"
	"crypto/tls"
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
	headerLen    = 4 + 1 + 1 + 8
	dialTimeout  = 2 * time.Second
	helloTimeout = 5 * time.Second

	// DefaultHeartbeat and DefaultLinkTimeout are Config's defaults: a
	// ping a second, a link dead after 4 s without a byte.
	DefaultHeartbeat   = time.Second
	DefaultLinkTimeout = 4 * time.Second
)

// A failed link redials after linkRedialMin, doubling up to linkRedialMax
// (each with up to half of it as jitter), at once when Kick says its node
// is back, and stops redialing when no request used it for
// linkRedialIdle (variables for tests).
var (
	linkRedialMin  = 50 * time.Millisecond
	linkRedialMax  = time.Second
	linkRedialIdle = time.Minute
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

// Config configures a Peer. How the node at the other end is
// authenticated: mutual TLS (ServerTLS and ClientTLS), a cluster secret
// proven in the hello (Secret), both, or — only on a trusted network —
// neither.
type Config struct {
	NodeID string // this node's id, sent in the hello
	Addr   string // listen host:port; port 0 picks a free port
	// ServerTLS, when set, makes the listener speak TLS and require a
	// client certificate verified against ServerTLS.ClientCAs (ClientAuth
	// is forced to tls.RequireAndVerifyClientCert). ClientTLS is what this
	// node dials with: it must present a certificate and verifies the
	// listener's (RootCAs; ServerName defaults to the dialled host). Set
	// both or neither.
	ServerTLS, ClientTLS *tls.Config
	// Secret, when set, is the cluster secret each side proves in the
	// hello (HMAC over both sides' fresh nonces; it is never sent). Every
	// node must have the same one.
	Secret []byte
	// Heartbeat is how often the dialing side pings an established link
	// (default DefaultHeartbeat); LinkTimeout how long a link may stay
	// silent before it is declared dead, which also bounds every frame
	// write and unacknowledged data (TCP_USER_TIMEOUT; default
	// DefaultLinkTimeout, at least twice Heartbeat).
	Heartbeat, LinkTimeout time.Duration
	Logger                 *slog.Logger
}

// Authenticated tells whether cfg authenticates the other end (mutual TLS
// or a cluster secret).
func (cfg Config) Authenticated() bool { return cfg.ServerTLS != nil || len(cfg.Secret) > 0 }

func (cfg *Config) checkTLS() error {
	if (cfg.ServerTLS == nil) != (cfg.ClientTLS == nil) {
		return errors.New("peer: set both ServerTLS and ClientTLS, or neither")
	}
	if cfg.ServerTLS == nil {
		return nil
	}
	s, c := cfg.ServerTLS.Clone(), cfg.ClientTLS.Clone()
	if len(s.Certificates) == 0 && s.GetCertificate == nil && s.GetConfigForClient == nil {
		return errors.New("peer: ServerTLS has no certificate")
	}
	if s.ClientCAs == nil && s.GetConfigForClient == nil {
		return errors.New("peer: ServerTLS has no ClientCAs to verify the dialing node's certificate")
	}
	if len(c.Certificates) == 0 && c.GetClientCertificate == nil {
		return errors.New("peer: ClientTLS has no certificate to present")
	}
	if c.InsecureSkipVerify && c.VerifyConnection == nil && c.VerifyPeerCertificate == nil {
		return errors.New("peer: ClientTLS must verify the listener's certificate (InsecureSkipVerify without VerifyConnection)")
	}
	s.ClientAuth = tls.RequireAndVerifyClientCert
	if get := s.GetConfigForClient; get != nil {
		// The config a handshake really uses must require the certificate too.
		s.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if err != nil || cc == nil {
				return cc, err
			}
			if cc.ClientCAs == nil {
				return nil, errors.New("peer: no client CA to verify the dialing node's certificate")
			}
			cc = cc.Clone()
			cc.ClientAuth = tls.RequireAndVerifyClientCert
			return cc, nil
		}
	}
	cfg.ServerTLS, cfg.ClientTLS = s, c
	return nil
}

// Stats are cumulative counters of a Peer.
type Stats struct {
	Dials, DialErrors int64
	Accepted          int64
	// HandshakesRefused counts links refused in the hello or the TLS
	// handshake, on either side: a missing or wrong certificate or proof
	// of the cluster secret, a hello of another protocol version.
	HandshakesRefused         int64
	RequestsOut, RequestsIn   int64
	BytesOut, BytesIn         int64
	LinkFailures, RemoteError int64
	// LinkTimeouts counts connections (either side) closed because
	// nothing arrived on them for Config.LinkTimeout: a silent cut.
	LinkTimeouts int64
}

// Peer is this node's endpoint: a listener for incoming links and the set
// of outgoing links.
type Peer struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener

	mu       sync.Mutex
	handlers map[uint8]Handler
	onDown   []func(node string, err error)
	onUp     []func(node string)
	links    map[string]*Link
	conns    map[net.Conn]struct{}
	closed   bool

	wg    sync.WaitGroup
	stats struct {
		dials, dialErrors, accepted, refused, reqOut, reqIn, bytesOut, bytesIn, linkFail, remoteErr, linkTimeout atomic.Int64
	}
	lastRefusedLog atomic.Int64 // unix nanos
}

// Listen binds cfg.Addr and starts accepting links.
func Listen(cfg Config) (*Peer, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("peer: empty node id")
	}
	if err := cfg.checkTLS(); err != nil {
		return nil, err
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.LinkTimeout <= 0 {
		cfg.LinkTimeout = DefaultLinkTimeout
	}
	cfg.LinkTimeout = max(cfg.LinkTimeout, 2*cfg.Heartbeat)
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

// OnLinkDown registers f to hear, at once, of every outgoing link whose
// connection broke (a heartbeat deadline, a reset, a failed write), after
// the link's pending requests failed: users that keep state per node
// (replication senders) mark it missing without waiting for a request
// to time out. f runs on the goroutine that noticed, must not block and
// must not call into the link.
func (p *Peer) OnLinkDown(f func(node string, err error)) {
	p.mu.Lock()
	p.onDown = append(p.onDown, f)
	p.mu.Unlock()
}

// OnLinkUp registers f to hear, at once, of every outgoing link that has
// a connection again after it had failed (a healed cut, a restarted
// node): users that back off from a node while its link is down
// (replication senders) retry it now rather than at their next retry.
// f runs on the goroutine that dialled, must not block and must not call
// into the link.
func (p *Peer) OnLinkUp(f func(node string)) {
	p.mu.Lock()
	p.onUp = append(p.onUp, f)
	p.mu.Unlock()
}

func (p *Peer) linkUp(node string) {
	p.mu.Lock()
	fs := p.onUp
	p.mu.Unlock()
	for _, f := range fs {
		f(node)
	}
}

// Kick tells the link to node id that the node has just been heard from
// (gossip declared it alive again): a link that is down and redialing
// dials again now, abandoning a dial that is still waiting for an answer
// through what was a cut (its SYN may have been lost and TCP would
// retransmit it only a second or more later), instead of at its next
// redial. A link that is up, or has no redial running, is left alone.
func (p *Peer) Kick(id string) {
	p.mu.Lock()
	l := p.links[id]
	p.mu.Unlock()
	if l != nil {
		l.kick()
	}
}

func (p *Peer) linkDown(node string, err error) {
	p.mu.Lock()
	fs := p.onDown
	p.mu.Unlock()
	for _, f := range fs {
		f(node, err)
	}
}

// Stats returns the counters.
func (p *Peer) Stats() Stats {
	s := &p.stats
	return Stats{Dials: s.dials.Load(), DialErrors: s.dialErrors.Load(), Accepted: s.accepted.Load(), HandshakesRefused: s.refused.Load(),
		RequestsOut: s.reqOut.Load(), RequestsIn: s.reqIn.Load(), BytesOut: s.bytesOut.Load(), BytesIn: s.bytesIn.Load(),
		LinkFailures: s.linkFail.Load(), RemoteError: s.remoteErr.Load(), LinkTimeouts: s.linkTimeout.Load()}
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
	p.tune(c)
	c.SetDeadline(time.Now().Add(helloTimeout))
	if p.cfg.ServerTLS != nil {
		tc := tls.Server(c, p.cfg.ServerTLS)
		if err := tc.Handshake(); err != nil {
			if errors.Is(err, io.EOF) { // connected and closed: a port probe
				p.log.Debug("peer connection closed before the TLS handshake", "remote", c.RemoteAddr())
			} else {
				p.refused(c.RemoteAddr(), "", fmt.Errorf("%w: TLS: %v", ErrRefused, err))
			}
			return
		}
		c = tc
	}
	idle := &idleReader{c: c}
	r := bufio.NewReaderSize(idle, 64<<10)
	w := &connWriter{c: c, bw: bufio.NewWriterSize(c, 64<<10), stats: &p.stats.bytesOut, timeout: p.cfg.LinkTimeout}
	from, err := p.acceptHello(r, w)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			p.refused(c.RemoteAddr(), from, err)
		} else {
			p.log.Debug("bad hello", "remote", c.RemoteAddr(), "err", err)
		}
		return
	}
	c.SetDeadline(time.Time{})
	listen.Ready(c)
	// The dialer pings every Heartbeat: a connection silent for
	// LinkTimeout is dead (its replies could not reach the dialer anyway).
	idle.timeout = p.cfg.LinkTimeout
	for {
		f, err := readFrame(r)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				p.stats.linkTimeout.Add(1)
				p.log.Warn(fmt.Sprintf("peer link from %s down: no frame for %s", from, p.cfg.LinkTimeout), "node", from, "remote", c.RemoteAddr().String())
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
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

// idleReader reads c, each read under a deadline of timeout once it is
// set (after the hello): a connection silent that long fails its read.
type idleReader struct {
	c       net.Conn
	timeout time.Duration // set before the reads it applies to, by the reader
}

func (r *idleReader) Read(b []byte) (int, error) {
	if r.timeout > 0 {
		r.c.SetReadDeadline(time.Now().Add(r.timeout))
	}
	return r.c.Read(b)
}

// tune sets TCP keepalive and TCP_USER_TIMEOUT on c (or the TCP
// connection it wraps), so that the kernel too gives up on a link whose
// data goes unacknowledged for LinkTimeout.
func (p *Peer) tune(c net.Conn) {
	tc := tcpConn(c)
	if tc == nil {
		return
	}
	d := p.cfg.LinkTimeout
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: p.cfg.Heartbeat, Interval: p.cfg.Heartbeat,
		Count: max(int(d/p.cfg.Heartbeat)-1, 1)})
	if err := setUserTimeout(tc, d); err != nil {
		p.log.Debug("peer: TCP_USER_TIMEOUT", "err", err)
	}
}

// tcpConn is the *net.TCPConn under c (through NetConn methods), or nil.
func tcpConn(c net.Conn) *net.TCPConn { return listen.Underlying[*net.TCPConn](c) }

// connWriter serialises frame writes on one connection; each write has a
// deadline of timeout (when set), so a remote that stops reading fails
// the connection instead of blocking its writers.
type connWriter struct {
	mu      sync.Mutex
	c       net.Conn
	bw      *bufio.Writer
	err     error
	stats   *atomic.Int64
	timeout time.Duration
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
	if w.timeout > 0 && w.c != nil {
		w.c.SetWriteDeadline(time.Now().Add(w.timeout))
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
