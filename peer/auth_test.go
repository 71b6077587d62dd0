package peer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// tlsPair is the server and client configuration of a node whose
// certificate ca issued, trusting trust.
func tlsPair(t *testing.T, ca, trust *testkit.CA, cn string) (server, client *tls.Config) {
	cert := ca.Issue(t, cn)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: trust.Pool, MinVersion: tls.VersionTLS12},
		&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: trust.Pool, MinVersion: tls.VersionTLS12}
}

func listenCfg(t *testing.T, cfg Config) *Peer {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	p, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// echo registers type 40 on p: it answers with the payload and counts
// the requests it saw.
func echo(p *Peer) *atomic.Int64 {
	var n atomic.Int64
	p.Handle(40, func(_ string, b []byte, reply func([]byte, error)) { n.Add(1); reply(b, nil) })
	return &n
}

func TestMutualTLS(t *testing.T) {
	ca, other := testkit.NewCA(t), testkit.NewCA(t)
	sa, ca1 := tlsPair(t, ca, ca, "a")
	sb, cb := tlsPair(t, ca, ca, "b")
	a := listenCfg(t, Config{NodeID: "a", ServerTLS: sa, ClientTLS: ca1})
	b := listenCfg(t, Config{NodeID: "b", ServerTLS: sb, ClientTLS: cb})
	served := echo(b)
	if got, err := a.Link("b", b.Addr()).Call(ctx(t), 40, []byte("over tls")); err != nil || string(got) != "over tls" {
		t.Fatalf("call over mutual TLS: %q, %v", got, err)
	}
	if _, err := b.Link("a", a.Addr()).Call(ctx(t), TypePing, nil); err != nil {
		t.Fatalf("call the other way: %v", err)
	}

	refusedBefore := b.Stats().HandshakesRefused
	t.Run("client without a certificate", func(t *testing.T) {
		dialWithoutCert(t, b.Addr(), ca)
	})
	t.Run("client without a certificate, per-handshake config", func(t *testing.T) {
		// A server config that picks its real config per handshake (as
		// one that reloads certificates does) asking only for an
		// optional certificate: the peer listener still requires one.
		inner := sb.Clone()
		inner.ClientAuth = tls.VerifyClientCertIfGiven
		outer := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return inner, nil }}
		b2 := listenCfg(t, Config{NodeID: "b", ServerTLS: outer, ClientTLS: cb})
		dialWithoutCert(t, b2.Addr(), ca)
		if _, err := a.Link("b", b2.Addr()).Call(ctx(t), TypePing, nil); err != nil {
			t.Fatalf("a node with its certificate: %v", err)
		}
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		so, co := tlsPair(t, other, ca, "rogue")
		rogue := listenCfg(t, Config{NodeID: "a", ServerTLS: so, ClientTLS: co})
		if _, err := rogue.Link("b", b.Addr()).Call(ctx(t), 40, []byte("inject")); !errors.Is(err, ErrLinkDown) {
			t.Fatalf("rogue call: %v, want ErrLinkDown", err)
		}
	})
	t.Run("listener with a certificate of another CA", func(t *testing.T) {
		so, co := tlsPair(t, other, other, "b")
		rogue := listenCfg(t, Config{NodeID: "b", ServerTLS: so, ClientTLS: co})
		echo(rogue)
		if _, err := a.Link("b", rogue.Addr()).Call(ctx(t), 40, []byte("secret data")); !errors.Is(err, ErrRefused) {
			t.Fatalf("call to a rogue listener: %v, want ErrRefused", err)
		}
	})
	testkit.Eventually(t, 5*time.Second, "b to count two refused handshakes", func() bool {
		return b.Stats().HandshakesRefused >= refusedBefore+2
	})
	if n := served.Load(); n != 1 {
		t.Fatalf("b served %d requests, want only a's", n)
	}
}

// dialWithoutCert connects to addr with TLS but no client certificate and
// sends a hello: the listener must not answer.
func dialWithoutCert(t *testing.T, addr string, ca *testkit.CA) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3: the listener's refusal arrives on the first read.
		defer c.Close()
		c.Write(frameBytes(kindHello, 0, 0, encodeHello(hello{nonce: newNonce(), node: "x"})))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if err == nil {
		t.Fatal("a client without a certificate got an answer")
	}
}

func TestTLSConfigChecked(t *testing.T) {
	ca := testkit.NewCA(t)
	s, c := tlsPair(t, ca, ca, "a")
	noCA := s.Clone()
	noCA.ClientCAs = nil
	noCert := c.Clone()
	noCert.Certificates = nil
	insecure := c.Clone()
	insecure.InsecureSkipVerify = true
	verified := insecure.Clone()
	verified.VerifyConnection = func(tls.ConnectionState) error { return nil }
	if p, err := Listen(Config{NodeID: "a", Addr: "127.0.0.1:0", ServerTLS: s, ClientTLS: verified}); err != nil {
		t.Errorf("a client config verifying in VerifyConnection: %v", err)
	} else {
		p.Close(context.Background())
	}
	for name, cfg := range map[string]Config{
		"server only":     {ServerTLS: s},
		"no client CAs":   {ServerTLS: noCA, ClientTLS: c},
		"no client cert":  {ServerTLS: s, ClientTLS: noCert},
		"skip verify":     {ServerTLS: s, ClientTLS: insecure},
		"client only":     {ClientTLS: c},
		"empty server tc": {ServerTLS: &tls.Config{}, ClientTLS: c},
	} {
		cfg.NodeID, cfg.Addr = "a", "127.0.0.1:0"
		if p, err := Listen(cfg); err == nil {
			p.Close(context.Background())
			t.Errorf("%s: Listen accepted the TLS configuration", name)
		}
	}
}

