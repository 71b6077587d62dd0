package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/node"
)

// TestCloudOf: an edge config's catalog_addr / cloud_kafka_addr /
// cloud_pulsar_addr become a cloud server over the node's catalog, with
// the listeners it did not ask for off and maintenance left to the node.
func TestCloudOf(t *testing.T) {
	cfg := node.WithDefaults(node.Config{NodeID: "e1", DataDir: t.TempDir()})
	if _, ok := cloudOf(cfg); ok {
		t.Fatal("no cloud listener asked for, but a cloud server configured")
	}
	cfg.CatalogAddr = "127.0.0.1:0"
	c, ok := cloudOf(cfg)
	if !ok {
		t.Fatal("catalog_addr set, but no cloud server")
	}
	if c.Catalog.Addr != "127.0.0.1:0" || *c.Kafka.Addr != "" || *c.Pulsar.Addr != "" || *c.Maintenance.Enabled ||
		c.Catalog.URI != cfg.Catalog.URI || c.Catalog.Warehouse != cfg.Catalog.Warehouse || c.Catalog.Name != cfg.Catalog.Name {
		t.Fatalf("cloud config %+v from %+v", c, cfg)
	}
	cfg.CatalogAddr, cfg.CloudKafkaAddr, cfg.CloudPulsarAddr = "", "127.0.0.1:0", "127.0.0.1:0"
	c, _ = cloudOf(cfg)
	if c.Catalog.Addr != "" || *c.Kafka.Addr != "127.0.0.1:0" || *c.Pulsar.Addr != "127.0.0.1:0" {
		t.Fatalf("cloud config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestPrintDevTLS: with TLS on, tributary dev's "where to connect" lines
// give the TLS URLs and the client flags that trust a CA file.
func TestPrintDevTLS(t *testing.T) {
	cfg := node.WithDefaults(node.Config{NodeID: "d", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:8080",
		CatalogAddr: "127.0.0.1:8181", CloudKafkaAddr: "127.0.0.1:19092", CloudPulsarAddr: "127.0.0.1:6650"})
	cfg.MQTT.Addr, cfg.MQTT.WSAddr, cfg.Kafka.Addr = "127.0.0.1:1883", "127.0.0.1:1884", "127.0.0.1:9092"
	var plain strings.Builder
	printDev(&plain, cfg, "./data", 0, 1, "")
	cfg.Security.TLS.CertFile, cfg.Security.TLS.KeyFile, cfg.Security.TLS.ClientCAFile = "s.crt", "s.key", "ca.crt"
	var secure strings.Builder
	printDev(&secure, cfg, "./data", 0, 1, "")
	for _, want := range []string{"mqtts://127.0.0.1:1883", "wss://127.0.0.1:1884", "https://127.0.0.1:8080/metrics",
		"https://127.0.0.1:8181", "pulsar+ssl://127.0.0.1:6650", "--cafile ca.crt", "-X security.protocol=SSL -X ssl.ca.location=ca.crt"} {
		if !strings.Contains(secure.String(), want) {
			t.Errorf("with TLS, no %q in:\n%s", want, secure.String())
		}
		if strings.Contains(plain.String(), want) {
			t.Errorf("without TLS, %q in:\n%s", want, plain.String())
		}
	}
}

// TestPrintDevSecurity: with authentication on, the banner's publish
// commands carry credentials (and the CA with TLS), and a simulator
// without a user is announced as not started rather than as running.
func TestPrintDevSecurity(t *testing.T) {
	cfg := node.WithDefaults(node.Config{NodeID: "d", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:8080"})
	cfg.MQTT.Addr, cfg.Kafka.Addr = "127.0.0.1:1883", "127.0.0.1:9092"
	cfg.Security.UsersFile = "/etc/tributary/passwd"
	cfg.Security.TLS.CertFile, cfg.Security.TLS.KeyFile, cfg.Security.TLS.ClientCAFile = "s.crt", "s.key", "ca.crt"
	var b strings.Builder
	printDev(&b, cfg, "./data", 8, 2, "")
	for _, want := range []string{"simulator  not started: anonymous MQTT clients are refused", "--cafile ca.crt -u USER -P PASSWORD",
		"-X security.protocol=SASL_SSL -X ssl.ca.location=ca.crt -X sasl.mechanisms=PLAIN -X sasl.username=USER", "curl --cacert ca.crt -u USER:PASSWORD"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	b.Reset()
	printDev(&b, cfg, "./data", 8, 2, "sim-device")
	if !strings.Contains(b.String(), "simulator  8 devices") {
		t.Errorf("a simulator with a user:\n%s", b.String())
	}
}

// TestConfigCheckPrintsListeners: config check of a file naming no
// listener prints the defaults it gets, each with what it serves, and
// the listeners that are off with the key that turns them on; a file
// turning every listener off is refused, naming the keys.
func TestConfigCheckPrintsListeners(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "e.yaml")
	os.WriteFile(f, []byte("data_dir: "+dir+"\nmqtt:\n  routes:\n    - {filter: \"factory/#\", stream: factory.telemetry}\n"), 0o644)
	var out, errs strings.Builder
	if code := run([]string{"config", "check", f}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"mqtt.addr: 127.0.0.1:1883 (MQTT over TCP)", "http_addr: 127.0.0.1:8080 (health, status",
		"kafka.addr: off (Kafka produce; set kafka.addr to turn it on)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "http: \n") {
		t.Errorf("a bare http: line:\n%s", out.String())
	}
	os.WriteFile(f, []byte("data_dir: "+dir+"\nmqtt:\n  addr: \"\"\nhttp_addr: \"\"\n"), 0o644)
	out.Reset()
	errs.Reset()
	if code := run([]string{"config", "check", f}, &out, &errs); code == 0 || !strings.Contains(errs.String(), "mqtt.addr, mqtt.ws_addr, kafka.addr and http_addr are all off") {
		t.Fatalf("every listener off: exit %d, %s", code, errs.String())
	}
}

// TestPortClashNamesTheSetting: an edge or dev whose listener's address
// is taken exits 1 naming the YAML key or flag that moves it, and logs no
// "final commit done" for a start that never happened.
func TestPortClashNamesTheSetting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir()
	f := filepath.Join(dir, "e.yaml")
	os.WriteFile(f, []byte("data_dir: "+dir+"\nmqtt:\n  addr: "+addr+"\nhttp_addr: \"\"\n"), 0o644)
	var out, errs strings.Builder
	if code := run([]string{"edge", "-config", f}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "move this listener with mqtt.addr") ||
		strings.Contains(errs.String(), "final commit done") {
		t.Errorf("edge: exit %d\n%s", code, errs.String())
	}
	out.Reset()
	errs.Reset()
	args := []string{"dev", "--data", t.TempDir(), "--sim-devices", "0", "--mqtt-addr", "127.0.0.1:0", "--http-addr", addr}
	for _, off := range []string{"--mqtt-ws-addr", "--kafka-addr", "--catalog-addr", "--cloud-kafka-addr", "--pulsar-addr", "--cloud-mqtt-addr", "--cloud-http-addr"} {
		args = append(args, off, "")
	}
	if code := run(args, &out, &errs); code != 1 || !strings.Contains(errs.String(), "move this listener with --http-addr") ||
		strings.Contains(errs.String(), "final commit done") {
		t.Errorf("dev: exit %d\n%s", code, errs.String())
	}
}
