package config

import (
	"strings"
	"testing"
	"time"
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
	// A type error names the line and value, not a Go type.
	err := Decode([]byte("mqtt:\n  keepalive: [1]\n"), &cfg)
	if err == nil || strings.Contains(err.Error(), "time.Duration") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("type error: %v", err)
	}
}
