package config

import (
	"strings"
	"testing"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// TestExposed: every non-loopback listener must serve TLS with a
// certificate and authenticate its clients by something it verifies;
// settings that only look like authentication (a client CA with no
// certificate to serve it, a certificate only as another listener's
// override) do not count. Errors name the listener's key.
func TestExposed(t *testing.T) {
	yes := true
	cert := listen.TLSFiles{CertFile: "c", KeyFile: "k"}
	mtls := listen.TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", RequireClientCert: true}
	users := auth.Config{UsersFile: "/etc/passwd"}
	mqtt := func(a string) map[string]Listener { return map[string]Listener{"mqtt.addr": Bind(a, "mqtt")} }
	cases := []struct {
		name  string
		sec   Security
		addrs map[string]Listener
		bad   []string
	}{
		{"loopback", Security{}, map[string]Listener{"mqtt.addr": Bind("127.0.0.1:1883", "mqtt"), "kafka.addr": Bind("[::1]:9092", "kafka"), "http_addr": Bind("localhost:8080", "http")}, nil},
		{"all interfaces", Security{}, mqtt(":1883"), []string{"mqtt.addr (:1883)", "serves no TLS", "authenticates nobody"}},
		{"public address", Security{}, map[string]Listener{"kafka.addr": Bind("10.0.0.5:9092", "kafka"), "mqtt.addr": Bind("127.0.0.1:1", "mqtt")}, []string{"kafka.addr (10.0.0.5:9092)"}},
		{"host name", Security{}, mqtt("edge-1:1883"), []string{"mqtt.addr"}},
		{"off", Security{}, mqtt(""), nil},
		{"users file and TLS", Security{Config: users, TLS: listen.TLSConfig{TLSFiles: cert}}, mqtt("0.0.0.0:1883"), nil},
		{"jwt and TLS", Security{Config: auth.Config{JWT: auth.JWTConfig{JWKSFile: "k"}}, TLS: listen.TLSConfig{TLSFiles: cert}}, mqtt("0.0.0.0:1883"), nil},
		{"client certs required", Security{TLS: listen.TLSConfig{TLSFiles: mtls}}, mqtt("0.0.0.0:1883"), nil},
		{"written open", Security{Config: auth.Config{AllowAnonymous: &yes}}, mqtt("0.0.0.0:1883"), nil},
		// Finding 2 of issue 35: each of these passed, and the listener
		// served plain text to anyone.
		{"client CA without a certificate", Security{TLS: listen.TLSConfig{TLSFiles: listen.TLSFiles{ClientCAFile: "ca", RequireClientCert: true}}},
			mqtt("0.0.0.0:1883"), []string{"mqtt.addr (0.0.0.0:1883) serves no TLS", "authenticates nobody", "security.tls.listeners.mqtt"}},
		{"certificate only on another listener", Security{TLS: listen.TLSConfig{
			TLSFiles: listen.TLSFiles{ClientCAFile: "ca", RequireClientCert: true}, Listeners: map[string]listen.TLSFiles{"http": mtls}}},
			map[string]Listener{"mqtt.addr": Bind("0.0.0.0:1883", "mqtt"), "http_addr": Bind("0.0.0.0:8080", "http")}, []string{"mqtt.addr (0.0.0.0:1883) serves no TLS"}},
		{"users file without TLS", Security{Config: users}, mqtt("0.0.0.0:1883"), []string{"mqtt.addr (0.0.0.0:1883) serves no TLS"}},
		{"a listener's override turns TLS off", Security{Config: users, TLS: listen.TLSConfig{TLSFiles: cert, Listeners: map[string]listen.TLSFiles{"rest": {}}}},
			map[string]Listener{"catalog.addr": Bind("0.0.0.0:8181", "rest"), "kafka.addr": Bind("0.0.0.0:9092", "kafka")}, []string{"catalog.addr (0.0.0.0:8181) serves no TLS"}},
		{"client CA not required", Security{TLS: listen.TLSConfig{TLSFiles: listen.TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}},
			mqtt("0.0.0.0:1883"), []string{"mqtt.addr (0.0.0.0:1883) authenticates nobody"}},
	}
	for _, c := range cases {
		err := c.sec.Exposed(c.addrs)
		if c.bad == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, want := range append(c.bad, "allow_anonymous: true", "users_file") {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", c.name, err, want)
			}
		}
	}
	if err := (Security{Config: users, TLS: listen.TLSConfig{TLSFiles: cert, Listeners: map[string]listen.TLSFiles{"rest": {}}}}).Exposed(
		map[string]Listener{"catalog.addr": Bind("0.0.0.0:8181", "rest"), "kafka.addr": Bind("0.0.0.0:9092", "kafka")}); err != nil && strings.Contains(err.Error(), "kafka.addr") {
		t.Errorf("kafka.addr serves TLS and was named: %v", err)
	}
}

// TestCertificatesOnlyNotAnonymous: with client certificates the only way
// in, anonymous access is off by default.
func TestCertificatesOnlyNotAnonymous(t *testing.T) {
	sec := Security{TLS: listen.TLSConfig{TLSFiles: listen.TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}}
	a, err := auth.Open(sec.Auth(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.AnonymousAllowed() {
		t.Fatal("anonymous clients admitted when client certificates authenticate")
	}
	a, err = auth.Open(Security{TLS: listen.TLSConfig{TLSFiles: listen.TLSFiles{CertFile: "c", KeyFile: "k"}}}.Auth(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.AnonymousAllowed() {
		t.Fatal("a certificate alone (no client CA) turned anonymous access off")
	}
}
