package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/config"
)

// TestConfigErrorsNameTheKey: for every kind of config file (edge and
// cloud through config check and a start, the --security file of dev
// and cloud) a misspelt key at any depth, a value of the wrong type and
// a key written twice are reported as FILE:LINE: PATH: MSG, with the
// nearest key for a misspelling, and never with a Go type.
func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		kind, yaml string
		want       []string
	}{
		{"edge", "node_id: a\nmqtt:\n  max_packet_bytes: 1\n", []string{"edge.yaml:3: mqtt.max_packet_bytes: unknown key (did you mean max_packet_size?)"}},
		{"edge", "node_di: a\n", []string{"edge.yaml:1: node_di: unknown key (did you mean node_id?)"}},
		{"edge", "mqtt:\n  routes:\n    - filter: a/#\n      strem: a.b\n", []string{"edge.yaml:4: mqtt.routes[0].strem: unknown key (did you mean stream?)"}},
		{"edge", "security:\n  tls:\n    listeners:\n      mqtt: {cert_fil: a, key_file: b}\n", []string{"edge.yaml:4: security.tls.listeners.mqtt.cert_fil: unknown key (did you mean cert_file?)"}},
		{"edge", "security:\n  jwt:\n    secret_fil: x\n", []string{"edge.yaml:3: security.jwt.secret_fil: unknown key (did you mean secret_file?)"}},
		{"edge", "mqtt:\n  max_packet_size: abc\n", []string{`edge.yaml:2: mqtt.max_packet_size: want a size such as 64MiB, 1GiB or 1000, got "abc"`}},
		{"edge", "cluster:\n  replication_factor: abc\n", []string{`edge.yaml:2: cluster.replication_factor: want an integer, got "abc"`}},
		{"edge", "uplink:\n  commit_interval: soon\n", []string{`edge.yaml:2: uplink.commit_interval: want a duration such as 30s, 5m or 1h, got "soon"`}},
		{"edge", "mqtt: [1]\n", []string{"edge.yaml:1: mqtt: want a section of keys, got a list"}},
		{"edge", "mqtt:\n  addr: :1883\n  addr: :1884\n", []string{"edge.yaml:3: mqtt.addr: key written twice (first at line 2)"}},
		{"edge", "node_id: ${TRIBUTARY_TEST_SURELY_UNSET}\n", []string{"edge.yaml:1: environment variable TRIBUTARY_TEST_SURELY_UNSET is not set"}},
		{"edge", "mqtt:\n  addr: \":1883\n", []string{"edge.yaml:2: "}},
		{"edge", "node_di: a\nmqtt:\n  adr: x\n", []string{"edge.yaml:1: node_di: unknown key", "edge.yaml:3: mqtt.adr: unknown key (did you mean addr?)"}},
		{"cloud", "role: cloud\nkafka:\n  max_grups: 5\n", []string{"cloud.yaml:3: kafka.max_grups: unknown key (did you mean max_groups?)"}},
		{"cloud", "role: cloud\nmqtt:\n  max_inflight: many\n", []string{`cloud.yaml:3: mqtt.max_inflight: want an integer, got "many"`}},
		{"cloud", "role: cloud\nfederation:\n  - uri: https://x\n    warehous: s3://b\n", []string{"cloud.yaml:4: federation[0].warehous: unknown key (did you mean warehouse?)"}},
		{"cloud", "role: cloud\ncatalog:\n  addr: :8181\ncatalog:\n  addr: :8182\n", []string{"cloud.yaml:4: catalog: key written twice (first at line 2)"}},
		{"security", "tls:\n  listeners:\n    kafka: {cert_file: a, key_fil: b}\n", []string{"security.yaml:3: tls.listeners.kafka.key_fil: unknown key (did you mean key_file?)"}},
		{"security", "security:\n  users_fil: x\n", []string{"security.yaml:2: security.users_fil: unknown key (did you mean users_file?)"}},
		{"security", "allow_anonymous: maybe\n", []string{`security.yaml:1: allow_anonymous: want true or false, got "maybe"`}},
		{"security", "users_file: a\nusers_file: b\n", []string{"security.yaml:2: users_file: key written twice (first at line 1)"}},
	}
	for _, c := range cases {
		f := filepath.Join(dir, c.kind+".yaml")
		if err := os.WriteFile(f, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var msgs []string
		if c.kind == "security" {
			var s config.Security
			err := readSecurity(f, &s)
			if err == nil {
				t.Errorf("%q: readSecurity accepted it", c.yaml)
				continue
			}
			msgs = append(msgs, err.Error())
		} else {
			var out, errs strings.Builder
			if code := run([]string{"config", "check", f}, &out, &errs); code == 0 {
				t.Errorf("%q: config check exit 0", c.yaml)
				continue
			}
			msgs = append(msgs, errs.String())
			errs.Reset()
			if code := run([]string{c.kind, "--config", f}, &out, &errs); code != 2 {
				t.Errorf("%q: %s --config exit %d, want 2: %s", c.yaml, c.kind, code, errs.String())
				continue
			}
			msgs = append(msgs, errs.String())
		}
		for _, m := range msgs {
			for _, w := range c.want {
				if !strings.Contains(m, filepath.Join(dir, w)) {
					t.Errorf("%q: got\n%s\nwant it to contain %q", c.yaml, m, w)
				}
			}
			if strings.Contains(m, "struct") || strings.Contains(m, "config.") || strings.Contains(m, "int64") || strings.Contains(m, "Duration") {
				t.Errorf("%q: names a Go type: %s", c.yaml, m)
			}
		}
	}
}
