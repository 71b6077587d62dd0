package cloud

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCloudConfigExampleAndErrors(t *testing.T) {
	c, err := LoadConfig("../deploy/cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example binds every interface, so it needs (and has) client
	// authentication and TLS; the deploy tests load its files.
	if *c.Kafka.Addr != "0.0.0.0:19092" || c.Catalog.Addr != "0.0.0.0:8181" || !*c.Maintenance.Enabled ||
		c.Security.UsersFile == "" || !c.Security.JWT.Enabled() || !c.Security.TLS.On("rest") {
		t.Fatalf("unexpected %+v", c)
	}
	d, err := ParseConfig([]byte("role: cloud\ndata_dir: /tmp/c\n"))
	if err != nil || d.Catalog.URI != "sqlite:///tmp/c/catalog.db" || d.Catalog.Warehouse != "file:///tmp/c/warehouse" {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	if k := d.Kafka; k.MaxGroups != 10000 || k.MaxGroupMembers != 1000 || k.MaxGroupOffsets != 100000 ||
		k.OffsetsRetention != 168*time.Hour || k.MaxInflightBytes != 512<<20 || k.BatchCacheBytes != 256<<20 {
		t.Fatalf("kafka cap defaults: %+v", k)
	}
	if m := d.MQTT; m.Addr != "" || m.WSAddr != "" || m.MaxInflight != 256 || m.MaxSubscriptions != 100 ||
		m.MaxSessionExpiry != 168*time.Hour || m.WriteTimeout != 30*time.Second {
		t.Fatalf("mqtt defaults: %+v", m)
	}
	cm, dm := c.MQTT, d.MQTT
	if len(cm.WSAllowedOrigins) == 0 && len(dm.WSAllowedOrigins) == 0 {
		cm.WSAllowedOrigins, dm.WSAllowedOrigins = nil, nil // [] in the file is the default none
	}
	if !reflect.DeepEqual(cm, dm) {
		t.Fatalf("deploy/cloud.yaml mqtt differs from the defaults: %+v", c.MQTT)
	}
	if k := c.Kafka; k.MaxGroups != d.Kafka.MaxGroups || k.OffsetsRetention != d.Kafka.OffsetsRetention || k.MaxInflightBytes != d.Kafka.MaxInflightBytes ||
		k.BatchCacheBytes != d.Kafka.BatchCacheBytes {
		t.Fatalf("deploy/cloud.yaml caps differ from the defaults: %+v", k)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"role: edge", "role"},
		{"role: cloud\ncatalog:\n  uri: ftp://x", "catalog.uri"},
		{"role: cloud\ncatalog:\n  uri: http://x\n  node_token: t", "catalog.node_token"},
		{"role: cloud\ncatalog:\n  uri: http://x\n  token: t\n  credential: a:b", "catalog.credential"},
		{"role: cloud\ncatalog:\n  uri: http://x\n  credential: nocolon", "catalog.credential"},
		{"role: cloud\ncatalog:\n  credential: a:b", "catalog.credential"}, // our own catalog takes none
		{"role: cloud\ncatalog:\n  sigv4: {region: us-east-1}", "catalog.sigv4"},
		{"role: cloud\ncatalog:\n  uri: http://x\n  credential: a:b\n  sigv4: {region: us-east-1}", "catalog.sigv4"},
		{"role: cloud\nstate:\n  uri: http://x", "state.uri"},
		{"role: cloud\nkafka:\n  peers: [nope]", "kafka.peers[0]"},
		{"role: cloud\nmaintenance:\n  orphan_grace: 1m", "maintenance.orphan_grace"},
		{"role: cloud\nmqtt:\n  routes: []", "routes"}, // an unknown key
		{"role: cloud\nmqtt:\n  addr: nope", "mqtt.addr"},
		{"role: cloud\nmqtt:\n  ws_addr: 0.0.0.0:8083", "mqtt.ws_addr (0.0.0.0:8083)"}, // exposed without authentication
		{"role: cloud\nmqtt:\n  max_inflight: 70000", "mqtt.max_inflight"},
		{"role: cloud\nmqtt:\n  max_session_expiry: 1ms", "mqtt.max_session_expiry"},
		{"role: cloud\nkafka:\n  max_groups: -2", "kafka.max_groups"},
		{"role: cloud\nkafka:\n  offsets_retention: 1s", "kafka.offsets_retention"},
		{"role: cloud\nkafka:\n  max_inflight_bytes: 1MiB", "kafka.max_inflight_bytes"},
	} {
		if _, err := ParseConfig([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %q", tc.yaml, err, tc.want)
		}
	}
	// The state database defaults to the catalog's own; with a REST
	// catalog that is not ours, to DATA_DIR/state.db.
	if d.State.URI != d.Catalog.URI {
		t.Fatalf("state.uri %q, want the catalog's %q", d.State.URI, d.Catalog.URI)
	}
	e, err := ParseConfig([]byte("role: cloud\ndata_dir: /tmp/c\ncatalog:\n  uri: https://catalog.example.com/api\n  warehouse: s3://b\n  credential: id:secret\n"))
	if err != nil || e.State.URI != "sqlite:///tmp/c/state.db" {
		t.Fatalf("external catalog: state.uri %q, %v", e.State.URI, err)
	}
	if cc := e.CatalogConfig(); cc.Properties["credential"] != "id:secret" || cc.SigV4 != nil {
		t.Fatalf("external catalog config: %+v", cc)
	}
	if cc := d.CatalogConfig(); cc.Properties["credential"] != "" || cc.Properties["token"] != "" {
		t.Fatalf("our own catalog's config carries auth: %+v", cc)
	}
	if RoleOf([]byte("role: cloud")) != "cloud" || RoleOf([]byte("node_id: x")) != "edge" {
		t.Fatal("RoleOf")
	}
}
