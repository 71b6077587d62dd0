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
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a throw-away certificate authority for tests: ECDSA P-256, valid
// for a day, its certificates and keys in memory (Issue) or PEM files in
// the test's temporary folder (Files, Server, Client, WriteFiles). No
// network, nothing outside the test. Two NewCA calls give two unrelated
// CAs (for "certificate from another CA" tests). Its server certificates
// name 127.0.0.1, ::1 and localhost and serve both server and client
// authentication (as a node's certificate does on peer links).
type CA struct {
	Cert *x509.Certificate
	Pool *x509.CertPool // just this CA: a Go client's RootCAs, a server's ClientCAs
	key  *ecdsa.PrivateKey
	dir  string // where the PEM files go
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

// NewCA makes a CA; its ca.crt is written to a temporary folder of tb.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "tributary test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
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
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ca := &CA{Cert: cert, Pool: pool, key: key, dir: dir}
	writePEM(tb, ca.Files(), "CERTIFICATE", der)
	return ca
}

// Files is the path of the CA's certificate (ca.crt): a client's CA file,
// or a server's client_ca_file.
func (ca *CA) Files() string { return filepath.Join(ca.dir, "ca.crt") }

// Issue makes a certificate for common name cn, valid for 127.0.0.1, ::1
// and localhost, for server and client authentication.
func (ca *CA) Issue(tb testing.TB, cn string) tls.Certificate {
	tb.Helper()
	tmpl := serverTemplate(nil)
	tmpl.Subject.CommonName = cn
	der, key, leaf := ca.sign(tb, tmpl, nil)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// WriteFiles issues a certificate for cn (as Issue) and writes it, its key
// and the CA's certificate as PEM files under dir: cn.crt, cn.key, ca.crt.
func (ca *CA) WriteFiles(tb testing.TB, dir, cn string) (certFile, keyFile, caFile string) {
	tb.Helper()
	c := ca.Issue(tb, cn)
	certFile, keyFile, caFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key"), filepath.Join(dir, "ca.crt")
	writePEM(tb, certFile, "CERTIFICATE", c.Certificate[0])
	writeKey(tb, keyFile, c.PrivateKey.(*ecdsa.PrivateKey))
	writePEM(tb, caFile, "CERTIFICATE", ca.Cert.Raw)
	return certFile, keyFile, caFile
}

// Server issues a server certificate for 127.0.0.1, ::1, localhost and
// names (DNS names, or IP addresses) as PEM files. It is valid for client
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

// Client issues a client certificate whose subject CN is cn, as PEM files.
func (ca *CA) Client(tb testing.TB, cn string, opts ...CertOption) CertFiles {
	tb.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
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

// Served dials addr over TLS trusting ca and returns the certificate the
// server presents (to tell which one a reload installed).
func (ca *CA) Served(tb testing.TB, addr string) *x509.Certificate {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
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

// sign signs tmpl (a day's validity, then opts) for a fresh key.
func (ca *CA) sign(tb testing.TB, tmpl *x509.Certificate, opts []CertOption) ([]byte, *ecdsa.PrivateKey, *x509.Certificate) {
	tb.Helper()
	key := newKey(tb)
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return der, key, leaf
}

// issue signs tmpl and writes the certificate and key to the CA's folder.
func (ca *CA) issue(tb testing.TB, name string, tmpl *x509.Certificate, opts []CertOption) CertFiles {
	tb.Helper()
	der, key, leaf := ca.sign(tb, tmpl, opts)
	base := filepath.Join(ca.dir, name+"-"+strconv.FormatInt(leaf.SerialNumber.Int64(), 10))
	f := CertFiles{CertFile: base + ".crt", KeyFile: base + ".key", Cert: leaf}
	writePEM(tb, f.CertFile, "CERTIFICATE", der)
	writeKey(tb, f.KeyFile, key)
	return f
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func writeKey(tb testing.TB, path string, key *ecdsa.PrivateKey) {
	tb.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, path, "PRIVATE KEY", der)
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
