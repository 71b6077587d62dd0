package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tributary-io/tributary"
)

// Method is how a principal proved who it is.
type Method string

// The authentication methods.
const (
	MethodAnonymous   Method = "anonymous"
	MethodPassword    Method = "password"
	MethodToken       Method = "token"
	MethodCertificate Method = "certificate"
)

const anonymousName = "anonymous"

// Principal is an authenticated identity.
type Principal struct {
	// Name: the user name, certificate subject CN or JWT subject; "" for
	// an anonymous client.
	Name   string
	Method Method
	// Expires is when the credential stops being valid (a token's exp);
	// zero = no limit. A connection or stream of this principal ends
	// then (ErrExpired).
	Expires time.Time
}

// Anonymous tells whether p carries no identity.
func (p Principal) Anonymous() bool { return p.Name == "" }

// String is the name, or "anonymous".
func (p Principal) String() string {
	if p.Name == "" {
		return anonymousName
	}
	return p.Name
}

// Client says where an attempt comes from, for the audit log.
type Client struct {
	Protocol string // mqtt, kafka, pulsar, rest, http, peer
	Remote   string // remote address
}

// Errors of authentication and authorization; each wraps
// tributary.ErrUnauthorized so protocols map them with tributary.ReasonOf.
var (
	// ErrBadCredentials: unknown user, wrong password, bad or expired token,
	// untrusted certificate.
	ErrBadCredentials = fmt.Errorf("%w: bad credentials", tributary.ErrUnauthorized)
	// ErrNoCredentials: none given and anonymous access is off.
	ErrNoCredentials = fmt.Errorf("%w: credentials required", tributary.ErrUnauthorized)
	// ErrDenied: authenticated, but no rule allows the request.
	ErrDenied = fmt.Errorf("%w: not authorized", tributary.ErrUnauthorized)
	// ErrExpired: the token a connection or stream authenticated with
	// has expired (Principal.Expires); the client must authenticate again.
	ErrExpired = fmt.Errorf("%w: the token expired; authenticate again with a fresh one", tributary.ErrUnauthorized)
)

// usersCheckEvery bounds how often the password file's modification time
// is looked at (a changed file is read again).
const usersCheckEvery = 2 * time.Second

// Authority authenticates principals and decides their requests. It is
// safe for concurrent use.
type Authority struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu        sync.RWMutex
	users     map[string]*entry
	usersMod  time.Time
	usersSize int64
	checked   time.Time
	keys      *keySet
	verified  map[[32]byte]struct{} // sha256(user, password, hash line) of passwords that verified

	throttle    *throttle
	proxies     []netip.Prefix
	derivations chan struct{} // a slot per password derivation running
}

// maxVerifiedCache bounds the cache of verified passwords.
const maxVerifiedCache = 10000

// Open builds an Authority from cfg, reading the password file and the JWT
// keys; errors name the file.
func Open(cfg Config, log *slog.Logger) (*Authority, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = time.Hour
	}
	var problems []string
	cfg.Validate(func(field, format string, args ...any) {
		problems = append(problems, field+": "+fmt.Sprintf(format, args...))
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("security: %s", strings.Join(problems, "; "))
	}
	proxies, _ := cfg.proxyPrefixes() // validated above
	a := &Authority{cfg: cfg, log: log.With("component", "audit"), metrics: newMetrics(),
		throttle: newThrottle(cfg.Throttle), proxies: proxies, derivations: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	if j := cfg.JWT; (len(j.PublicKeyFiles) > 0 || j.JWKSFile != "") && (j.Issuer == "" || j.Audience == "") {
		log.Warn("security.jwt: public_key_files or jwks_file is set without both issuer and audience: any token those keys sign, for any service, is accepted here; set security.jwt.issuer and security.jwt.audience",
			"issuer", j.Issuer, "audience", j.Audience)
	}
	if cfg.JWT.AllowWithoutExp {
		log.Warn("security.jwt.allow_without_exp: tokens without an exp claim are accepted and never expire")
	}
	return a, nil
}

// Reload reads the password file and JWT keys again (SIGHUP). On error
// the previous ones stay in force.
func (a *Authority) Reload() error {
	var users map[string]*entry
	var mod time.Time
	var size int64
	if a.cfg.UsersFile != "" {
		var err error
		users, mod, size, err = readUsers(a.cfg.UsersFile)
		if err != nil {
			return err
		}
	}
	keys, err := loadKeys(a.cfg.JWT)
	if err != nil {
		return err
	}
	a.warnUnprovisioned(users)
	a.mu.Lock()
	a.users, a.usersMod, a.usersSize, a.checked = users, mod, size, time.Now()
	a.keys = keys
	a.verified = map[[32]byte]struct{}{}
	a.mu.Unlock()
	return nil
}

func readUsers(path string) (map[string]*entry, time.Time, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("security.users_file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("security.users_file: %w", err)
	}
	users, err := parsePasswd(f)
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("security.users_file %s: %w", path, err)
	}
	return users, st.ModTime(), st.Size(), nil
}

