package listen

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// tlsListener serves echo over TLS with files; each connection calls Ready
// once its handshake is done.
func tlsListener(t *testing.T, files TLSFiles, cfg Config) (*Listener, *TLS) {
	t.Helper()
	l, tl := listenTLS(t, TLSConfig{TLSFiles: files}, "mqtt", cfg)
	serve(t, l, func(c net.Conn) {
		defer c.Close()
		if c.(*tls.Conn).Handshake() != nil {
			return
		}
		Ready(c)
		cn := "-"
		if pc := PeerCertificate(wrapped{c}); pc != nil { // found through NetConn
			cn = pc.Subject.CommonName
		}
		c.Write([]byte(cn + "\n"))
		io.Copy(c, c)
	})
	return l, tl
}

// listenTLS opens a listener with the *tls.Config NewTLS(tc) gives name.
func listenTLS(t *testing.T, tc TLSConfig, name string, cfg Config) (*Listener, *TLS) {
	t.Helper()
	tl, err := NewTLS(tc, quiet())
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS, cfg.Logger = tl.Server(name), quiet()
	l, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, tl
}

// wrapped is a connection that wraps another, as MQTT's WebSocket one does.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// tlsDial dials l with a client trusting ca, presenting certs; it returns
// the first line the server sent (the client's CN as the server saw it).
func tlsDial(t *testing.T, l *Listener, roots *x509.CertPool, certs ...tls.Certificate) (string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, Certificates: certs})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return string(line), err // TLS 1.3: a refused client certificate shows here
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
}

func TestTLSAccept(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	l, _ := tlsListener(t, TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.Files()},
		Config{HandshakeTimeout: 300 * time.Millisecond})
	if cn, err := tlsDial(t, l, ca.Pool); err != nil || cn != "-" {
		t.Fatalf("without a client certificate: %q %v", cn, err)
	}
	if cn, err := tlsDial(t, l, ca.Pool, ca.Client(t, "sensor-7").TLS(t)); err != nil || cn != "sensor-7" {
		t.Fatalf("PeerCertificate CN %q, %v; want sensor-7", cn, err)
	}
	// Ready through the *tls.Conn stops the handshake deadline.
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(500 * time.Millisecond)
	c.Write([]byte("ping"))
	buf := make([]byte, 6)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "-\nping" {
		t.Fatalf("after the deadline: %q %v", buf, err)
	}
	if _, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: testkit.NewCA(t).Pool}); err == nil {
		t.Fatal("a client trusting another CA accepted the server")
	}
}

// TestTLSPlainClient: a plain-text client on a TLS port is closed at once
// and leaves nothing open, on a listener with a protocol deadline and on
// one without (HTTP, REST, peer); so is one that never says anything.
func TestTLSPlainClient(t *testing.T) {
	defer func(d time.Duration) { tlsHandshakeTimeout = d }(tlsHandshakeTimeout)
	tlsHandshakeTimeout = 300 * time.Millisecond
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	for _, hs := range []time.Duration{-1, 5 * time.Second} {
		l, _ := tlsListener(t, TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, Config{HandshakeTimeout: hs})
		c := dial(t, l)
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if !closedSoon(c, 2*time.Second) {
			t.Fatalf("handshake timeout %s: plain-text client kept open", hs)
		}
		testkit.Eventually(t, 2*time.Second, "released and counted", func() bool {
			st := l.Stats()
			return st.Open == 0 && st.TLSHandshakeFailures == 1
		})
		if hs < 0 {
			silent := dial(t, l)
			if !closedSoon(silent, 3*time.Second) {
				t.Fatal("silent client kept open without a protocol deadline")
			}
			testkit.Eventually(t, 2*time.Second, "released and counted", func() bool {
				st := l.Stats()
				return st.Open == 0 && st.HandshakeTimeouts == 1
			})
		}
	}
}

