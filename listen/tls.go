package listen

// TLSFiles names the PEM files of one TLS identity.
type TLSFiles struct {
	// CertFile and KeyFile: the certificate chain and private key this
	// process presents. Both empty = no TLS.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile: when set, client certificates are requested and
	// verified against these CAs (mutual TLS); a client certificate
	// authenticates its subject CN. Optional.
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireClientCert refuses a client without a certificate signed by
	// ClientCAFile (default false: the certificate is optional and other
	// authentication applies). Peer links always require one.
	RequireClientCert bool `yaml:"require_client_cert"`
}

// TLSConfig is the security.tls section: one identity for every listener,
// with per-listener overrides (keys: mqtt, mqtt_ws, kafka, pulsar, http,
// rest, peer).
type TLSConfig struct {
	TLSFiles `yaml:",inline"`
	// Listeners overrides the files for one listener by name.
	Listeners map[string]TLSFiles `yaml:"listeners"`
}

// Enabled tells whether any listener has TLS.
func (c TLSConfig) Enabled() bool {
	if c.CertFile != "" {
		return true
	}
	for _, f := range c.Listeners {
		if f.CertFile != "" {
			return true
		}
	}
	return false
}
