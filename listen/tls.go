package listen

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
)

// TLSFiles names the PEM files of one TLS identity.
type TLSFiles struct {
	// CertFile and KeyFile: the certificate chain and private key this
	// process presents. Both empty = no TLS.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile: when set, client certificates are requested and
	// verified against these CAs (mutual TLS); a client certificate
	// authenticates its subject CN. Optional. For this process's own dials
	// (TLS.Client, peer links) it is also the CA the server must present a
	// certificate of.
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireClientCert refuses a client without a certificate signed by
	// ClientCAFile (default false: the certificate is optional and other
	// authentication applies). Peer links always require one.
	RequireClientCert bool `yaml:"require_client_cert"`
}

// TLSConfig is the security.tls section: one identity for every listener,
// with per-listener overrides (keys: TLSListeners). An override replaces
// the top-level files for that listener as a whole: an override without
// cert_file turns TLS off for that listener.
type TLSConfig struct {
	TLSFiles `yaml:",inline"`
	// Listeners overrides the files for one listener by name.
	Listeners map[string]TLSFiles `yaml:"listeners"`
}

// TLSListeners are the listener names TLSConfig.Listeners takes: MQTT over
// TCP and over WebSocket, Kafka (the edge's produce listener and the cloud
// server's consumer listener), Pulsar, the HTTP status/metrics/console
// port, the Iceberg REST catalog, and peer links between edge nodes.
var TLSListeners = []string{"mqtt", "mqtt_ws", "kafka", "pulsar", "http", "rest", "peer"}

// Enabled tells whether any listener has TLS.
func (c TLSConfig) Enabled() bool {
	if c.CertFile != "" {
		return true
	}
	for _, f := range c.Listeners {
		if f.CertFile != "" {
			return true
		}
	}
	return false
}

// On tells whether the named listener has a certificate (serves TLS).
func (c TLSConfig) On(listener string) bool { return c.Files(listener).CertFile != "" }

// Files returns the files that apply to listener name: its override in
// Listeners (as a whole), else the top-level ones.
func (c TLSConfig) Files(name string) TLSFiles {
	if f, ok := c.Listeners[name]; ok {
		return f
	}
	return c.TLSFiles
}

// TLS holds the loaded certificates, keys and CAs of a TLSConfig and hands
// out the *tls.Config of each listener. Its configs pick the certificate
// and the client CAs at each handshake, so Reload swaps them for every
// listener without a restart; connections already open keep theirs.
//
// A nil *TLS is valid: every method returns nil (no TLS anywhere).
type TLS struct {
	cfg   TLSConfig
	log   *slog.Logger
	state atomic.Pointer[tlsState]
}

// tlsState is one load of every file: the identity by override name, ""
// for the top-level files.
type tlsState map[string]*tlsIdentity

type tlsIdentity struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil: no client_ca_file
	server    *tls.Config    // what the listener's handshakes use
}

// NewTLS loads every file cfg names. An error names the file and its YAML
// field. With no certificate configured it returns (nil, nil).
func NewTLS(cfg TLSConfig, log *slog.Logger) (*TLS, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	t := &TLS{cfg: cfg, log: log}
	st, err := t.load()
	if err != nil {
		return nil, err
	}
	t.state.Store(&st)
	return t, nil
}

// Reload reads every file again (called on SIGHUP) and swaps the
// certificates and CAs all listeners present and verify from their next
// handshake on. If any file fails, nothing changes: the old ones stay, and
// the error (naming the file and field) is returned for the caller to log.
func (t *TLS) Reload() error {
	if t == nil {
		return nil
	}
	st, err := t.load()
	if err != nil {
		return err
	}
	t.state.Store(&st)
	t.log.Info("tls certificates reloaded")
	return nil
}

func (t *TLS) load() (tlsState, error) {
	st := tlsState{}
	add := func(key, field string, f TLSFiles) error {
		if f.CertFile == "" {
			return nil
		}
		id, err := loadIdentity(field, f)
		if err != nil {
			return err
		}
		st[key] = id
		return nil
	}
	if err := add("", "security.tls", t.cfg.TLSFiles); err != nil {
		return nil, err
	}
	for name, f := range t.cfg.Listeners {
		if err := add(name, "security.tls.listeners."+name, f); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func loadIdentity(field string, f TLSFiles) (*tlsIdentity, error) {
	if f.KeyFile == "" {
		return nil, fmt.Errorf("%s.key_file: not set (cert_file %s needs its key)", field, f.CertFile)
	}
	for _, p := range []struct{ key, path string }{{"cert_file", f.CertFile}, {"key_file", f.KeyFile}} {
		if _, err := os.Stat(p.path); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, p.key, err)
		}
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file %s, key_file %s: %w", field, f.CertFile, f.KeyFile, err)
	}
	id := &tlsIdentity{cert: &cert}
	id.server = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return id.cert, nil },
	}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.client_ca_file: %w", field, err)
		}
		id.clientCAs = x509.NewCertPool()
		if !id.clientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.client_ca_file %s: no PEM certificate in it", field, f.ClientCAFile)
		}
		id.server.ClientCAs = id.clientCAs
		id.server.ClientAuth = tls.VerifyClientCertIfGiven
		if f.RequireClientCert {
			id.server.ClientAuth = tls.RequireAndVerifyClientCert
		}
	} else if f.RequireClientCert {
		return nil, fmt.Errorf("%s.require_client_cert: needs client_ca_file", field)
	}
	return id, nil
}

