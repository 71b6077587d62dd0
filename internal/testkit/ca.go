package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for tests: an ECDSA P-256 root whose
// certificates and keys are PEM files in the test's temporary folder. No
// network, nothing outside the test. Two NewCA calls give two unrelated
// CAs (for "certificate from another CA" tests).
type CA struct {
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
}

// CertFiles are the PEM files of one issued certificate.
type CertFiles struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
}

// CertOption changes a certificate before it is signed.
type CertOption func(*x509.Certificate)

// Expired makes the certificate one that expired an hour ago.
func Expired() CertOption {
	return func(c *x509.Certificate) {
		c.NotBefore = time.Now().Add(-48 * time.Hour)
		c.NotAfter = time.Now().Add(-time.Hour)
	}
}

var serial atomic.Int64

// NewCA makes a CA whose files live in tb's temporary folder.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "tributary test CA " + tb.Name()},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp(tb.TempDir(), "ca")
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{dir: dir, cert: cert, key: key, caFile: filepath.Join(dir, "ca.crt")}
	writePEM(tb, ca.caFile, "CERTIFICATE", der)
	return ca
}

// Files is the path of the CA's certificate (ca.crt): a client's CA file,
// or a server's client_ca_file.
func (ca *CA) Files() string { return ca.caFile }

// Pool is a pool holding the CA's certificate (a Go client's RootCAs).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server issues a server certificate for 127.0.0.1, ::1, localhost and
// names (DNS names, or IP addresses). It is valid for client
// authentication as well, as a node's certificate on its peer links is.
func (ca *CA) Server(tb testing.TB, names ...string) CertFiles {
	tb.Helper()
	return ca.issue(tb, "server", serverTemplate(names), nil)
}

// ServerWith is Server (for the loopback names) with options, e.g.
// Expired().
func (ca *CA) ServerWith(tb testing.TB, opts ...CertOption) CertFiles {
	tb.Helper()
	return ca.issue(tb, "server", serverTemplate(nil), opts)
}

func serverTemplate(names []string) *x509.Certificate {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return tmpl
}

// Client issues a client certificate whose subject CN is cn.
func (ca *CA) Client(tb testing.TB, cn string, opts ...CertOption) CertFiles {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue(tb, "client-"+cn, tmpl, opts)
}

// TLS is the tls.Certificate of f, for a Go client's Certificates.
func (f CertFiles) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func (ca *CA) issue(tb testing.TB, name string, tmpl *x509.Certificate, opts []CertOption) CertFiles {
	tb.Helper()
	key := newKey(tb)
	n := serial.Add(1)
	tmpl.SerialNumber = big.NewInt(n)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	base := filepath.Join(ca.dir, name+"-"+big.NewInt(n).String())
	f := CertFiles{CertFile: base + ".crt", KeyFile: base + ".key", Cert: cert}
	writePEM(tb, f.CertFile, "CERTIFICATE", der)
	writePEM(tb, f.KeyFile, "EC PRIVATE KEY", kder)
	return f
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// Served dials addr over TLS trusting ca and returns the certificate the
// server presents (to tell which one a reload installed).
func (ca *CA) Served(tb testing.TB, addr string) *x509.Certificate {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// Node issues a node's certificate: subject CN cn, the loopback names,
// valid for server and client authentication (peer links use it both ways).
func (ca *CA) Node(tb testing.TB, cn string) CertFiles {
	tb.Helper()
	tmpl := serverTemplate(nil)
	tmpl.Subject.CommonName = cn
	return ca.issue(tb, "node-"+cn, tmpl, nil)
}