// TestTLSClientCert: with require_client_cert only a certificate of the
// client CA gets in: none, another CA's and an expired one are refused.
func TestTLSClientCert(t *testing.T) {
	ca, other := testkit.NewCA(t), testkit.NewCA(t)
	srv := ca.Server(t)
	l, _ := tlsListener(t, TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.Files(),
		RequireClientCert: true}, Config{})
	if cn, err := tlsDial(t, l, ca.Pool, ca.Client(t, "plc-1").TLS(t)); err != nil || cn != "plc-1" {
		t.Fatalf("good certificate: %q %v", cn, err)
	}
	for name, certs := range map[string][]tls.Certificate{
		"none":     nil,
		"other CA": {other.Client(t, "plc-1").TLS(t)},
		"expired":  {ca.Client(t, "plc-1", testkit.Expired()).TLS(t)},
	} {
		if cn, err := tlsDial(t, l, ca.Pool, certs...); err == nil {
			t.Fatalf("%s: client accepted as %q", name, cn)
		}
	}
	testkit.Eventually(t, 2*time.Second, "failures counted", func() bool { return l.Stats().TLSHandshakeFailures == 3 })
	testkit.Eventually(t, 2*time.Second, "released", func() bool { return l.Stats().Open == 0 })
}

func TestTLSExpiredServer(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.ServerWith(t, testkit.Expired())
	l, _ := tlsListener(t, TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, Config{})
	_, err := tlsDial(t, l, ca.Pool)
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("dial to an expired certificate: %v", err)
	}
}

// TestTLSReload: Reload swaps the served certificate; a reload that fails
// keeps the old one.
func TestTLSReload(t *testing.T) {
	ca := testkit.NewCA(t)
	first, second := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	files := TLSFiles{CertFile: dir + "/tls.crt", KeyFile: dir + "/tls.key"}
	install := func(f testkit.CertFiles) {
		copyFile(t, f.CertFile, files.CertFile)
		copyFile(t, f.KeyFile, files.KeyFile)
	}
	install(first)
	l, tl := tlsListener(t, files, Config{})
	served := func() string { return ca.Served(t, l.Addr().String()).SerialNumber.String() }
	if got := served(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serves %s, want %s", got, first.Cert.SerialNumber)
	}
	install(second)
	if err := tl.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after reload serves %s, want %s", got, second.Cert.SerialNumber)
	}
	os.WriteFile(files.KeyFile, []byte("not a key"), 0o600)
	if err := tl.Reload(); err == nil || !strings.Contains(err.Error(), "security.tls.cert_file") {
		t.Fatalf("reload of a bad key: %v", err)
	}
	if got := served(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after a failed reload serves %s, want %s", got, second.Cert.SerialNumber)
	}
}

// TestTLSReloadClientCA: Reload swaps the client CA too: a client of the
// new CA gets in, one of the old CA no longer does.
func TestTLSReloadClientCA(t *testing.T) {
	oldCA, newCA := testkit.NewCA(t), testkit.NewCA(t)
	srv := oldCA.Server(t)
	caFile := t.TempDir() + "/clients.crt"
	copyFile(t, oldCA.Files(), caFile)
	l, tl := tlsListener(t, TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: caFile,
		RequireClientCert: true}, Config{})
	oldClient, newClient := oldCA.Client(t, "old").TLS(t), newCA.Client(t, "new").TLS(t)
	if _, err := tlsDial(t, l, oldCA.Pool, newClient); err == nil {
		t.Fatal("a client of a CA not yet trusted got in")
	}
	copyFile(t, newCA.Files(), caFile)
	if err := tl.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn, err := tlsDial(t, l, oldCA.Pool, newClient); err != nil || cn != "new" {
		t.Fatalf("client of the reloaded CA: %q %v", cn, err)
	}
	if _, err := tlsDial(t, l, oldCA.Pool, oldClient); err == nil {
		t.Fatal("a client of the CA reloaded away still got in")
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSGracefulClose: TestGracefulClose through a *tls.Conn.
func TestTLSGracefulClose(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	l, _ := listenTLS(t, TLSConfig{TLSFiles: TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}}, "kafka",
		Config{HandshakeTimeout: -1})
	serve(t, l, func(c net.Conn) {
		buf := make([]byte, 16)
		io.ReadFull(c, buf)
		c.Write([]byte("GOODBYE"))
		c.Close()
	})
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Write(bytes.Repeat([]byte("x"), 4<<20))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "GOODBYE" {
		t.Fatalf("client got %q, %v; want GOODBYE and close_notify", got, err)
	}
	testkit.Eventually(t, 2*time.Second, "released", func() bool { return l.Stats().Open == 0 })
}

