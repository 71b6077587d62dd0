package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

const certsUsage = `usage: tributary certs [-dir DIR] <ca | node NAME [HOST|IP ...] | client NAME>

Makes the certificates of "Secure a site" (ECDSA P-256, PEM) in DIR
(default ./tls), so that its steps work as printed on one machine:

  ca                      DIR/ca.crt and DIR/ca.key: a CA valid 10 years
                          (an existing one is kept, never overwritten)
  node NAME [HOST|IP ...] DIR/NAME.crt and NAME.key, signed by the CA, for
                          servers and peer links (server and client use),
                          naming NAME, each HOST or IP given, localhost,
                          127.0.0.1 and ::1; valid 2 years
  client NAME             DIR/NAME.crt and NAME.key: a client certificate
                          whose subject CN is NAME (the principal)

Keys are written with mode 0600. Use openssl instead where a site's own CA
signs the certificates.
`

func cmdCerts(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	dir := fs.String("dir", "./tls", "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, certsUsage)
		return 0
	}
	if err != nil || len(pos) == 0 || (pos[0] == "ca") != (len(pos) == 1) || (pos[0] == "client" && len(pos) != 2) {
		fmt.Fprint(stderr, certsUsage)
		return 2
	}
	switch pos[0] {
	case "ca":
		err = makeCA(*dir, stdout)
	case "node", "client":
		err = issueCert(*dir, pos[0], pos[1], pos[2:], stdout)
	default:
		fmt.Fprintf(stderr, "tributary certs: unknown kind %q\n\n%s", pos[0], certsUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "tributary certs:", err)
		return 1
	}
	return 0
}

func makeCA(dir string, stdout io.Writer) error {
	crt, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(crt); err == nil {
		fmt.Fprintf(stdout, "kept %s (it exists)\n", crt)
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: "tributary CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := writePair(dir, crt, keyFile, der, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", crt, keyFile)
	return nil
}

func issueCert(dir, kind, name string, hosts []string, stdout io.Writer) error {
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(2, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if kind == "node" {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range append([]string{name}, append(hosts, "localhost", "127.0.0.1", "::1")...) {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	crt, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writePair(dir, crt, keyFile, der, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s (%s, signed by %s)\n", crt, keyFile, kind, filepath.Join(dir, "ca.crt"))
	return nil
}

func loadCA(dir string) (*x509.Certificate, any, error) {
	crtPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("%w (make the CA first: tributary certs -dir %s ca)", err, dir)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s: ca.crt or ca.key is not PEM", dir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s/ca.crt: %w", dir, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s/ca.key: %w", dir, err)
	}
	return ca, key, nil
}

func writePair(dir, crt, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func serialNumber() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
