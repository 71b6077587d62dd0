package auth

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Config is the authentication and authorization part of the security
// section (the TLS part is listen.TLSConfig). The same keys serve the edge
// config, the cloud config and `tributary dev --security FILE`.
type Config struct {
	// AllowAnonymous lets clients without credentials in, with the rights
	// of the ACL rules whose principal is "anonymous" (or every right
	// when there are no rules). Default: true only when no way of
	// authenticating is configured (no users_file, jwt or client CA);
	// a node that binds a non-loopback address with anonymous access
	// and no authentication refuses to start unless it is written true.
	AllowAnonymous *bool `yaml:"allow_anonymous"`
	// ClientCerts is set by the process (not a key) when a listener
	// verifies client certificates: they authenticate, so anonymous
	// access is then off unless AllowAnonymous says otherwise.
	ClientCerts bool `yaml:"-"`
	// UsersFile is a mosquitto-compatible password file (user:$7$... lines,
	// as mosquitto_passwd and `tributary passwd` write them). It is read
	// again when it changes (checked at most every few seconds) and on
	// SIGHUP.
	UsersFile string `yaml:"users_file"`
	// JWT configures the tokens accepted in the MQTT password field, as
	// Kafka OAUTHBEARER, as Pulsar tokens and as REST bearer tokens.
	JWT JWTConfig `yaml:"jwt"`
	// Groups names groups of principals; a rule's principal "group:NAME"
	// matches each member (patterns allowed).
	Groups map[string][]string `yaml:"groups"`
	// ACL: the rules. A request is allowed when any rule whose principal
	// matches allows its action on its resource; otherwise it is denied.
	ACL []Rule `yaml:"acl"`
	// Debug serves /debug/pprof on the HTTP port (admin only when
	// authentication is on). Default false.
	Debug bool `yaml:"debug"`
	// TokenTTL is the lifetime of the tokens the REST catalog's OAuth2
	// endpoint issues. Default 1h.
	TokenTTL time.Duration `yaml:"token_ttl"`
	// Throttle limits guessing: failed authentications per address and
	// per user, across every protocol (see ThrottleConfig).
	Throttle ThrottleConfig `yaml:"throttle"`
	// TrustedProxies: addresses or CIDR prefixes of reverse proxies whose
	// X-Forwarded-For header names the client (for the throttle, the
	// REST rate limit and the audit log). Empty (the default): the header
	// is ignored and the connection's address is the client's.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// proxyPrefixes parses TrustedProxies.
func (c Config) proxyPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, err2 := netip.ParseAddr(s)
			if err2 != nil {
				return nil, fmt.Errorf("%q: want an IP address or a CIDR prefix", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// JWTConfig configures the JSON Web Tokens accepted. Any of the key
// sources may be set; a token must verify with one of them.
type JWTConfig struct {
	// SecretFile holds the HS256 shared secret (raw bytes, trailing
	// newline ignored). It also signs the tokens the REST catalog's OAuth2
	// endpoint issues; without it those are signed with a per-process key.
	SecretFile string `yaml:"secret_file"`
	// PublicKeyFiles: PEM RSA (RS256) or ECDSA (ES256) public keys.
	PublicKeyFiles []string `yaml:"public_key_files"`
	// JWKSFile: a JSON Web Key Set file (RSA and EC keys, by kid).
	JWKSFile string `yaml:"jwks_file"`
	// Issuer and Audience, when set, must match the iss and aud claims.
	// With public_key_files or jwks_file (keys of an outside identity
	// provider, which signs tokens for other services too) set both: a
	// start-up warning says so when either is missing.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// AllowWithoutExp accepts tokens without an exp claim (valid until
	// the key changes). Default false: a token must expire.
	AllowWithoutExp bool `yaml:"allow_without_exp"`
	// PrincipalClaim names the claim holding the principal. Default sub.
	PrincipalClaim string `yaml:"principal_claim"`
}

// Enabled tells whether any JWT key is configured.
func (j JWTConfig) Enabled() bool {
	return j.SecretFile != "" || len(j.PublicKeyFiles) > 0 || j.JWKSFile != ""
}

// Action is what a request does.
type Action string

// The actions rules can allow.
const (
	// Publish: MQTT publish to topics.
	Publish Action = "publish"
	// Subscribe: MQTT subscribe to topic filters.
	Subscribe Action = "subscribe"
	// Produce: Kafka produce (and HTTP/gRPC produce) to streams.
	Produce Action = "produce"
	// Consume: Kafka fetch/groups, Pulsar subscriptions, catalog reads of streams.
	Consume Action = "consume"
	// Write: catalog writes (commits, table creation) on streams; edge nodes
	// need it on the cloud's REST catalog.
	Write Action = "write"
	// Admin: everything, including catalog administration, table
	// maintenance and the debug endpoints.
	Admin Action = "admin"
)

var actions = []Action{Publish, Subscribe, Produce, Consume, Write, Admin}

// Rule grants actions to the principals its Principal pattern matches.
type Rule struct {
	// Principal: a user name, certificate subject CN or JWT subject;
	// * matches any run of characters; "group:NAME" matches the members
	// of a group; "anonymous" matches clients without credentials.
	Principal string `yaml:"principal"`
	// Allow lists the actions granted.
	Allow []Action `yaml:"allow"`
	// Topics: MQTT topic filters the publish and subscribe actions apply
	// to (+ and # wildcards; %u = the principal, %c = the client id).
	// Empty = every topic.
	Topics []string `yaml:"topics"`
	// Streams: namespace.stream patterns (* wildcards) for produce,
	// consume and write, for the streams MQTT topics route to, and for
	// the stream a cloud MQTT `$stream/…` subscription names (subscribe).
	// Empty = every stream.
	Streams []string `yaml:"streams"`
	// Groups: Kafka consumer groups, Pulsar subscriptions (* wildcards)
	// a consume rule allows, and the MQTT shared subscription groups
	// ($share/GROUP/…) a subscribe rule allows. Empty = every group.
	Groups []string `yaml:"groups"`
	// ClientIDs: the MQTT client ids the principal may connect with
	// (* wildcards, %u). A principal none of whose rules name client ids
	// may use "%u" (its own name) only, so that one device cannot take
	// over another's session; an anonymous client none of whose rules
	// name client ids gets a server-assigned id only (it sends an empty
	// one). A pattern such as "%u-*" can name another principal (user
	// sensor would take sensor-1): write it only where names cannot
	// collide.
	ClientIDs []string `yaml:"client_ids"`
}

// Validate reports each bad field through bad.
func (c Config) Validate(bad func(field, format string, args ...any)) {
	for i, r := range c.ACL {
		field := fmt.Sprintf("security.acl[%d]", i)
		if strings.TrimSpace(r.Principal) == "" {
			bad(field+".principal", "empty: name a user, certificate CN, JWT subject, group:NAME or anonymous")
		}
		if len(r.Allow) == 0 {
			bad(field+".allow", "empty: list actions among %v", actions)
		}
		for _, a := range r.Allow {
			if !slices.Contains(actions, a) {
				bad(field+".allow", "unknown action %q: want one of %v", a, actions)
			}
		}
		for _, f := range r.Topics {
			if err := validFilter(f); err != nil {
				bad(field+".topics", "%q: %v", f, err)
			}
		}
		if g, ok := strings.CutPrefix(r.Principal, "group:"); ok {
			if _, ok := c.Groups[g]; !ok {
				bad(field+".principal", "group %q is not defined under security.groups", g)
			}
		}
	}
	if c.TokenTTL < 0 {
		bad("security.token_ttl", "%s is negative", c.TokenTTL)
	}
	if _, err := c.proxyPrefixes(); err != nil {
		bad("security.trusted_proxies", "%v", err)
	}
	if c.Throttle.Backoff < 0 || c.Throttle.MaxBackoff < 0 {
		bad("security.throttle", "backoff and max_backoff must not be negative")
	}
}

// validFilter checks an MQTT topic filter's wildcards.
func validFilter(f string) error {
	if f == "" {
		return fmt.Errorf("empty filter")
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return fmt.Errorf("# must be the last level")
		case l != "#" && l != "+" && strings.ContainsAny(l, "#+"):
			return fmt.Errorf("a wildcard must be a whole level")
		}
	}
	return nil
}
