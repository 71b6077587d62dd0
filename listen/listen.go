// Package listen is the one place every TCP listener of Tributary goes
// through: MQTT (TCP and WebSocket), Kafka, Pulsar, peer links, and the
// HTTP endpoints. It gives each the same defences against a hostile or
// broken client, so no protocol package has to remember them:
//
//   - Connection caps: at most Config.MaxConns open connections in all and
//     Config.MaxConnsPerIP from one remote address; a connection over a cap
//     is closed at once (counted, logged at most every few seconds).
//   - A handshake deadline: a connection that has not completed its
//     protocol's handshake (MQTT CONNECT, Kafka's first request, Pulsar
//     CONNECT, the peer hello — and, once authentication exists, its
//     authentication) within Config.HandshakeTimeout is closed. The
//     protocol calls Ready when the handshake is done.
//   - Panic recovery: Protect runs a connection's handler so that a panic
//     closes that connection only, logged with its stack and counted.
//   - A write deadline (Config.WriteTimeout, off by default: Kafka and
//     Pulsar set their own): a Write that cannot hand its bytes to the
//     kernel within it — the client stopped reading, or vanished without a
//     FIN — closes the connection (counted, logged at most every few
//     seconds), so that what the protocol queued for that client is freed
//     instead of piling up until a keep-alive notices.
//   - A graceful close: Close half-closes and discards what the client
//     still sends (bounded in bytes and time) before closing, so the last
//     packet the server wrote (a DISCONNECT with a reason, an error
//     response) is not destroyed by a TCP reset.
//
// # Invariants
//
//   - The caps count every connection from Accept until its Close, once.
//   - Ready, Close and the deadline race safely: a connection is closed by
//     the deadline only if Ready was not called first.
//
// # TLS
//
// With Config.TLS set, Accept returns the capped *Conn wrapped in
// tls.Server. Accept does not handshake (a slow client must not hold up the
// accept loop); a goroutine per connection runs the TLS handshake at once,
// bounded by the handshake deadline (HandshakeTimeout, or
// DefaultHandshakeTimeout for the TLS handshake of listeners whose protocol
// has no deadline: HTTP, REST, peer links). A client that fails it — a
// plain-text client on a TLS port, a certificate from another CA, an
// expired one — is closed at once, counted in Stats.TLSHandshakeFailures
// and logged at most every few seconds. The protocol reads and writes the
// *tls.Conn as any net.Conn; Ready and PeerCertificate find what they need
// through the NetConn chain, and closing the *tls.Conn sends close_notify
// and then closes the *Conn underneath gracefully.
//
// NewTLS turns the security.tls section (TLSConfig: one identity for every
// listener, with per-listener overrides) into each listener's *tls.Config
// (TLS.Server), the peer links' client side (TLS.Client) and an in-process
// client of a listener (TLS.Self, the dev simulator); TLS.Reload swaps
// certificates and CAs without a restart (SIGHUP). PeerCertificate gives
// a connection's verified client certificate (whose CN package auth turns
// into a principal); TLSHandshakeFailed tells a protocol that a read error
// was the TLS handshake's, already counted and logged here.
package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxConns         = 10000
	DefaultMaxConnsPerIP    = 1000
	DefaultHandshakeTimeout = 10 * time.Second
	lingerTime              = 2 * time.Second
	lingerBytes             = 1 << 20
	logEvery                = 5 * time.Second
)

// tlsHandshakeTimeout bounds the TLS handshake of a listener without a
// HandshakeTimeout (a variable for the tests).
var tlsHandshakeTimeout = DefaultHandshakeTimeout

// Config tunes one listener. The zero value takes every default.
type Config struct {
	// Name names the listener in logs and metrics ("mqtt", "kafka", ...).
	Name string
	// MaxConns caps the open connections (default DefaultMaxConns; < 0 = no cap).
	MaxConns int
	// MaxConnsPerIP caps the open connections of one remote IP address
	// (default DefaultMaxConnsPerIP; < 0 = no cap).
	MaxConnsPerIP int
	// HandshakeTimeout is how long a connection may take to become Ready
	// (default DefaultHandshakeTimeout; < 0 = no deadline).
	HandshakeTimeout time.Duration
	Logger           *slog.Logger
	// TLS, when set, makes the listener serve TLS with it (see the package
	// comment; TLS.Server gives it).
	TLS *tls.Config
	// WriteTimeout, when > 0, bounds every Write of a connection: one that
	// times out closes the connection (Stats.WriteTimeouts).
	WriteTimeout time.Duration
	// LoopbackHosts makes an HTTP server on the listener (NewHTTPServer,
	// HostGuard) answer only requests whose Host is loopback: set by a
	// node that lets anyone in (DNS rebinding).
	LoopbackHosts bool
}

