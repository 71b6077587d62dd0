package config

import (
	"slices"
	"strings"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// Security is the security section (edge, cloud, and the file given to
// `tributary dev --security`): TLS for every listener, authentication and
// the ACL.
type Security struct {
	auth.Config `yaml:",inline"`
	// TLS for every listener; see listen.TLSConfig.
	TLS listen.TLSConfig `yaml:"tls"`
}

// Validate reports each bad field through bad.
func (s Security) Validate(bad func(field, format string, args ...any)) {
	s.Config.Validate(bad)
	check := func(field string, f listen.TLSFiles) {
		if (f.CertFile == "") != (f.KeyFile == "") {
			bad(field, "set both cert_file and key_file, or neither")
		}
		if f.RequireClientCert && f.ClientCAFile == "" {
			bad(field+".require_client_cert", "needs client_ca_file")
		}
	}
	check("security.tls", s.TLS.TLSFiles)
	for name, f := range s.TLS.Listeners {
		if !slices.Contains(listen.TLSListeners, name) {
			bad("security.tls.listeners."+name, "unknown listener; one of %s", strings.Join(listen.TLSListeners, ", "))
		}
		check("security.tls.listeners."+name, f)
	}
}
