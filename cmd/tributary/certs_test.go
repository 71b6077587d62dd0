package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCerts: tributary certs makes a CA, a node certificate that a client
// dialing 127.0.0.1 or localhost verifies (beside the plant names), and a
// client certificate the node verifies, whose CN is the principal.
func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var out, errs strings.Builder
	for _, args := range [][]string{{"ca"}, {"node", "edge-1", "edge-1.plant.local", "10.0.0.11"}, {"client", "sensor-1"}, {"ca"}} {
		if code := run(append([]string{"certs", "-dir", dir}, args...), &out, &errs); code != 0 {
			t.Fatalf("certs %v: exit %d: %s", args, code, errs.String())
		}
	}
	if !strings.Contains(out.String(), "kept "+filepath.Join(dir, "ca.crt")) {
		t.Errorf("a second ca overwrote the CA:\n%s", out.String())
	}
	if fi, err := os.Stat(filepath.Join(dir, "edge-1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi, err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	node, err := tls.LoadX509KeyPair(filepath.Join(dir, "edge-1.crt"), filepath.Join(dir, "edge-1.key"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, "sensor-1.crt"), filepath.Join(dir, "sensor-1.key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{node}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				peer <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			c.Close()
		}
	}()
	for _, name := range []string{"127.0.0.1", "localhost", "edge-1.plant.local", "10.0.0.11"} {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: name, Certificates: []tls.Certificate{client}})
		if err != nil {
			t.Fatalf("dial as %s: %v", name, err)
		}
		c.Close()
		if cn := <-peer; cn != "sensor-1" {
			t.Fatalf("client CN %q", cn)
		}
	}
	if code := run([]string{"certs", "-dir", t.TempDir(), "node", "x"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "make the CA first") {
		t.Errorf("node without a CA: exit %d %s", code, errs.String())
	}
}