func (c *Config) defaults() {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "tcp"
	}
}

// Stats are a listener's counters since it was opened.
type Stats struct {
	Open              int64  // connections open now
	Accepted          uint64 // connections accepted (under the caps)
	RefusedMax        uint64 // closed at accept: MaxConns reached
	RefusedPerIP      uint64 // closed at accept: MaxConnsPerIP reached
	HandshakeTimeouts uint64 // closed: not Ready within HandshakeTimeout
	Panics            uint64 // connections whose handler panicked (Protect)
	// TLSHandshakeFailures: closed because the TLS handshake failed (not
	// TLS, no or a bad client certificate, too slow).
	TLSHandshakeFailures uint64
	// WriteTimeouts: closed because a Write did not finish within
	// WriteTimeout (the client does not read).
	WriteTimeouts uint64
}

// Listener is a net.Listener whose Accept applies the caps and returns
// *Conn values.
type Listener struct {
	net.Listener
	cfg Config

	mu   sync.Mutex
	byIP map[string]int
	open int

	tlsTimeout time.Duration // bounds the TLS handshake without a HandshakeTimeout

	accepted, refusedMax, refusedIP, timeouts, panics, tlsFailures, writeTimeouts atomic.Uint64
	lastLog                                                                       atomic.Int64
}

// Listen opens a TCP listener on addr.
func Listen(addr string, cfg Config) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Wrap(ln, cfg), nil
}

// Wrap puts the defences on an open listener.
func Wrap(ln net.Listener, cfg Config) *Listener {
	cfg.defaults()
	return &Listener{Listener: ln, cfg: cfg, byIP: map[string]int{}, tlsTimeout: tlsHandshakeTimeout}
}

// Accept waits for the next connection under the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(nc)
		l.mu.Lock()
		switch {
		case l.cfg.MaxConns > 0 && l.open >= l.cfg.MaxConns:
			l.mu.Unlock()
			l.refusedMax.Add(1)
			l.refuse(nc, "max_conns", l.cfg.MaxConns)
			continue
		case l.cfg.MaxConnsPerIP > 0 && l.byIP[ip] >= l.cfg.MaxConnsPerIP:
			l.mu.Unlock()
			l.refusedIP.Add(1)
			l.refuse(nc, "max_conns_per_ip", l.cfg.MaxConnsPerIP)
			continue
		}
		l.open++
		l.byIP[ip]++
		l.mu.Unlock()
		l.accepted.Add(1)
		c := &Conn{Conn: nc, l: l, ip: ip}
		if d := l.cfg.HandshakeTimeout; d > 0 {
			c.timer.Store(time.AfterFunc(d, c.handshakeExpired))
		}
		if l.cfg.TLS == nil {
			return c, nil
		}
		tc := tls.Server(c, l.cfg.TLS)
		go l.tlsHandshake(c, tc)
		return tc, nil
	}
}

// tlsHandshake runs the TLS handshake of c (the protocol's first Read or
// Write waits for it) and closes c if it fails. Under HandshakeTimeout c's
// timer bounds it; without one DefaultHandshakeTimeout does.
func (l *Listener) tlsHandshake(c *Conn, tc *tls.Conn) {
	ctx := context.Background()
	if l.cfg.HandshakeTimeout <= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.tlsTimeout)
		defer cancel()
	}
	err := tc.HandshakeContext(ctx)
	switch {
	case err == nil:
		return
	case ctx.Err() != nil:
		l.timeouts.Add(1)
		l.logLimited("connection closed: no TLS handshake within the deadline", "timeout", l.tlsTimeout,
			"remote", c.RemoteAddr().String())
	case errors.Is(err, net.ErrClosed):
		return // closed here: by the handshake deadline (counted there), the protocol, a shutdown
	default:
		l.tlsFailures.Add(1)
		l.logLimited("connection closed: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
	}
	c.Close()
}

func (l *Listener) refuse(nc net.Conn, limit string, n int) {
	nc.Close()
	l.logLimited("connection refused: limit reached", "limit", limit, "value", n, "remote", nc.RemoteAddr().String())
}

