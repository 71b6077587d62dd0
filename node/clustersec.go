package node

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/listen"
)

// The cluster's locks: gossip encrypted with cluster.gossip_key, peer
// links authenticated by mutual TLS (security.tls) and/or cluster.secret.
// A node whose gossip or peer listener is reachable from other hosts
// refuses to start without them, unless security.allow_anonymous is
// written true.

// minSecret is the shortest cluster.secret accepted.
const minSecret = 16

// gossipKeys decodes cluster.gossip_key (or gossip_key_file) and the
// secondary keys; a nil key means plain gossip.
func (c *Config) gossipKeys() (key []byte, secondary [][]byte, err error) {
	g := c.Cluster
	decode := func(field string, s []byte) ([]byte, error) {
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(s)))
		if err != nil {
			return nil, fmt.Errorf("%s: not base64 (%v): want base64 of 16, 24 or 32 random bytes, e.g. from `openssl rand -base64 32`", field, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%s: %d bytes once decoded: want 16, 24 or 32 (AES-128, 192, 256), e.g. from `openssl rand -base64 32`", field, n)
		}
		return k, nil
	}
	raw, err := config.Secret("cluster.gossip_key", g.GossipKey, g.GossipKeyFile)
	if err != nil || raw == nil {
		if err == nil && len(g.GossipSecondaryKeys) > 0 {
			err = fmt.Errorf("cluster.gossip_secondary_keys: set without cluster.gossip_key (the key gossip is encrypted with)")
		}
		return nil, nil, err
	}
	if key, err = decode("cluster.gossip_key", raw); err != nil {
		return nil, nil, err
	}
	for i, s := range g.GossipSecondaryKeys {
		k, err := decode(fmt.Sprintf("cluster.gossip_secondary_keys[%d]", i), []byte(s))
		if err != nil {
			return nil, nil, err
		}
		secondary = append(secondary, k)
	}
	return key, secondary, nil
}

// clusterSecret is cluster.secret (or secret_file); nil when unset.
func (c *Config) clusterSecret() ([]byte, error) {
	s, err := config.Secret("cluster.secret", c.Cluster.Secret, c.Cluster.SecretFile)
	if err == nil && s != nil && len(s) < minSecret {
		err = fmt.Errorf("cluster.secret: %d bytes, want at least %d (e.g. from `openssl rand -base64 32`)", len(s), minSecret)
	}
	return s, err
}

// peerTLSFiles are the TLS files of the peer listener
// (security.tls.listeners.peer, else security.tls); ok when they make
// mutual TLS possible (a certificate and a client CA).
func (c *Config) peerTLSFiles() (f listen.TLSFiles, ok bool) {
	f = c.Security.TLS.Files("peer")
	return f, f.CertFile != "" && f.KeyFile != "" && f.ClientCAFile != ""
}

// validateClusterSecurity checks the keys and the secret, and refuses a
// cluster reachable from other hosts with gossip in clear or peer links
// that trust anyone, unless security.allow_anonymous is written true.
func (c *Config) validateClusterSecurity(bad func(field, format string, args ...any)) {
	// The errors of gossipKeys and clusterSecret start with their field.
	report := func(err error) {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		bad(field, "%s", msg)
	}
	key, _, err := c.gossipKeys()
	if err != nil {
		report(err)
	}
	secret, err := c.clusterSecret()
	if err != nil {
		report(err)
	}
	g := c.Cluster
	if g.GossipAddr == "" {
		return
	}
	_, mtls := c.peerTLSFiles()
	if (key != nil && (secret != nil || mtls)) || (config.Loopback(g.GossipAddr) && config.Loopback(g.PeerAddr)) {
		return
	}
	if a := c.Security.AllowAnonymous; a != nil && *a {
		return
	}
	var missing []string
	if secret == nil && !mtls {
		missing = append(missing, "peer links would trust any process that reaches them")
	}
	if key == nil {
		missing = append(missing, "gossip would be in clear")
	}
	bad("cluster.secret", "gossip_addr %s and peer_addr %s are reachable from other hosts and %s: set cluster.secret (or mutual TLS: security.tls cert_file, key_file and client_ca_file) and cluster.gossip_key, or write security.allow_anonymous: true on a network of its own",
		g.GossipAddr, g.PeerAddr, strings.Join(missing, " and "))
}
