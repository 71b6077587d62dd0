package config

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type testMQTT struct {
	Addr          string        `yaml:"addr"`
	MaxPacketSize ByteSize      `yaml:"max_packet_size"`
	Keepalive     time.Duration `yaml:"keepalive"`
	Routes        []struct {
		Filter string `yaml:"filter"`
		Stream string `yaml:"stream"`
	} `yaml:"routes"`
}

type testConfig struct {
	NodeID string            `yaml:"node_id"`
	MQTT   testMQTT          `yaml:"mqtt"`
	Labels map[string]string `yaml:"labels"`
	Ports  map[int]bool      `yaml:"ports"`
	Ratio  float64           `yaml:"ratio"`
	Count  *uint16           `yaml:"count"`
	Any    any               `yaml:"any"`
	Inline `yaml:",inline"`
}

type Inline struct {
	DataDir string `yaml:"data_dir"`
}

// An unknown key is named by its path as written in YAML, with its line
// and the nearest key of its section; never with a Go type.
func TestUnknownKeyMessage(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"mqtt:\n  max_packet_bytes: 1MiB\n", "line 2: mqtt.max_packet_bytes: unknown key (did you mean max_packet_size?)"},
		{"node_di: a\n", "line 1: node_di: unknown key (did you mean node_id?)"},
		{"mqtt:\n  routes:\n    - {filter: a, strem: b}\n", "line 3: mqtt.routes[0].strem: unknown key (did you mean stream?)"},
		{"data_dri: x\n", "line 1: data_dri: unknown key (did you mean data_dir?)"},
		{"completely_else: 1\n", "line 1: completely_else: unknown key"},
	}
	for _, c := range cases {
		var cfg testConfig
		err := Decode([]byte(c.yaml), &cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "struct") || strings.Contains(err.Error(), "config.test") {
			t.Errorf("%q: error names a Go type: %v", c.yaml, err)
		}
		if c.want == "line 1: completely_else: unknown key" && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%q: a far-off suggestion: %v", c.yaml, err)
		}
	}
	var cfg testConfig
	if err := Decode([]byte("node_id: a\ndata_dir: d\nlabels: {x: y}\nmqtt:\n  addr: :1883\n  keepalive: 5s\n"), &cfg); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if cfg.DataDir != "d" || cfg.Labels["x"] != "y" || cfg.MQTT.Keepalive != 5*time.Second {
		t.Fatalf("decoded %+v", cfg)
	}
}

