package config

import (
	"fmt"
	"net"
	"slices"
	"sort"
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

// Exposed checks the secure-by-default rule: a process whose listeners
// (addrs: YAML field → host:port) bind an address other than loopback
// must authenticate its clients — a users file, JWT keys, or client
// certificates required by TLS — unless allow_anonymous: true is written.
// The error names the listeners and what to configure.
func (s Security) Exposed(addrs map[string]string) error {
	if s.AllowAnonymous != nil && *s.AllowAnonymous {
		return nil
	}
	if s.UsersFile != "" || s.JWT.Enabled() || s.TLS.RequireClientCert {
		return nil
	}
	var open []string
	for field, a := range addrs {
		if a != "" && !Loopback(a) {
			open = append(open, fmt.Sprintf("%s (%s)", field, a))
		}
	}
	if len(open) == 0 {
		return nil
	}
	sort.Strings(open)
	return fmt.Errorf("%s bind(s) a non-loopback address, but no client authentication is configured: "+
		"set security.users_file (create users with 'tributary passwd FILE USER'), security.jwt, or security.tls.client_ca_file "+
		"with require_client_cert, and ACL rules under security.acl; or write security.allow_anonymous: true to accept "+
		"anyone on the network (see README, \"Secure a site\")", strings.Join(open, ", "))
}

// Loopback tells whether host:port binds only a loopback address
// (127.0.0.0/8, ::1, localhost). An empty host binds every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