// TestTLSPeer: a node dials another with TLS.Client; the listener requires
// a client certificate and sees the dialler's; overrides apply per name.
func TestTLSPeer(t *testing.T) {
	ca := testkit.NewCA(t)
	node, web := ca.Server(t), ca.Server(t)
	tl, err := NewTLS(TLSConfig{
		TLSFiles: TLSFiles{CertFile: web.CertFile, KeyFile: web.KeyFile},
		Listeners: map[string]TLSFiles{
			"peer": {CertFile: node.CertFile, KeyFile: node.KeyFile, ClientCAFile: ca.Files(), RequireClientCert: true},
			"http": {},
		},
	}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if tl.Server("http") != nil || tl.Client("http") != nil {
		t.Fatal("an empty override must turn TLS off for its listener")
	}
	if tl.Server("mqtt") == nil {
		t.Fatal("mqtt takes the top-level certificate")
	}
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: -1, Logger: quiet(), TLS: tl.Server("peer")})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *x509.Certificate, 8)
	serve(t, l, func(c net.Conn) { seen <- PeerCertificate(c); c.Close() })
	c, err := tls.Dial("tcp", l.Addr().String(), tl.Client("peer"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pc := c.ConnectionState().PeerCertificates[0]; !pc.Equal(node.Cert) {
		t.Fatalf("peer listener served %s", pc.Subject)
	}
	if pc := <-seen; pc == nil || !pc.Equal(node.Cert) {
		t.Fatalf("server saw client certificate %v", pc)
	}
	// Self trusts exactly the listener's own certificate.
	if c, err := tls.Dial("tcp", l.Addr().String(), tl.Self("peer")); err != nil {
		t.Fatalf("Self to its own listener: %v", err)
	} else {
		c.Close()
		<-seen
	}
	if c, err := tls.Dial("tcp", l.Addr().String(), tl.Self("mqtt")); err == nil {
		c.Close()
		t.Fatal("Self(mqtt) accepted the peer listener's certificate")
	}
	// The client side verifies the server against the client CA.
	other := testkit.NewCA(t)
	tl2, err := NewTLS(TLSConfig{TLSFiles: TLSFiles{CertFile: node.CertFile, KeyFile: node.KeyFile, ClientCAFile: other.Files()}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", l.Addr().String(), tl2.Client("peer")); err == nil {
		c.Close()
		t.Fatal("client verified a server of another CA")
	}
}

func TestTLSNilAndErrors(t *testing.T) {
	var tl *TLS
	if tl.Server("mqtt") != nil || tl.Client("peer") != nil || tl.Reload() != nil {
		t.Fatal("nil *TLS must give nil")
	}
	if tl, err := NewTLS(TLSConfig{}, nil); tl != nil || err != nil {
		t.Fatalf("no certificate: %v %v", tl, err)
	}
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	for want, cfg := range map[string]TLSConfig{
		"security.tls.key_file":                      {TLSFiles: TLSFiles{CertFile: srv.CertFile, KeyFile: "/nonexistent/k"}},
		"security.tls.listeners.kafka.cert_file":     {Listeners: map[string]TLSFiles{"kafka": {CertFile: "/nonexistent/c", KeyFile: srv.KeyFile}}},
		"security.tls.client_ca_file":                {TLSFiles: TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: "/nonexistent/ca"}},
		"security.tls.client_ca_file " + srv.KeyFile: {TLSFiles: TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: srv.KeyFile}},
	} {
		if _, err := NewTLS(cfg, quiet()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want it to name %s", err, want)
		}
	}
	if PeerCertificate(nil) != nil {
		t.Fatal("PeerCertificate(nil)")
	}
}

// TestTLSHTTP: NewHTTPServer over a TLS listener.
func TestTLSHTTP(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	l, _ := listenTLS(t, TLSConfig{TLSFiles: TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}}, "http",
		Config{HandshakeTimeout: -1})
	hs := NewHTTPServer(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			t.Error("request without TLS state")
		}
		w.Write([]byte("ok"))
	}))
	go hs.Serve(l)
	defer hs.Close()
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	r, err := cl.Get("https://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
}
