package main

import (
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
	printDev(&plain, cfg, "./data", 0, 1)
	cfg.Security.TLS.CertFile, cfg.Security.TLS.KeyFile, cfg.Security.TLS.ClientCAFile = "s.crt", "s.key", "ca.crt"
	var secure strings.Builder
	printDev(&secure, cfg, "./data", 0, 1)
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
