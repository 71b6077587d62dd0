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

// Listener is one listener a process binds, for Exposed: its address and
// its name in security.tls.listeners (listen.TLSListeners).
type Listener struct {
	Addr string
	TLS  string
}

// Bind is the Listener at addr whose TLS files are those of tlsName.
func Bind(addr, tlsName string) Listener { return Listener{Addr: addr, TLS: tlsName} }

// Auth is the auth.Config of the section, with ClientCerts set when some
// client listener (any but peer) verifies client certificates (so certificates alone turn
// anonymous access off by default).
func (s Security) Auth() auth.Config {
	c := s.Config
	for _, name := range listen.TLSListeners {
		// A peer link's certificate authenticates a node, not a client.
		if f := s.TLS.Files(name); name != "peer" && f.CertFile != "" && f.ClientCAFile != "" {
			c.ClientCerts = true
		}
	}
	return c
}

// Exposed checks the secure-by-default rule, listener by listener
// (listeners: YAML key → listener): each one that binds an address other
// than loopback must serve TLS with a certificate, and authenticate its
// clients by something it verifies — a users file, JWT keys, or client
// certificates it requires (require_client_cert with client_ca_file, in
// the files that apply to that listener, next to its certificate) —
// unless allow_anonymous: true is written. A client CA on a listener
// without a certificate verifies nothing and does not count. The error
// names each listener's key and what it lacks.
func (s Security) Exposed(listeners map[string]Listener) error {
	if s.AllowAnonymous != nil && *s.AllowAnonymous {
		return nil
	}
	users := s.UsersFile != "" || s.JWT.Enabled()
	var open []string
	for field, l := range listeners {
		if l.Addr == "" || Loopback(l.Addr) {
			continue
		}
		f := s.TLS.Files(l.TLS)
		var lacks []string
		if f.CertFile == "" {
			lacks = append(lacks, fmt.Sprintf("serves no TLS (security.tls.cert_file and key_file, or security.tls.listeners.%s)", l.TLS))
		}
		if !users && (f.CertFile == "" || f.ClientCAFile == "" || !f.RequireClientCert) {
			lacks = append(lacks, "authenticates nobody")
		}
		if len(lacks) > 0 {
			open = append(open, fmt.Sprintf("%s (%s) %s", field, l.Addr, strings.Join(lacks, " and ")))
		}
	}
	if len(open) == 0 {
		return nil
	}
	sort.Strings(open)
	return fmt.Errorf("%s: a listener on a non-loopback address must serve TLS and authenticate its clients: "+
		"set security.tls cert_file and key_file, and security.users_file (create users with 'tributary passwd FILE USER'), security.jwt, or security.tls.client_ca_file "+
		"with require_client_cert, and ACL rules under security.acl; or write security.allow_anonymous: true to accept "+
		"anyone on the network (see docs/security.md, \"Secure a site\")", strings.Join(open, "; "))
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
