package node

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables"
)

func TestParseConfigDefaultsAndEnv(t *testing.T) {
	t.Setenv("TRIB_NODE", "edge-7")
	c, err := ParseConfig([]byte("node_id: ${TRIB_NODE}\ndata_dir: /tmp/x\nwal:\n  max_bytes: 64MiB\nmqtt:\n  routes:\n    - {filter: a/#, stream: a.b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "edge-7" || c.WAL.MaxBytes != 64<<20 || c.WAL.Path != "/tmp/x/wal/wal.db" ||
		c.Catalog.URI != "sqlite:///tmp/x/catalog.db" || c.Catalog.Warehouse != "file:///tmp/x/warehouse" ||
		c.Uplink.CommitInterval != time.Second || c.Uplink.ZstdLevel != tables.DefaultZstdLevel || c.Uplink.ContinuousEncodingMaxBytes != 64<<20 || c.MQTT.DefaultStream != "mqtt.default" || len(c.MQTT.Routes) != 1 {
		t.Fatalf("unexpected config %+v", c)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"node_id: ${TRIB_UNSET_VAR}", "TRIB_UNSET_VAR"},
		{"wal:\n  max_bytes: 10", "wal.max_bytes"},
		{"kafka:\n  max_inflight_bytes: 1MiB", "kafka.max_inflight_bytes"},
		{"wal:\n  max_bytes: lots", "size"},
		{"catalog:\n  uri: mysql://x", "catalog.uri"},
		{"catalog:\n  partition_granularity: week", "catalog.partition_granularity"},
		{"catalog:\n  uri: http://cloud:8181\n  credential: nocolon", "catalog.credential"},
		{"catalog:\n  credential: edge:secret", "catalog.credential"},
		{"catalog:\n  sigv4: {region: us-east-1, service: glue}", "catalog.sigv4"},
		{"catalog:\n  uri: http://cloud:8181\n  token: t\n  sigv4: {region: us-east-1}", "catalog.sigv4"},
		{"mqtt:\n  default_stream: nodot", "mqtt.default_stream"},
		{"mqtt:\n  users: {dev: s3cret}", "security.users_file"},
		{"mqtt:\n  routes:\n    - {filter: a, stream: bad name}", "mqtt.routes[0].stream"},
		{"uplink:\n  commit_interval: 1ms", "uplink.commit_interval"},
		{"uplink:\n  zstd_level: 23", "uplink.zstd_level"},
		{"uplink:\n  formats: [delta]", "uplink.formats"},
		{"uplink:\n  delta_checkpoint_interval: -1", "uplink.delta_checkpoint_interval"},
		{"mqtt:\n  routes:\n    - {filter: \"a/#\", stream: a.b, formats: [iceberg, parquet]}", "mqtt.routes"},
		{"uplink:\n  zstd_level: -1", "uplink.zstd_level"},
		{"uplink:\n  continuous_encoding_max_bytes: 1000", "uplink.continuous_encoding_max_bytes"},
		{"maintenance:\n  interval: 10ms", "maintenance.interval"},
		{"maintenance:\n  orphan_grace: 1m", "maintenance.orphan_grace"},
		{"maintenance:\n  snapshot_max_age: 1s", "maintenance.snapshot_max_age"},
		{"maintenance:\n  target_file_size: 1KiB", "maintenance.target_file_size"},
		{"maintenance:\n  retain_snapshots: -1", "maintenance.retain_snapshots"},
		{"unknown_field: 1", "unknown_field"},
		{"cluster:\n  join: [10.0.0.1:7946]", "cluster.gossip_addr"},
		{"cluster:\n  gossip_addr: nocolon", "cluster.gossip_addr"},
		{"cluster:\n  gossip_addr: 127.0.0.1:0\n  join: [10.0.0.1]", "cluster.join[0]"},
		{"cluster:\n  gossip_addr: 127.0.0.1:0\n  gossip_profile: wan", "cluster.gossip_profile"},
		{"catalog:\n  ca_file: /etc/ca.crt", "catalog.ca_file"},
		{"security:\n  tls:\n    cert_file: a.crt", "security.tls"},
		{"security:\n  tls:\n    listeners:\n      mqqt: {cert_file: a, key_file: b}", "security.tls.listeners.mqqt"},
		{"security:\n  tls:\n    cert_file: a\n    key_file: b\n    require_client_cert: true", "security.tls.require_client_cert"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.yaml, err, c.want)
		}
	}
}

