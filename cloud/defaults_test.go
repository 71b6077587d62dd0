package cloud

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/internal/confdoc"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestDocumentedDefaults: the effective settings of a cloud config file
// with only role: cloud are the defaults its doc comments state (see the
// edge's test of the same name in package node).
func TestDocumentedDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("role: cloud\n"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := (&confdoc.Walker{Root: ".."}).Docs(c)
	if err != nil {
		t.Fatal(err)
	}
	got := testkit.Settings(c)
	abs, _ := filepath.Abs("data")
	cases := []struct{ key, doc, want string }{
		{"data_dir", "Default ./data", "./data"},
		{"catalog.name", "Default tributary", "tributary"},
		{"catalog.uri", "Default sqlite://DATA_DIR/catalog.db", "sqlite://" + abs + "/catalog.db"},
		{"catalog.warehouse", "Default file://DATA_DIR/warehouse", "file://" + abs + "/warehouse"},
		{"catalog.token", `Default "" (no auth)`, ""},
		{"catalog.node_token", `Default ""`, ""},
		{"catalog.credential", `Default ""`, ""},
		{"catalog.sigv4.region", `Default "" (off`, ""},
		{"catalog.sigv4.service", "Default execute-api", "execute-api"},
		{"state.uri", "Default the catalog's own database when catalog.uri is SQLite or Postgres", "sqlite://" + abs + "/catalog.db"},
		{"catalog.addr", "Default 127.0.0.1:8181", "127.0.0.1:8181"},
		{"storage.s3.region", `Default "", which means us-east-1`, ""},
		{"storage.s3.path_style", "Default false", "false"},
		{"storage.gcs.anonymous", "Default false", "false"},
		{"storage.azure.account", "default the warehouse's", ""},
		{"storage.azure.endpoint", "default https://ACCOUNT.blob.core.windows.net", ""},
		{"storage.s3.access_key_id", "default from the environment", ""},
		{"storage.s3.secret_access_key", "default from the environment", ""},
		{"kafka.addr", "Default 127.0.0.1:19092", "127.0.0.1:19092"},
		{"kafka.advertised_addr", "Default: the bound address", ""},
		{"kafka.peers", "Default: alone", "[]"},
		{"kafka.max_groups", "Default 10000", "10000"},
		{"kafka.max_group_members", "Default 1000", "1000"},
		{"kafka.max_group_offsets", "Default 100000", "100000"},
		{"kafka.offsets_retention", "Default 168h", "168h0m0s"},
		{"kafka.max_inflight_bytes", "Default 512MiB", "536870912"},
		{"kafka.body_timeout", "Default 30s", "30s"},
		{"kafka.batch_cache_bytes", "Default 256MiB", "268435456"},
		{"pulsar.addr", "Default 127.0.0.1:6650", "127.0.0.1:6650"},
		{"pulsar.advertised_addr", "Default: the bound address", ""},
		{"pulsar.peers", "Default: alone", "[]"},
		{"pulsar.max_consumers_per_connection", "Default 1000", "1000"},
		{"pulsar.max_subscriptions", "Default 10000", "10000"},
		{"pulsar.max_unacked_per_consumer", "Default 50000", "50000"},
		{"pulsar.max_acked_ranges", "Default 10000", "10000"},
		{"pulsar.max_connection_backlog", "Default 4MiB", "4194304"},
		{"pulsar.message_cache_bytes", "Default 64MiB", "67108864"},
		{"mqtt.addr", `Default "" (off)`, ""},
		{"mqtt.ws_addr", `Default "" (off)`, ""},
		{"mqtt.ws_allowed_origins", "Default none", "[]"},
		{"mqtt.max_inflight", "Default 256", "256"},
		{"mqtt.max_subscriptions", "Default 100", "100"},
		{"mqtt.max_session_expiry", "Default 168h", "168h0m0s"},
		{"mqtt.write_timeout", "Default 30s", "30s"},
		{"http.addr", `Default "" (off)`, ""},
		{"http.max_record_bytes", "Default 1MiB", "1048576"},
		{"http.max_streams", "Default 1024", "1024"},
		{"http.idle_timeout", "Default 30s", "30s"},
		{"http.write_timeout", "Default 30s", "30s"},
		{"maintenance.enabled", "Default true", "true"},
		{"maintenance.interval", "Default 1m", "1m0s"},
		{"maintenance.snapshot_max_age", "Default 1h", "1h0m0s"},
		{"maintenance.retain_snapshots", "Default 100", "100"},
		{"maintenance.target_file_size", "Default 128MiB", "134217728"},
		{"maintenance.max_manifests", "Default 10", "10"},
		{"maintenance.orphan_grace", "Default 24h", "24h0m0s"},
		{"maintenance.delta_deleted_file_retention", "Default 168h", "168h0m0s"},
		{"maintenance.delta_log_retention", "Default 720h", "720h0m0s"},
		{"shutdown_timeout", "Default 10s", "10s"},
		{"cloud_produce.enabled", "Default false", "false"},
		{"cloud_produce.server_id", "Default: the host name", ""},
		{"cloud_produce.flush_interval", "Default 250ms", "250ms"},
		{"cloud_produce.flush_bytes", "Default 8MiB", "8388608"},
		{"cloud_produce.max_buffered_bytes", "Default 64MiB", "67108864"},
		{"cloud_produce.auto_create", "Default false", "false"},
		{"cloud_produce.commit_interval", "Default 1s", "1s"},
		{"cloud_produce.lease", "Default 30s", "30s"},
		{"cloud_produce.grace", "Default 1m", "1m0s"},
		{"cloud_produce.orphan_grace", "Default 10m", "10m0s"},
		{"federation", "Default none", "[]"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		seen[tc.key] = true
		doc, ok := docs[tc.key]
		if !ok {
			t.Errorf("%s: no such key", tc.key)
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
}
