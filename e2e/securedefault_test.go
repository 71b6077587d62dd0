package e2e

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestSecureByDefault: `tributary edge` and `tributary cloud` on a
// non-loopback address without client authentication refuse to start
// with an error that says what to configure; allow_anonymous: true (or a
// users file) lets the same file through.
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (int, string) { return runExit(t, 30*time.Second, args...) }
	open := "data_dir: " + dir + "\nmqtt:\n  addr: 0.0.0.0:0\nhttp_addr: 127.0.0.1:0\n"
	f := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(f, []byte(open), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := run("edge", "-config", f)
	for _, want := range []string{"mqtt.addr (0.0.0.0:0)", "security.users_file", "tributary passwd", "allow_anonymous: true"} {
		if code == 0 || !strings.Contains(out, want) {
			t.Fatalf("edge on 0.0.0.0 without auth: exit %d, output does not name %q:\n%s", code, want, out)
		}
	}
	if code, out := run("config", "check", f); code == 0 || !strings.Contains(out, "mqtt.addr (0.0.0.0:0)") {
		t.Fatalf("config check: exit %d\n%s", code, out)
	}
	if err := os.WriteFile(f, []byte(open+"security:\n  allow_anonymous: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := run("config", "check", f); code != 0 {
		t.Fatalf("allow_anonymous: true still refused: %s", out)
	}
	code, out = run("cloud", "--data", filepath.Join(dir, "cloud"), "--catalog-addr", "0.0.0.0:0", "--kafka-addr", "", "--pulsar-addr", "")
	if code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0)") {
		t.Fatalf("cloud on 0.0.0.0 without auth: exit %d\n%s", code, out)
	}
}

// TestSecureDefaultNotTalkedAround (issue 35, finding 2): settings that
// only look like authentication do not pass the off-loopback check — a
// client CA "required" with no certificate to serve it, or the
// certificate only as another listener's override — on the edge, on
// `config check` and on `tributary cloud --check`; and with client
// certificates the only way in, an anonymous client is refused.
func TestSecureDefaultNotTalkedAround(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	run := func(args ...string) (int, string) { return runExit(t, 30*time.Second, args...) }
	caOnly := "  tls:\n    client_ca_file: " + ca.Files() + "\n    require_client_cert: true\n"
	override := caOnly + "    listeners:\n      http: {cert_file: " + srv.CertFile + ", key_file: " + srv.KeyFile +
		", client_ca_file: " + ca.Files() + ", require_client_cert: true}\n"
	for name, sec := range map[string]string{"client CA only": caOnly, "certificate only on http": override} {
		f := filepath.Join(dir, "edge.yaml")
		writeFile(t, f, "data_dir: "+filepath.Join(dir, "edge")+"\nmqtt:\n  addr: 0.0.0.0:0\nhttp_addr: 0.0.0.0:0\nsecurity:\n"+sec)
		if code, out := run("config", "check", f); code == 0 || !strings.Contains(out, "mqtt.addr (0.0.0.0:0) serves no TLS") {
			t.Fatalf("%s: config check: exit %d\n%s", name, code, out)
		}
		if code, out := run("edge", "-config", f); code == 0 || !strings.Contains(out, "mqtt.addr (0.0.0.0:0) serves no TLS") {
			t.Fatalf("%s: edge: exit %d\n%s", name, code, out)
		}
		sf := filepath.Join(dir, "security.yaml")
		writeFile(t, sf, strings.ReplaceAll(strings.TrimPrefix(sec, "  "), "\n  ", "\n"))
		if code, out := run("cloud", "--check", "--data", filepath.Join(dir, "cloud"), "--catalog-addr", "0.0.0.0:0", "--kafka-addr", "", "--pulsar-addr", "",
			"--security", sf); code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0) serves no TLS") {
			t.Fatalf("%s: cloud --check: exit %d\n%s", name, code, out)
		}
	}

	// Certificates only: anonymous access is off by default.
	sf := filepath.Join(dir, "certs.yaml")
	writeFile(t, sf, securityYAML(srv)+"  client_ca_file: "+ca.Files()+"\n")
	p := startDev(t, filepath.Join(dir, "dev"), "--security", sf)
	connect := func(cert *testkit.CertFiles, id string) byte {
		cfg := &tls.Config{RootCAs: ca.Pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		conn, err := tls.Dial("tcp", p.MQTT, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, rc := testkit.MQTTConnect(t, conn, paho.Connect{ClientID: id, CleanStart: true}, nil)
		if c != nil {
			c.Disconnect(&paho.Disconnect{})
		}
		return rc
	}
	if rc := connect(nil, "anon"); rc == 0 {
		t.Fatal("an anonymous client was admitted where only client certificates authenticate")
	}
	dev := ca.Client(t, "dev-1")
	if rc := connect(&dev, "dev-1"); rc != 0 {
		t.Fatalf("a client certificate: CONNACK %#x", rc)
	}
}
