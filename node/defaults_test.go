package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/internal/confdoc"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestDocumentedDefaults: the effective settings of a config file without
// any key are the defaults the doc comments of config.go (and of the
// sections package config shares) state. Every leaf key whose comment
// says "Default" must be in the table below, its documented text must be
// in that comment, and the effective value must be the one documented.
func TestDocumentedDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("mqtt:\n  routes:\n    - {filter: \"factory/#\", stream: factory.telemetry}\n"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := (&confdoc.Walker{Root: ".."}).Docs(c)
	if err != nil {
		t.Fatal(err)
	}
	got := testkit.Settings(c)
	host, _ := os.Hostname()
	abs, _ := filepath.Abs("data")
	cases := []struct{ key, doc, want string }{
		{"node_id", "Default: the host name", host},
		{"data_dir", "Default ./data", "./data"},
		{"wal.path", "Default DATA_DIR/wal/wal.db", "data/wal/wal.db"},
		{"wal.max_bytes", "Default 1 GiB", "1073741824"},
		{"catalog.name", "Default tributary", "tributary"},
		{"catalog.uri", "Default sqlite://DATA_DIR/catalog.db", "sqlite://" + abs + "/catalog.db"},
		{"catalog.credential", `Default ""`, ""},
		{"catalog.sigv4.region", `Default "" (off`, ""},
		{"catalog.sigv4.service", "Default execute-api", "execute-api"},
		{"catalog.ca_file", `Default "" (the system's roots)`, ""},
		{"catalog.warehouse", "Default file://DATA_DIR/warehouse", "file://" + abs + "/warehouse"},
		{"catalog.partition_granularity", "Default day", "day"},
		{"storage.s3.region", `Default "", which means us-east-1`, ""},
		{"storage.s3.access_key_id", "default from the environment", ""},
		{"storage.s3.secret_access_key", "default from the environment", ""},
		{"storage.s3.path_style", "Default false", "false"},
		{"storage.gcs.anonymous", "Default false", "false"},
		{"storage.azure.account", "default the warehouse's", ""},
		{"storage.azure.endpoint", "default https://ACCOUNT.blob.core.windows.net", ""},
		{"mqtt.addr", "Default 127.0.0.1:1883", "127.0.0.1:1883"},
		{"mqtt.ws_addr", `Default "" (off)`, ""},
		{"mqtt.ws_allowed_origins", "Default none", "[]"},
		{"mqtt.default_stream", "Default mqtt.default", "mqtt.default"},
		{"mqtt.max_packet_size", "Default 1 MiB", "1048576"},
		{"mqtt.receive_maximum", "Default 64", "64"},
		{"mqtt.max_retained", "Defaults 100000, 64MiB and 100000", "100000"},
		{"mqtt.max_retained_bytes", "Defaults 100000, 64MiB and 100000", "67108864"},
		{"mqtt.max_sessions", "Defaults 100000, 64MiB and 100000", "100000"},
		{"mqtt.max_connections", "Defaults 10000, 1000 and 10s", "10000"},
		{"mqtt.max_connections_per_ip", "Defaults 10000, 1000 and 10s", "1000"},
		{"mqtt.connect_timeout", "Defaults 10000, 1000 and 10s", "10s"},
		{"mqtt.max_keep_alive", "Default 10m", "10m0s"},
		{"mqtt.max_queued_messages", "Defaults 1024 and 30s", "1024"},
		{"mqtt.write_timeout", "Defaults 1024 and 30s", "30s"},
		{"mqtt.blocking_acks", "Default false", "false"},
		{"kafka.addr", `Default "" (off)`, ""},
		{"kafka.advertised_addr", "Default: the bound address", ""},
		{"kafka.auto_create", "Default true", "true"},
		{"kafka.max_streams", "Default 1000", "1000"},
		{"kafka.max_batch_bytes", "Default 1048588", "1048588"},
		{"kafka.max_inflight_bytes", "Default 512MiB", "536870912"},
		{"kafka.max_pipelined_requests", "Default 16", "16"},
		{"kafka.body_timeout", "Default 30s", "30s"},
		{"uplink.commit_interval", "Default 1s", "1s"},
		{"uplink.max_batch_bytes", "Default 64 MiB", "67108864"},
		{"uplink.zstd_level", "Default 1", "1"},
		{"uplink.continuous_encoding", "Default false", "false"},
		{"uplink.continuous_encoding_max_bytes", "Default 64MiB", "67108864"},
		{"uplink.formats", "Default [iceberg]", "[iceberg]"},
		{"uplink.delta_checkpoint_interval", "Default 10", "10"},
		{"maintenance.enabled", "Default true", "true"},
		{"maintenance.interval", "Default 1m", "1m0s"},
		{"maintenance.snapshot_max_age", "Default 1h", "1h0m0s"},
		{"maintenance.retain_snapshots", "Default 100", "100"},
		{"maintenance.target_file_size", "Default 128MiB", "134217728"},
		{"maintenance.max_manifests", "Default 10", "10"},
		{"maintenance.orphan_grace", "Default 24h", "24h0m0s"},
		{"maintenance.delta_deleted_file_retention", "Default 168h", "168h0m0s"},
		{"maintenance.delta_log_retention", "Default 720h", "720h0m0s"},
		{"cluster.gossip_addr", `Default "" (single node`, ""},
		{"cluster.advertise_addr", "Default: the bound address", ""},
		{"cluster.gossip_profile", "(memberlist's LAN timing, the default)", "lan"},
		{"cluster.peer_addr", "Default: the gossip host with port 0", ""}, // no gossip: no peer link
		{"cluster.peer_advertise_addr", "Default: the bound address", ""},
		{"cluster.replication_factor", "Default 2", "2"},
		{"cluster.replication_policy", "Default degrade", "degrade"},
		{"cluster.replication_timeout", "Default 5s", "5s"},
		{"cluster.takeover_grace", "Default 5s", "5s"},
		{"cluster.owner_lease", "Default 10s", "10s"},
		{"cluster.gossip_key", "Default none", ""},
		{"cluster.gossip_key_file", "Default none", ""},
		{"cluster.gossip_secondary_keys", "Default none", "[]"},
		{"cluster.secret", "Default none", ""},
		{"cluster.secret_file", "Default none", ""},
		{"http_addr", "Default 127.0.0.1:8080", "127.0.0.1:8080"},
		{"http_api.max_record_bytes", "Default 1MiB", "1048576"},
		{"http_api.max_streams", "Default 1024", "1024"},
		{"http_api.idle_timeout", "Default 30s", "30s"},
		{"http_api.write_timeout", "Default 30s", "30s"},
		{"catalog_addr", `Each is "" (off) by default`, ""},
		{"cloud_kafka_addr", `Default "" (off)`, ""},
		{"cloud_pulsar_addr", `Default "" (off)`, ""},
		{"cloud_mqtt_addr", `Default "" (off)`, ""},
		{"cloud_mqtt_ws_addr", `Default "" (off)`, ""},
		{"cloud_http_addr", `Default "" (off)`, ""},
		{"shutdown_timeout", "Default 30s", "30s"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		seen[tc.key] = true
		doc, ok := docs[tc.key]
		if !ok {
			t.Errorf("%s: no such key in config.go", tc.key)
			continue
		}
		if !strings.Contains(doc, tc.doc) {
			t.Errorf("%s: its comment does not say %q: %s", tc.key, tc.doc, doc)
		}
		if g, ok := got[tc.key]; !ok || g != tc.want {
			t.Errorf("%s: effective value %q (documented: %s), want %q", tc.key, g, tc.doc, tc.want)
		}
	}
	for key, doc := range docs {
		if _, leaf := got[key]; leaf && !seen[key] && strings.Contains(strings.ToLower(doc), "default") && !strings.HasPrefix(key, "security.") {
			t.Errorf("%s: its comment states a default this test does not check: %s", key, doc)
		}
	}
	// Defaults() is the same configuration.
	d := Defaults()
	if d.MQTT.Addr != DefaultMQTTAddr || d.HTTPAddr != DefaultHTTPAddr || fmt.Sprint(d.MQTT.MaxConnections) != got["mqtt.max_connections"] {
		t.Errorf("Defaults(): mqtt.addr %q, http_addr %q, max_connections %d", d.MQTT.Addr, d.HTTPAddr, d.MQTT.MaxConnections)
	}
}

// TestEveryListenerOff: a file that turns every listener off is refused,
// naming the keys to set; "" on one of them keeps the others' defaults.
func TestEveryListenerOff(t *testing.T) {
	_, err := ParseConfig([]byte("mqtt:\n  addr: \"\"\nhttp_addr: \"\"\n"))
	if err == nil || !strings.Contains(err.Error(), "mqtt.addr, mqtt.ws_addr, kafka.addr and http_addr are all off") {
		t.Fatalf("every listener off: %v", err)
	}
	c, err := ParseConfig([]byte("http_addr: \"\"\n"))
	if err != nil || c.HTTPAddr != "" || c.MQTT.Addr != DefaultMQTTAddr {
		t.Fatalf("http_addr off: %q %q %v", c.HTTPAddr, c.MQTT.Addr, err)
	}
	if _, err := ParseConfig([]byte("mqtt:\n  addr: \"\"\nhttp_addr: \"\"\nkafka:\n  addr: 127.0.0.1:9092\n")); err != nil {
		t.Fatal(err)
	}
}