// current gives listener's identity of the latest load; nil when t is nil
// or the listener has no certificate.
func (t *TLS) current(listener string) func() *tlsIdentity {
	if t == nil || t.identity(listener) == nil {
		return nil
	}
	return func() *tlsIdentity { return t.identity(listener) }
}

// identity is the identity listener uses (its override's, or the
// top-level one), nil when it has no certificate.
func (t *TLS) identity(listener string) *tlsIdentity {
	key := ""
	if _, ok := t.cfg.Listeners[listener]; ok {
		key = listener
	}
	return (*t.state.Load())[key]
}

// Server is the *tls.Config of the named listener (one of TLSListeners),
// nil when it has no certificate. TLS 1.2 at least; the certificate and
// the client CAs are those of the latest load (see Reload); with a client
// CA, client certificates are verified if given (required with
// require_client_cert).
func (t *TLS) Server(listener string) *tls.Config {
	current := t.current(listener)
	if current == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return current().cert, nil
		},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return current().server, nil
		},
	}
}

// ServerH2 is Server offering HTTP/2 by ALPN ("h2", then "http/1.1"),
// for the HTTP ports that serve gRPC (which needs HTTP/2); nil when the
// listener has no certificate.
func (t *TLS) ServerH2(listener string) *tls.Config {
	c := t.Server(listener)
	if c == nil {
		return nil
	}
	protos := []string{"h2", "http/1.1"}
	get := c.GetConfigForClient
	c.NextProtos = protos
	c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sc, err := get(h)
		if err != nil || sc == nil {
			return sc, err
		}
		sc = sc.Clone()
		sc.NextProtos = protos
		return sc, nil
	}
	return c
}

// Client is the *tls.Config of this process's own dials for the named
// listener (peer links): it presents this process's certificate and
// verifies the server's chain against the listener's client CA (the
// system roots when it has none), and its name against the config's
// ServerName when the dialer sets one (tls.Dial sets the dialled host).
// Nil when the listener has no certificate. Like Server it follows Reload.
func (t *TLS) Client(listener string) *tls.Config {
	return t.dialConfig(listener, func(id *tlsIdentity, cs tls.ConnectionState) error {
		opts := x509.VerifyOptions{Roots: id.clientCAs, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	})
}

// Self is the *tls.Config of a client inside this process that connects
// to its own named listener (the dev simulator to the MQTT port): it
// presents the listener's certificate (for require_client_cert) and trusts
// exactly the certificate the listener serves, whatever CA signed it. Nil
// when the listener has no certificate.
func (t *TLS) Self(listener string) *tls.Config {
	return t.dialConfig(listener, func(id *tlsIdentity, cs tls.ConnectionState) error {
		if !bytes.Equal(cs.PeerCertificates[0].Raw, id.cert.Certificate[0]) {
			return errors.New("tls: the server is not this process's listener")
		}
		return nil
	})
}

// dialConfig is a client *tls.Config presenting listener's certificate
// and accepting the server when verify, given the identity of the latest
// load, does. The built-in verification is skipped so that verify sees
// the CAs of the latest load (RootCAs would be fixed at the first dial);
// that is the pattern of tls.Config.VerifyConnection's documentation.
func (t *TLS) dialConfig(listener string, verify func(*tlsIdentity, tls.ConnectionState) error) *tls.Config {
	current := t.current(listener)
	if current == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return current().cert, nil
		},
		InsecureSkipVerify: true, // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: server presented no certificate")
			}
			return verify(current(), cs)
		},
	}
}

// PeerCertificate is the verified client certificate of c (a *tls.Conn,
// or a connection that wraps one through NetConn() methods), nil when c is
// not TLS or the client gave no verified certificate. It completes the
// handshake if it is not done yet (bounded by the listener's deadline).
func PeerCertificate(c net.Conn) *x509.Certificate {
	tc := tlsConn(c)
	if tc == nil {
		return nil
	}
	if !tc.ConnectionState().HandshakeComplete {
		if tc.HandshakeContext(context.Background()) != nil {
			return nil
		}
	}
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// TLSHandshakeFailed tells whether c (or what it wraps through NetConn())
// is a TLS connection whose handshake did not complete: its read error is
// the handshake's, already counted and logged (rate-limited) by the
// listener, so the protocol need not log or count it again. Call it once
// a read failed.
func TLSHandshakeFailed(c net.Conn) bool {
	tc := tlsConn(c)
	return tc != nil && !tc.ConnectionState().HandshakeComplete
}

// tlsConn finds the *tls.Conn in c's NetConn chain.
func tlsConn(c net.Conn) *tls.Conn { return Underlying[*tls.Conn](c) }

// Underlying finds the connection of type T (a *tls.Conn, a *net.TCPConn)
// in c's chain of wrappers (each with a NetConn method, as *tls.Conn and
// this package's connections have), or T's zero value.
func Underlying[T net.Conn](c net.Conn) T {
	var zero T
	for i := 0; c != nil && i < 8; i++ {
		if tc, ok := c.(T); ok {
			return tc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return zero
		}
		c = u.NetConn()
	}
	return zero
}