// logLimited logs at warn level at most once every logEvery.
func (l *Listener) logLimited(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(logEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.cfg.Logger.Warn(msg, append([]any{"listener", l.cfg.Name}, args...)...)
}

func (l *Listener) release(ip string) {
	l.mu.Lock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	l.mu.Unlock()
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: int64(open), Accepted: l.accepted.Load(), RefusedMax: l.refusedMax.Load(),
		RefusedPerIP: l.refusedIP.Load(), HandshakeTimeouts: l.timeouts.Load(), Panics: l.panics.Load(),
		TLSHandshakeFailures: l.tlsFailures.Load(), WriteTimeouts: l.writeTimeouts.Load()}
}

// Name is the listener's name.
func (l *Listener) Name() string { return l.cfg.Name }

// ErrPanic is the cause given when a handler panicked.
var ErrPanic = errors.New("listen: connection handler panicked")

// Protect runs fn, the handler of connection c; if fn panics, the panic is
// logged with its stack and counted, c is closed, and Protect returns the
// panic as an error wrapping ErrPanic (nil when fn returned normally).
func (l *Listener) Protect(c net.Conn, fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			l.cfg.Logger.Error("connection handler panicked; connection closed", "listener", l.cfg.Name,
				"remote", c.RemoteAddr().String(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			c.Close()
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	fn()
	return nil
}

// Conn is an accepted connection.
type Conn struct {
	net.Conn
	l       *Listener
	ip      string
	timer   atomic.Pointer[time.Timer]
	ready   atomic.Bool
	once    sync.Once
	closed  atomic.Bool
	reading atomic.Int32 // Reads in progress
}

// Read reads from the connection; after Close it fails with net.ErrClosed
// (what the client still sends is discarded by the close, never handed to
// the protocol).
func (c *Conn) Read(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	c.reading.Add(1)
	n, err := c.Conn.Read(b)
	c.reading.Add(-1)
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// Write writes to the connection; under Config.WriteTimeout a Write that
// times out closes it.
func (c *Conn) Write(b []byte) (int, error) {
	d := c.l.cfg.WriteTimeout
	if d <= 0 {
		return c.Conn.Write(b)
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(d))
	n, err := c.Conn.Write(b)
	if ne, ok := err.(net.Error); ok && ne.Timeout() && !c.closed.Load() {
		c.l.writeTimeouts.Add(1)
		c.l.logLimited("connection closed: the client does not read", "timeout", d,
			"remote", c.RemoteAddr().String())
		c.Close()
	}
	return n, err
}

// SetDeadline is net.Conn's; after Close it does nothing (the close owns
// the deadline of its drain).
func (c *Conn) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline is net.Conn's; after Close it does nothing.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

// NetConn is the connection underneath.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Ready marks c's handshake as done: the handshake deadline no longer
// applies. Calling it again does nothing.
func (c *Conn) Ready() {
	if c.ready.CompareAndSwap(false, true) {
		if t := c.timer.Load(); t != nil {
			t.Stop()
		}
	}
}

func (c *Conn) handshakeExpired() {
	if c.ready.CompareAndSwap(false, true) {
		c.l.timeouts.Add(1)
		c.l.logLimited("connection closed: no handshake within the deadline", "timeout", c.l.cfg.HandshakeTimeout,
			"remote", c.RemoteAddr().String())
		c.Close()
	}
}

// Close closes gracefully: see the package comment. It returns at once.
func (c *Conn) Close() error {
	c.once.Do(func() {
		if t := c.timer.Load(); t != nil {
			t.Stop()
		}
		c.closed.Store(true)
		c.l.release(c.ip)
		tc, ok := c.Conn.(*net.TCPConn)
		if !ok || tc.CloseWrite() != nil {
			c.Conn.Close()
			return
		}
		// Wake the handler's blocked Read (it returns net.ErrClosed), then
		// drain on our own.
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		go func() {
			for c.reading.Load() > 0 {
				time.Sleep(time.Millisecond)
			}
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
			_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
			c.Conn.Close()
		}()
	})
	return nil
}

// Ready marks the handshake of c done if c is (or wraps, through NetConn()
// methods, as *tls.Conn does) a *Conn; for other connections it does
// nothing.
func Ready(c net.Conn) {
	for i := 0; c != nil && i < 4; i++ {
		if lc, ok := c.(*Conn); ok {
			lc.Ready()
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}
