package config

import (
	"strings"
	"testing"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

func TestExposed(t *testing.T) {
	yes := true
	cases := []struct {
		name  string
		sec   Security
		addrs map[string]string
		bad   string
	}{
		{"loopback", Security{}, map[string]string{"mqtt.addr": "127.0.0.1:1883", "kafka.addr": "[::1]:9092", "http_addr": "localhost:8080"}, ""},
		{"all interfaces", Security{}, map[string]string{"mqtt.addr": ":1883"}, "mqtt.addr (:1883)"},
		{"public address", Security{}, map[string]string{"kafka.addr": "10.0.0.5:9092", "mqtt.addr": "127.0.0.1:1"}, "kafka.addr (10.0.0.5:9092)"},
		{"host name", Security{}, map[string]string{"mqtt.addr": "edge-1:1883"}, "mqtt.addr"},
		{"off", Security{}, map[string]string{"mqtt.addr": ""}, ""},
		{"users file", Security{Config: auth.Config{UsersFile: "/etc/passwd"}}, map[string]string{"mqtt.addr": "0.0.0.0:1883"}, ""},
		{"jwt", Security{Config: auth.Config{JWT: auth.JWTConfig{JWKSFile: "k"}}}, map[string]string{"mqtt.addr": "0.0.0.0:1883"}, ""},
		{"client certs", Security{TLS: listen.TLSConfig{TLSFiles: listen.TLSFiles{ClientCAFile: "ca", RequireClientCert: true}}}, map[string]string{"mqtt.addr": "0.0.0.0:1883"}, ""},
		{"written open", Security{Config: auth.Config{AllowAnonymous: &yes}}, map[string]string{"mqtt.addr": "0.0.0.0:1883"}, ""},
	}
	for _, c := range cases {
		err := c.sec.Exposed(c.addrs)
		if c.bad == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), "allow_anonymous: true") ||
			!strings.Contains(err.Error(), "users_file") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