// Values of the wrong type, keys written twice, syntax errors and unset
// variables are problems at their line and key path, without Go types;
// InFile puts the file's name in front of each.
func TestProblemMessages(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"mqtt:\n  keepalive: [1]\n", "line 2: mqtt.keepalive: want a duration such as 30s, 5m or 1h, got a list"},
		{"mqtt:\n  keepalive: 5\n", `line 2: mqtt.keepalive: want a duration such as 30s, 5m or 1h, got "5"`},
		{"mqtt:\n  max_packet_size: big\n", `line 2: mqtt.max_packet_size: want a size such as 64MiB, 1GiB or 1000, got "big"`},
		{"mqtt:\n  max_packet_size: {a: 1}\n", "line 2: mqtt.max_packet_size: want a size such as 64MiB, 1GiB or 1000, got a section of keys"},
		{"ratio: x\n", `line 1: ratio: want a number, got "x"`},
		{"count: -1\n", `line 1: count: want a non-negative integer, got "-1"`},
		{"count: 70000\n", `line 1: count: want a non-negative integer, got "70000"`},
		{"ports: {x: true}\n", `line 1: ports.x: key: want an integer, got "x"`},
		{"ports: {1: maybe}\n", `line 1: ports.1: want true or false, got "maybe"`},
		{"labels: [a]\n", "line 1: labels: want a mapping, got a list"},
		{"labels: {a: b, a: c}\n", "line 1: labels.a: key written twice (first at line 1)"},
		{"mqtt: x\n", `line 1: mqtt: want a section of keys, got "x"`},
		{"mqtt:\n  routes: {filter: a}\n", "line 2: mqtt.routes: want a list, got a section of keys"},
		{"mqtt:\n  addr: {a: 1}\n", "line 2: mqtt.addr: want a string, got a section of keys"},
		{"node_id: a\ndata_dir: x\nnode_id: b\n", "line 3: node_id: key written twice (first at line 1)"},
		{"data_dir: a\ndata_dir: b\n", "line 2: data_dir: key written twice (first at line 1)"},
		{"node_id: [\n", "line 1: did not find expected node content"},
		{"node_id: a: b\n", "mapping values are not allowed in this context"}, // yaml.v3 gives no line
		{"node_id: x\ndata_dir: ${CONFIG_TEST_SURELY_UNSET}\n", "line 2: environment variable CONFIG_TEST_SURELY_UNSET is not set"},
	}
	for _, c := range cases {
		var cfg testConfig
		err := Decode([]byte(c.yaml), &cfg)
		if err == nil || !strings.Contains(err.Error(), "config: "+c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
			continue
		}
		if _, ok := errors.AsType[*Error](err); !ok {
			t.Errorf("%q: %T, not an *Error", c.yaml, err)
		}
		if m := err.Error(); strings.Contains(m, "struct") || strings.Contains(m, "config.") || strings.Contains(m, "uint16") ||
			strings.Contains(m, "Duration") || strings.Contains(m, "float64") || strings.Contains(m, "map[") {
			t.Errorf("%q: names a Go type: %v", c.yaml, m)
		}
	}
	// Every problem is reported, one a line, each with the file's name.
	var cfg testConfig
	err := InFile("site/edge.yaml", Decode([]byte("node_di: a\nmqtt:\n  adr: x\n  keepalive: soon\n"), &cfg))
	want := "site/edge.yaml:1: node_di: unknown key (did you mean node_id?)\n" +
		"site/edge.yaml:3: mqtt.adr: unknown key (did you mean addr?)\n" +
		`site/edge.yaml:4: mqtt.keepalive: want a duration such as 30s, 5m or 1h, got "soon"`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	if plain := errors.New("catalog.uri: bad"); InFile("x.yaml", plain) != plain {
		t.Fatal("InFile changed an error that is not Decode's")
	}
	// Null values, aliases, merge keys and an empty file decode as yaml.v3 does.
	for _, y := range []string{"", "mqtt:\n", "mqtt: ~\ncount: null\n",
		"node_id: &n a\ndata_dir: *n\n", "mqtt:\n  <<: {addr: x}\n  keepalive: 1s\n", "any: {a: [1, {b: c}]}\nports: {1: true}\n"} {
		var cfg testConfig
		if err := Decode([]byte(y), &cfg); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}

// FuzzDecode: on any input Decode returns nil or an *Error without Go
// types, and when check finds nothing wrong yaml.v3's strict decoder
// agrees (so every problem is reported by key path, none by yaml.v3).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"node_id: a\nmqtt:\n  addr: :1\n  keepalive: 5s\n  routes:\n    - {filter: a, stream: b}\n",
		"mqtt:\n  max_packet_size: 1MiB\n", "labels: {a: b}\nports: {1: true}\ncount: 3\nratio: 0.5\n",
		"mqtt: &m {addr: x}\nany: *m\n", "mqtt:\n  <<: {addr: x}\n", "node_di: [\n", "data_dir: x\nany: [1, {a: b}]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 4096 || strings.Contains(string(raw), "$") {
			return // expansion reads the environment; aliases may blow up
		}
		var cfg testConfig
		err := Decode(raw, &cfg)
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("%T %v", err, err)
			}
			if strings.Contains(err.Error(), "struct {") || strings.Contains(err.Error(), "config.test") {
				t.Fatalf("names a Go type: %v", err)
			}
		}
		var doc yaml.Node
		if yaml.Unmarshal(raw, &doc) != nil {
			return
		}
		if len(check(&doc, reflect.TypeOf(&cfg), "")) > 0 {
			return
		}
		var strict testConfig
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&strict); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("check found nothing, yaml.v3 refused it: %v", err)
		}
	})
}