// refreshUsers reads the password file again when it changed (looked at
// at most every usersCheckEvery); a bad file keeps the old users, logged.
func (a *Authority) refreshUsers() {
	if a.cfg.UsersFile == "" {
		return
	}
	a.mu.RLock()
	due := time.Since(a.checked) >= usersCheckEvery
	a.mu.RUnlock()
	if !due {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.checked) < usersCheckEvery {
		return
	}
	a.checked = time.Now()
	st, err := os.Stat(a.cfg.UsersFile)
	if err != nil || (st.ModTime().Equal(a.usersMod) && st.Size() == a.usersSize) {
		return
	}
	users, mod, size, err := readUsers(a.cfg.UsersFile)
	if err != nil {
		a.log.Error("password file not reloaded; the previous users stay in force", "err", err)
		return
	}
	a.users, a.usersMod, a.usersSize = users, mod, size
	a.verified = map[[32]byte]struct{}{}
	a.warnUnprovisioned(users)
}

// warnUnprovisioned logs the users that cannot use SCRAM-SHA-512 because
// their entry has no credential for it (mosquitto_passwd entries, or ones
// written before Tributary stored it apart from the $7$ hash).
func (a *Authority) warnUnprovisioned(users map[string]*entry) {
	var names []string
	for u, e := range users {
		if e.scram5 == nil {
			names = append(names, u)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	a.log.Warn("security.users_file: users without a SCRAM-SHA-512 credential cannot use SCRAM-SHA-512 (PLAIN and MQTT still work); re-run `tributary passwd FILE USER` for each",
		"count", len(names), "users", strings.Join(names[:min(len(names), 10)], ","))
}

// AnonymousAllowed tells whether clients without credentials get in.
func (a *Authority) AnonymousAllowed() bool {
	if a.cfg.AllowAnonymous != nil {
		return *a.cfg.AllowAnonymous
	}
	return !a.Configured() && !a.cfg.ClientCerts
}

// Configured tells whether any way of authenticating by credentials is
// set up (a password file, JWT keys); client certificates turn anonymous
// access off (Config.ClientCerts) without counting here.
func (a *Authority) Configured() bool {
	return a.cfg.UsersFile != "" || a.cfg.JWT.Enabled()
}

// Open tells whether every request is allowed: anonymous access with no
// rules at all (the loopback development default).
func (a *Authority) Open() bool { return a.AnonymousAllowed() && len(a.cfg.ACL) == 0 }

// Debug tells whether /debug/pprof is served.
func (a *Authority) Debug() bool { return a.cfg.Debug }

// TokenTTL is the lifetime of the tokens IssueToken makes by default.
func (a *Authority) TokenTTL() time.Duration { return a.cfg.TokenTTL }

// Anonymous admits a client that presented no credentials, or fails with
// ErrNoCredentials (audited).
func (a *Authority) Anonymous(c Client) (Principal, error) {
	if a.AnonymousAllowed() {
		a.metrics.success(c.Protocol, MethodAnonymous)
		return Principal{Method: MethodAnonymous}, nil
	}
	a.fail(c, "", "no_credentials")
	return Principal{}, ErrNoCredentials
}

// Password checks user's password against the password file. When JWTs
// are configured and password is a JWT, it is checked as a token instead
// (MQTT clients carry tokens in the password field); user, when not
// empty, must then be the token's principal.
func (a *Authority) Password(c Client, user string, password []byte) (Principal, error) {
	if a.hasKeys() && looksLikeJWT(password) {
		p, err := a.Token(c, string(password))
		if err != nil {
			return p, err
		}
		if user != "" && user != p.Name {
			a.fail(c, user, "token_user_mismatch")
			return Principal{}, ErrBadCredentials
		}
		return p, nil
	}
	if user == "" || user == anonymousName {
		if len(password) == 0 {
			return a.Anonymous(c)
		}
		a.fail(c, user, "no_user")
		return Principal{}, ErrBadCredentials
	}
	if a.throttled(c, user) {
		return Principal{}, ErrBadCredentials
	}
	a.refreshUsers()
	a.mu.RLock()
	e := a.users[user]
	var key [32]byte
	cached := false
	if e != nil {
		key = verifiedKey(user, password, e.line)
		_, cached = a.verified[key]
	}
	a.mu.RUnlock()
	if e == nil {
		// The same derivation as for a real user, so that the time taken
		// does not tell whether the user exists.
		a.derive(func() { dummyEntry.verify(password) })
		a.fail(c, user, "unknown_user")
		return Principal{}, ErrBadCredentials
	}
	if !cached {
		var ok bool
		a.derive(func() { ok = e.verify(password) })
		if !ok {
			a.fail(c, user, "bad_password")
			return Principal{}, ErrBadCredentials
		}
		a.mu.Lock()
		if len(a.verified) >= maxVerifiedCache {
			a.verified = map[[32]byte]struct{}{}
		}
		a.verified[key] = struct{}{}
		a.mu.Unlock()
	}
	a.throttle.succeeded(userKey(user))
	a.metrics.success(c.Protocol, MethodPassword)
	return Principal{Name: user, Method: MethodPassword}, nil
}

func verifiedKey(user string, password []byte, line string) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s:%d:", len(user), user, len(password))
	h.Write(password)
	h.Write([]byte(line))
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// SCRAM is user's SCRAM credential for mechanism "SCRAM-SHA-256" or
// "SCRAM-SHA-512"; ok is false for an unknown user or a user without
// one (the caller still runs the exchange with a made-up credential so
// that the answer does not tell which).
func (a *Authority) SCRAM(mechanism, user string) (cred *SCRAMCredential, ok bool) {
	cred, reason := a.scramCredential(mechanism, user)
	return cred, reason == ""
}

// scramCredential is SCRAM's credential, or the audit reason why there is
// none: unknown_user, or scram_not_provisioned for a user whose entry has
// no line for the mechanism (written by mosquitto_passwd or an older
// `tributary passwd`), which is also logged with what to do about it.
func (a *Authority) scramCredential(mechanism, user string) (*SCRAMCredential, string) {
	a.refreshUsers()
	a.mu.RLock()
	e := a.users[user]
	a.mu.RUnlock()
	if e == nil {
		return nil, "unknown_user"
	}
	var c *SCRAMCredential
	switch mechanism {
	case "SCRAM-SHA-512":
		c = e.scram5
	case "SCRAM-SHA-256":
		c = e.scram2
	}
	if c == nil {
		a.log.Warn("user has no "+mechanism+" credential in security.users_file; re-run `tributary passwd FILE USER` for it (PLAIN still works)",
			"event", "authentication", "principal", user, "mechanism", mechanism)
		return nil, "scram_not_provisioned"
	}
	return c, ""
}

// Certificate admits the subject of a client certificate the TLS layer
// verified (its CN is the principal).
func (a *Authority) Certificate(c Client, cert *x509.Certificate) (Principal, error) {
	if cert == nil || cert.Subject.CommonName == "" || cert.Subject.CommonName == anonymousName {
		a.fail(c, "", "certificate_without_cn")
		return Principal{}, ErrBadCredentials
	}
	a.metrics.success(c.Protocol, MethodCertificate)
	return Principal{Name: cert.Subject.CommonName, Method: MethodCertificate}, nil
}

// Authenticated records a success of a method the caller checked itself
// (a SCRAM exchange), for the metrics.
func (a *Authority) Authenticated(c Client, p Principal) {
	a.metrics.success(c.Protocol, p.Method)
}

// Failed records an authentication failure the caller detected itself
// (a SCRAM proof that did not verify, a malformed SASL message).
func (a *Authority) Failed(c Client, user, reason string) { a.fail(c, user, reason) }

// dummyEntry is what an unknown user's password is derived against.
var dummyEntry = &entry{kind: 7, iter: DefaultIterations, salt: []byte("tributary-dummy"), hash: make([]byte, 64)}

// derive runs a password derivation in one of the bounded slots (at most
// GOMAXPROCS at once, so a flood of guesses queues instead of taking
// every core from the node's real work).
func (a *Authority) derive(f func()) {
	a.derivations <- struct{}{}
	defer func() { <-a.derivations }()
	f()
}

// throttled tells (audited) whether c's address or user is in its
// back-off after repeated failures (security.throttle); such an attempt
// is refused without being checked, and is not counted again.
func (a *Authority) throttled(c Client, user string) bool {
	if !a.throttle.blocked(time.Now(), a.throttle.addrKey(c.Remote), userKey(user)) {
		return false
	}
	a.metrics.failure(c.Protocol, "throttled")
	a.log.Warn("authentication failed", "event", "authentication", "decision", "deny", "protocol", c.Protocol,
		"remote", c.Remote, "principal", user, "reason", "throttled")
	return true
}

func (a *Authority) fail(c Client, user, reason string) {
	if reason != "no_credentials" {
		a.throttle.failed(time.Now(), a.throttle.addrKey(c.Remote), userKey(user))
	}
	a.metrics.failure(c.Protocol, reason)
	a.log.Warn("authentication failed", "event", "authentication", "decision", "deny", "protocol", c.Protocol,
		"remote", c.Remote, "principal", user, "reason", reason)
}

var errNoKeys = errors.New("no JWT keys configured")
