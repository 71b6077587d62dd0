package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

// TestCloudServesCatalog starts 'tributary cloud' on a free port, commits a
// partition allocation through its REST catalog and stops it with SIGINT.
func TestCloudServesCatalog(t *testing.T) {
	dir := t.TempDir()
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"cloud", "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0", "--pulsar-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data", dir, "--ready-file", readyFile, "--node-token", "edge-secret"}, io.Discard, pw)
		pw.Close()
	}()
	// The human ready line is still logged, with the same address.
	ready := regexp.MustCompile(`msg=ready catalog=(\S+)`)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("cloud exited with %d before ready", code)
	case <-time.After(20 * time.Second):
		t.Fatal("no ready line")
	}
	raw, err := os.ReadFile(readyFile)
	if err != nil {
		t.Fatalf("ready file: %v", err)
	}
	var addrs map[string]string
	if err := json.Unmarshal(raw, &addrs); err != nil {
		t.Fatalf("ready file %q: %v", raw, err)
	}
	if addrs["catalog"] != addr || addrs["kafka"] == "" || addrs["pulsar"] == "" || addrs["http"] == "" || addrs["mqtt"] != "" || len(addrs) != 6 {
		t.Fatalf("ready file %v, want catalog %s and bound kafka, pulsar and http", addrs, addr)
	}
	ctx := context.Background()
	// An edge node commits with the node token (tributary.* properties).
	c, err := tables.Open(ctx, tables.Config{URI: "http://" + addr, Warehouse: "file://" + dir + "/warehouse",
		Properties: map[string]string{"token": "edge-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.AllocatePartition(ctx, "factory.telemetry", "n1")
	if err != nil || p != 0 {
		t.Fatalf("allocate over REST: %d %v", p, err)
	}
	c.Close()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cloud did not stop on SIGINT")
	}
}

// TestCloudCheck: --check builds the configuration a start would, loads
// its files and exits without serving: 0 when it would start, else the
// reason.
func TestCloudCheck(t *testing.T) {
	dir := t.TempDir()
	check := func(args ...string) (int, string) {
		var out, errs strings.Builder
		code := run(append([]string{"cloud", "--check", "--data", dir}, args...), &out, &errs)
		return code, out.String() + errs.String()
	}
	if code, out := check("--catalog-addr", "127.0.0.1:0"); code != 0 || !strings.Contains(out, "catalog.addr: 127.0.0.1:0") || !strings.Contains(out, "authentication: false") {
		t.Fatalf("loopback: exit %d\n%s", code, out)
	}
	if code, out := check("--catalog-addr", "0.0.0.0:0"); code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0)") {
		t.Fatalf("0.0.0.0 without authentication: exit %d\n%s", code, out)
	}
	sec := filepath.Join(dir, "security.yaml")
	os.WriteFile(sec, []byte("users_file: "+filepath.Join(dir, "missing.passwd")+"\n"), 0o600)
	if code, out := check("--catalog-addr", "0.0.0.0:0", "--security", sec); code == 0 || !strings.Contains(out, "security.users_file") {
		t.Fatalf("a missing users file: exit %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(dir, "missing.passwd"), nil, 0o600)
	if code, out := check("--catalog-addr", "0.0.0.0:0", "--security", sec); code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0) serves no TLS") {
		t.Fatalf("users file but a plain-text listener: exit %d\n%s", code, out)
	}
	// Issue 35 finding 2: a client CA "required" with no certificate to
	// serve it verifies nothing; it used to pass.
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	os.WriteFile(sec, []byte("tls:\n  client_ca_file: "+ca.Files()+"\n  require_client_cert: true\n"), 0o600)
	if code, out := check("--catalog-addr", "0.0.0.0:0", "--security", sec); code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0) serves no TLS") ||
		!strings.Contains(out, "authenticates nobody") {
		t.Fatalf("client CA without a certificate: exit %d\n%s", code, out)
	}
	os.WriteFile(sec, []byte("tls:\n  client_ca_file: "+ca.Files()+"\n  require_client_cert: true\n  listeners:\n    kafka:\n      cert_file: "+srv.CertFile+
		"\n      key_file: "+srv.KeyFile+"\n      client_ca_file: "+ca.Files()+"\n      require_client_cert: true\n"), 0o600)
	if code, out := check("--catalog-addr", "0.0.0.0:0", "--security", sec); code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0) serves no TLS") {
		t.Fatalf("the certificate only as another listener's override: exit %d\n%s", code, out)
	}
	os.WriteFile(sec, []byte("users_file: "+filepath.Join(dir, "missing.passwd")+"\ntls:\n  cert_file: "+srv.CertFile+"\n  key_file: "+srv.KeyFile+"\n"), 0o600)
	if code, out := check("--catalog-addr", "0.0.0.0:0", "--security", sec); code != 0 || !strings.Contains(out, "authentication: true") {
		t.Fatalf("with the users file and TLS: exit %d\n%s", code, out)
	}
}