func TestMaintenanceConfig(t *testing.T) {
	cases := []struct {
		yaml    string
		enabled bool
		pol     tables.Policy
	}{
		{"", true, tables.Policy{SnapshotMaxAge: time.Hour, RetainSnapshots: 100, TargetFileSize: 128 << 20, MaxManifests: 10, OrphanGrace: 24 * time.Hour,
			DeltaFileRetention: 7 * 24 * time.Hour, DeltaLogRetention: 30 * 24 * time.Hour}},
		{"maintenance:\n  enabled: false\n  orphan_grace: 1m", false, tables.Policy{SnapshotMaxAge: time.Hour, RetainSnapshots: 100, TargetFileSize: 128 << 20, MaxManifests: 10, OrphanGrace: time.Minute,
			DeltaFileRetention: 7 * 24 * time.Hour, DeltaLogRetention: 30 * 24 * time.Hour}},
		{"maintenance:\n  snapshot_max_age: 10m\n  retain_snapshots: 20\n  target_file_size: 256MiB\n  max_manifests: 4\n  orphan_grace: 48h\n  interval: 5m\n  delta_deleted_file_retention: 200h\n  delta_log_retention: 1000h", true,
			tables.Policy{SnapshotMaxAge: 10 * time.Minute, RetainSnapshots: 20, TargetFileSize: 256 << 20, MaxManifests: 4, OrphanGrace: 48 * time.Hour,
				DeltaFileRetention: 200 * time.Hour, DeltaLogRetention: 1000 * time.Hour}},
	}
	for _, c := range cases {
		cfg, err := ParseConfig([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if *cfg.Maintenance.Enabled != c.enabled || cfg.MaintenancePolicy() != c.pol {
			t.Errorf("%q: enabled %v policy %+v, want %v %+v", c.yaml, *cfg.Maintenance.Enabled, cfg.MaintenancePolicy(), c.enabled, c.pol)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"1000": 1000, "1KiB": 1024, "64MiB": 64 << 20, "1GB": 1e9, "2g": 2 << 30} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "x", "1XB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestDeployExampleParses(t *testing.T) {
	t.Setenv("HOSTNAME", "edge-a")
	t.Setenv("TRIBUTARY_CATALOG_CREDENTIAL", "edge-a:secret")
	if _, err := LoadConfig("../deploy/edge.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestClusterSecurityConfig(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	key2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{8}, 16))
	dir := t.TempDir()
	keyFile, secretFile := filepath.Join(dir, "gossip.key"), filepath.Join(dir, "secret")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	os.WriteFile(secretFile, []byte("a cluster secret of some length\n"), 0o600)
	t.Setenv("TRIB_GOSSIP_KEY", key)
	const open = "cluster:\n  gossip_addr: 0.0.0.0:7946\n"
	ok := []string{
		"cluster:\n  gossip_addr: 127.0.0.1:7946\n", // loopback: may stay open
		open + "  gossip_key: ${TRIB_GOSSIP_KEY}\n  secret: a cluster secret of some length\n",
		open + "  gossip_key_file: " + keyFile + "\n  secret_file: " + secretFile + "\n  gossip_secondary_keys: [" + key2 + "]\n",
		open + "  gossip_key: " + key + "\nsecurity:\n  tls:\n    cert_file: n.crt\n    key_file: n.key\n    client_ca_file: ca.crt\n",
		open + "  gossip_key: " + key + "\nsecurity:\n  tls:\n    listeners:\n      peer: {cert_file: n.crt, key_file: n.key, client_ca_file: ca.crt}\n",
		open + "security:\n  allow_anonymous: true\n",
	}
	for _, y := range ok {
		if _, err := ParseConfig([]byte(y)); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
	c, err := ParseConfig([]byte(open + "  gossip_key_file: " + keyFile + "\n  secret_file: " + secretFile + "\n  gossip_secondary_keys: [" + key2 + "]\n"))
	if err != nil {
		t.Fatal(err)
	}
	k, sec, err := c.gossipKeys()
	if s, _ := c.clusterSecret(); err != nil || len(k) != 32 || len(sec) != 1 || len(sec[0]) != 16 || string(s) != "a cluster secret of some length" {
		t.Fatalf("keys %x %x, secret %q, %v", k, sec, s, err)
	}

	bad := []struct{ yaml, want string }{
		{open, "set cluster.secret (or mutual TLS"},
		{open, "cluster.gossip_key"},
		{open + "  gossip_key: " + key + "\n", "peer links would trust any process"},
		{open + "  secret: a cluster secret of some length\n", "gossip would be in clear"},
		{"cluster:\n  gossip_addr: 127.0.0.1:0\n  peer_addr: 10.0.0.5:7947\n", "cluster.secret"},
		{open + "  gossip_key: " + key + "\nsecurity:\n  tls:\n    cert_file: n.crt\n    key_file: n.key\n", "cluster.secret"}, // no client CA: no mutual TLS
		{open + "security:\n  allow_anonymous: false\n", "cluster.secret"},
		{"cluster:\n  gossip_key: not base64!\n", "cluster.gossip_key: not base64"},
		{"cluster:\n  gossip_key: " + base64.StdEncoding.EncodeToString([]byte("short")) + "\n", "cluster.gossip_key: 5 bytes"},
		{"cluster:\n  gossip_key: " + key + "\n  gossip_key_file: " + keyFile + "\n", "not both"},
		{"cluster:\n  gossip_key_file: " + filepath.Join(dir, "missing") + "\n", "cluster.gossip_key_file"},
		{"cluster:\n  gossip_secondary_keys: [" + key2 + "]\n", "cluster.gossip_secondary_keys"},
		{"cluster:\n  gossip_key: " + key + "\n  gossip_secondary_keys: [abc]\n", "cluster.gossip_secondary_keys[0]"},
		{"cluster:\n  secret: short\n", "cluster.secret: 5 bytes"},
		{"cluster:\n  secret: a cluster secret of some length\n  secret_file: " + secretFile + "\n", "not both"},
	}
	for _, c := range bad {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one with %q", c.yaml, err, c.want)
		}
	}
}

func TestPayloadsConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "s.json")
	os.WriteFile(good, []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":1}}}`), 0o644)
	c, err := ParseConfig([]byte("mqtt:\n  routes:\n    - {filter: a/#, stream: a.b, payload: infer, timestamps: true}\n    - {filter: b/#, stream: a.b}\n" +
		"    - {filter: c/#, stream: a.c, payload: schema, schema_file: " + good + "}\n    - {filter: d/#, stream: a.d, payload: raw}\n" +
		"    - {filter: e/#, stream: a.e, payload: infer, numbers: long}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pols, err := c.Payloads()
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != 3 || !pols["a.b"].Timestamps || pols["a.b"].Longs || !pols["a.e"].Longs || pols["a.c"].Columns == nil || pols["a.c"].Columns.String() != "struct<a: long>" {
		t.Errorf("payloads %+v", pols)
	}
	for y, want := range map[string]string{
		"    - {filter: a, stream: a.b, payload: guess}":                                               "payload mode",
		"    - {filter: a, stream: a.b, payload: infer}\n    - {filter: b, stream: a.b, payload: raw}": "one stream, one setting",
		"    - {filter: a, stream: a.b, payload: schema}":                                              "needs a schema_file",
		"    - {filter: a, stream: a.b, payload: schema, schema_file: /no/such/file}":                  "no such file",
		"    - {filter: a, stream: a.b, payload: schema, schema_file: " + bad + "}":                    `"minimum" is not supported`,
		"    - {filter: a, stream: a.b_dlq}":                                                           "dead-letter",
		"    - {filter: a, stream: a.b, payload: infer, max_columns: -1}":                              "max_columns",
		"    - {filter: a, stream: a.b, payload: infer, numbers: int}":                                 "mqtt.routes[0].numbers",
		"    - {filter: a, stream: a.b, numbers: long}":                                                "long needs payload: infer",
	} {
		_, err := ParseConfig([]byte("mqtt:\n  routes:\n" + y + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", y, err, want)
		}
	}
	if _, err := ParseConfig([]byte("mqtt:\n  default_stream: x.y_dlq\n")); err == nil || !strings.Contains(err.Error(), "dead-letter") {
		t.Errorf("default_stream _dlq: %v", err)
	}
}
