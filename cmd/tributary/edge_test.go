package main

import (
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