// recordingProxy forwards one connection at a time to target and records
// what the dialing side sent.
type recordingProxy struct {
	ln net.Listener
	mu sync.Mutex
	up bytes.Buffer
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(c, s); c.Close() }()
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					p.mu.Lock()
					p.up.Write(buf[:n])
					p.mu.Unlock()
					s.Write(buf[:n])
					if err != nil {
						s.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *recordingProxy) sent() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.up.Bytes())
}

func TestSecretHello(t *testing.T) {
	defer func(d time.Duration) { refusedLogEvery = d }(refusedLogEvery)
	refusedLogEvery = 0
	secret := []byte("correct horse battery staple 42")
	var logs testkit.SyncBuffer
	b := listenCfg(t, Config{NodeID: "b", Secret: secret, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	served := echo(b)
	a := listenCfg(t, Config{NodeID: "a", Secret: secret})
	proxy := newRecordingProxy(t, b.Addr())
	if got, err := a.Link("b", proxy.ln.Addr().String()).Call(ctx(t), 40, []byte("first")); err != nil || string(got) != "first" {
		t.Fatalf("call with the cluster secret: %q, %v", got, err)
	}
	if bytes.Contains(proxy.sent(), secret) {
		t.Fatal("the cluster secret crossed the wire")
	}

	for name, cfg := range map[string]Config{
		"wrong secret": {NodeID: "a", Secret: []byte("a wrong secret of some length")},
		"no secret":    {NodeID: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			before := b.Stats().HandshakesRefused
			rogue := listenCfg(t, cfg)
			if _, err := rogue.Link("b", b.Addr()).Call(ctx(t), 40, []byte("inject")); !errors.Is(err, ErrLinkDown) {
				t.Fatalf("call: %v, want ErrLinkDown", err)
			}
			testkit.Eventually(t, 5*time.Second, "b to count the refusal", func() bool { return b.Stats().HandshakesRefused > before })
		})
	}
	// The other way round: a node with the secret refuses a listener
	// without it, or with another one, before sending a request.
	for name, cfg := range map[string]Config{
		"listener with a wrong secret": {NodeID: "b", Secret: []byte("a wrong secret of some length")},
		"listener without a secret":    {NodeID: "b"},
	} {
		t.Run(name, func(t *testing.T) {
			rogue := listenCfg(t, cfg)
			got := echo(rogue)
			if _, err := a.Link("b", rogue.Addr()).Call(ctx(t), 40, []byte("data")); !errors.Is(err, ErrRefused) {
				t.Fatalf("call: %v, want ErrRefused", err)
			}
			if got.Load() != 0 {
				t.Fatal("a sent a request to a listener that did not prove the secret")
			}
		})
	}

	// Replay: what a sent on its connection (hello, proof, the request),
	// sent again on a new connection, is refused at the proof: the
	// listener's nonce is new.
	before := b.Stats().HandshakesRefused
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(proxy.sent())
	expectClosed(t, c)
	testkit.Eventually(t, 5*time.Second, "b to count the replay", func() bool { return b.Stats().HandshakesRefused > before })
	if n := served.Load(); n != 1 {
		t.Fatalf("b served %d requests, want 1 (the replay delivered one)", n)
	}
	if !strings.Contains(logs.String(), "wrong proof of the cluster secret") {
		t.Fatalf("no log line for the refused hello:\n%s", logs.String())
	}
}

// expectClosed reads c until the peer closes it; what the peer sent
// before (its hello) is allowed, anything after a second is not.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("connection kept open")
		}
	}
}

// TestOldHelloDeliversNothing: a raw TCP client speaking the version 1
// hello (no nonce, no proof) and then a request gets nothing delivered, on
// a node with or without a secret, and a clear log line.
func TestOldHelloDeliversNothing(t *testing.T) {
	for name, secret := range map[string][]byte{"with secret": []byte("0123456789abcdef0123"), "without": nil} {
		t.Run(name, func(t *testing.T) {
			var logs testkit.SyncBuffer
			b := listenCfg(t, Config{NodeID: "b", Secret: secret, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			served := echo(b)
			c, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			raw := append(frameBytes(kindHello, 0, 0, append([]byte{1}, "a"...)), frameBytes(kindRequest, 40, 1, []byte("inject"))...)
			c.Write(raw)
			r := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := r.ReadByte(); err == nil {
				t.Fatal("b answered an old-style hello")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("b kept the connection open")
			}
			testkit.Eventually(t, 5*time.Second, "the refusal counted", func() bool { return b.Stats().HandshakesRefused == 1 })
			if served.Load() != 0 || b.Stats().RequestsIn != 0 {
				t.Fatal("a request after an old-style hello was handled")
			}
			if !strings.Contains(logs.String(), "hello of protocol version 1, this node speaks 2") {
				t.Fatalf("log lacks the version refusal:\n%s", logs.String())
			}
		})
	}
}
