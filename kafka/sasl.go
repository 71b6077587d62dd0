package kafka

// SaslHandshake (key 17): v0–v1, and SaslAuthenticate (key 36): v0–v2,
// both sides (the Server answers them itself; a side's Handler never sees
// them, but its API table lists them so that ApiVersions advertises them).
//
// Mechanisms: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (RFC 5802/7677, the
// credentials of the password file) and OAUTHBEARER (RFC 7628: a JWT in
// the client's initial response "n,,\x01auth=Bearer <token>\x01\x01").
//
// Behaviour:
//   - SaslHandshake names the mechanism; one that is not offered gets
//     UNSUPPORTED_SASL_MECHANISM (33) with the offered list, and the
//     connection is closed after the response, as Kafka does. v1 is followed
//     by SaslAuthenticate requests; v0 by the bare SASL tokens (a 4-byte
//     size and the bytes, no request header), each answered the same way,
//     as old clients (sarama's SASLHandshakeV0) expect.
//   - SaslAuthenticate without a handshake, a second handshake while an
//     exchange is under way, or any other request in the middle of one is
//     ILLEGAL_SASL_STATE (34) or a closed connection.
//   - Every SASL message is at most MaxSASLMessageBytes; a larger one fails
//     the authentication.
//   - A failed authentication is SASL_AUTHENTICATION_FAILED (58) with a
//     generic message (the reason is in the audit log, never told to the
//     client), and the connection is closed after the response. For
//     OAUTHBEARER a bad or expired token is first answered, as RFC 7628
//     says and Kafka does, with the error challenge
//     {"status":"invalid_token"} (error code 0); the client's reply (the
//     single byte 0x01) then gets 58. franz-go, librdkafka, sarama and the
//     Java client all follow this.
//   - session_lifetime_ms (v1+): for a token (OAUTHBEARER, or a JWT sent as
//     the PLAIN password) its remaining lifetime; 0 (no limit) for
//     passwords. The connection is closed when a request arrives after the
//     session expired, and an idle one at the expiry itself, so that a
//     token-authenticated connection never outlives its token. Clients
//     that implement KIP-368 (franz-go, the Java client, librdkafka)
//     re-authenticate before then with a new SaslHandshake (v1) and
//     SaslAuthenticate on the same connection; the principal must not
//     change (else 58 and close).
//   - Without SASL, a TLS client certificate (verified against
//     security.tls.client_ca_file) authenticates its subject CN, as a
//     Kafka SSL listener with client authentication does; SASL, when the
//     client uses it, decides instead.
//   - When the Authority does not admit anonymous clients, a connection
//     whose first request other than ApiVersions, SaslHandshake or
//     SaslAuthenticate comes before it authenticated is closed without a
//     response (as Kafka does), and audited; it is marked ready for the
//     listener's handshake deadline (listen.Ready) only once authenticated,
//     so a client that never finishes SASL is closed at that deadline.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// The SASL mechanisms offered, in the order SaslHandshake lists them.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}

// MaxSASLMessageBytes caps one SASL message (a SaslAuthenticate's bytes or
// a bare v0 token): room for a 16 KiB token with extensions.
const MaxSASLMessageBytes = 64 << 10

// The versions of the SASL APIs; each side lists them in its API table.
var (
	SaslHandshakeVersions    = VersionRange{0, 1}
	SaslAuthenticateVersions = VersionRange{0, 2}
)

// oauthInvalidToken is the RFC 7628 error challenge for a refused token.
const oauthInvalidToken = `{"status":"invalid_token"}`

var (
	errSASLMalformed = errors.New("malformed SASL message")
	errSASLFailed    = errors.New("SASL authentication failed")
)

// session is one connection's authentication state.
type session struct {
	a      *auth.Authority // nil: every client is anonymous
	client auth.Client

	principal     auth.Principal
	authenticated bool
	expires       time.Time // zero = never

	mech        string // of the exchange under way; "" = none
	raw         bool   // handshake v0: the exchange's tokens come as bare frames
	scram       *auth.SCRAM
	oauthFailed bool // the OAUTHBEARER error challenge was sent
}

// required tells whether the connection must authenticate before anything
// but ApiVersions and SASL.
func (s *session) required() bool { return s.a != nil && !s.a.AnonymousAllowed() }

// expired tells whether a token session's lifetime is over.
func (s *session) expired(now time.Time) bool {
	return !s.expires.IsZero() && !now.Before(s.expires)
}

// admitWithoutSASL lets a client that did not authenticate with SASL in:
// as the subject of the client certificate its TLS connection presented
// (verified against security.tls.client_ca_file), else as anonymous; or
// refuses it (audited).
func (s *session) admitWithoutSASL(c net.Conn) bool {
	if s.a != nil {
		if cert := listen.PeerCertificate(c); cert != nil {
			p, err := s.a.Certificate(s.client, cert)
			if err != nil {
				return false
			}
			s.principal, s.authenticated = p, true
			return true
		}
		p, err := s.a.Anonymous(s.client)
		if err != nil {
			return false
		}
		s.principal = p
	}
	s.authenticated = true
	return true
}

func (s *session) offered(mech string) bool {
	return s.a != nil && slices.Contains(Mechanisms, mech)
}

// handshake answers a SaslHandshake; closeAfter ends the connection.
func (s *session) handshake(r *kmsg.SASLHandshakeRequest) (kmsg.Response, bool) {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if s.a != nil {
		resp.SupportedMechanisms = Mechanisms
	} else {
		resp.SupportedMechanisms = []string{}
	}
	switch {
	case s.mech != "", s.authenticated && r.Version == 0: // re-authentication needs v1 (KIP-368)
		resp.ErrorCode = CodeIllegalSaslState
		return resp, true
	case !s.offered(r.Mechanism):
		if s.a != nil {
			s.a.Failed(s.client, "", "sasl_mechanism_unsupported")
		}
		resp.ErrorCode = CodeUnsupportedSaslMechanism
		return resp, true
	}
	s.mech, s.raw, s.oauthFailed, s.scram = r.Mechanism, r.Version == 0, false, nil
	if r.Mechanism == "SCRAM-SHA-256" || r.Mechanism == "SCRAM-SHA-512" {
		s.scram, _ = s.a.NewSCRAM(s.client, r.Mechanism) // only fails for other mechanisms
	}
	return resp, false
}

// authenticate answers a SaslAuthenticate; closeAfter ends the connection.
func (s *session) authenticate(r *kmsg.SASLAuthenticateRequest) (kmsg.Response, bool) {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if s.mech == "" || s.raw {
		resp.ErrorCode = CodeIllegalSaslState
		resp.ErrorMessage = kmsg.StringPtr("SaslAuthenticate without a SaslHandshake v1 first")
		return resp, true
	}
	mech := s.mech
	reply, done, err := s.step(r.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = CodeSaslAuthenticationFailed
		resp.ErrorMessage = kmsg.StringPtr("Authentication failed: invalid credentials with SASL mechanism " + mech)
		return resp, true
	}
	resp.SASLAuthBytes = reply
	if done && !s.expires.IsZero() {
		resp.SessionLifetimeMillis = max(1, time.Until(s.expires).Milliseconds())
	}
	return resp, false
}

// step handles the next message of the exchange under way: the reply to
// send, whether the client is now authenticated, or an error (audited)
// after which the connection is closed.
func (s *session) step(msg []byte) (reply []byte, done bool, err error) {
	fail := func(user, reason string) ([]byte, bool, error) {
		if reason != "" {
			s.a.Failed(s.client, user, reason)
		}
		s.mech, s.scram = "", nil
		return nil, false, errSASLFailed
	}
	if len(msg) > MaxSASLMessageBytes {
		return fail("", "sasl_message_too_large")
	}
	var p auth.Principal
	var expires time.Time
	switch s.mech {
	case "PLAIN":
		authz, user, pass, err := ParsePlain(msg)
		switch {
		case err != nil:
			return fail("", "sasl_malformed")
		case user == "":
			return fail("", "no_user")
		case authz != "" && authz != user:
			return fail(user, "sasl_authzid")
		}
		if p, err = s.a.Password(s.client, user, pass); err != nil {
			return fail("", "") // audited by Password
		}
		if p.Method == auth.MethodToken { // a JWT in the password field
			if expires = tokenExpiry(string(pass)); !expires.IsZero() && !time.Now().Before(expires) {
				return fail(p.Name, "token_expired")
			}
		}
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		reply, done, err := s.scram.Step(msg)
		if err != nil {
			return fail("", "") // audited by Step
		}
		if !done {
			return reply, false, nil
		}
		if _, _, err := s.finish(s.scram.Principal(), time.Time{}); err != nil {
			return nil, false, err
		}
		return reply, true, nil // the server-final message goes out with the success
	case "OAUTHBEARER":
		if s.oauthFailed { // the client's 0x01 after our error challenge
			return fail("", "")
		}
		token, err := ParseOAuthBearer(msg)
		if err != nil {
			return fail("", "sasl_malformed")
		}
		if p, err = s.a.Token(s.client, token); err == nil {
			if expires = tokenExpiry(token); !expires.IsZero() && !time.Now().Before(expires) {
				s.a.Failed(s.client, p.Name, "token_expired")
				err = errSASLFailed
			}
		}
		if err != nil { // RFC 7628 §3.2.2: an error challenge, then failure
			s.oauthFailed = true
			return []byte(oauthInvalidToken), false, nil
		}
	default:
		return fail("", "sasl_state")
	}
	return s.finish(p, expires)
}

// finish ends a successful exchange: the connection's principal is p until
// expires (zero = no limit). A re-authentication must keep the principal.
func (s *session) finish(p auth.Principal, expires time.Time) ([]byte, bool, error) {
	s.mech, s.scram, s.raw, s.oauthFailed = "", nil, false, false
	if s.authenticated && p.Name != s.principal.Name {
		s.a.Failed(s.client, p.Name, "reauth_principal_changed")
		return nil, false, errSASLFailed
	}
	s.principal, s.authenticated, s.expires = p, true, expires
	return nil, true, nil
}

// tokenExpiry is a verified JWT's exp claim; zero when it has none.
func tokenExpiry(token string) time.Time {
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil {
		return time.Time{}
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return time.Time{}
	}
	return exp.Time
}

// ParsePlain splits a SASL PLAIN message (RFC 4616):
// authzid NUL authcid NUL passwd, with a non-empty password and no NUL in
// any part.
func ParsePlain(msg []byte) (authzid, user string, password []byte, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 || len(parts[2]) == 0 {
		return "", "", nil, errSASLMalformed
	}
	return string(parts[0]), string(parts[1]), parts[2], nil
}

// ParseOAuthBearer extracts the bearer token from an OAUTHBEARER client
// initial response (RFC 7628 §3.1): a GS2 header without channel binding
// ("n," or "y,", an optional a=authzid, ","), then key=value pairs each
// ended by 0x01, the last one followed by a second 0x01. The auth pair
// must be "Bearer <token>"; other keys (Kafka SASL extensions) are
// accepted and ignored.
func ParseOAuthBearer(msg []byte) (string, error) {
	rest, ok := bytes.CutPrefix(msg, []byte("n,"))
	if !ok {
		if rest, ok = bytes.CutPrefix(msg, []byte("y,")); !ok {
			return "", errSASLMalformed
		}
	}
	authz, rest, ok := bytes.Cut(rest, []byte(","))
	if !ok || len(authz) > 0 && !bytes.HasPrefix(authz, []byte("a=")) {
		return "", errSASLMalformed
	}
	kvs, ok := bytes.CutPrefix(rest, []byte{1})
	if !ok || !bytes.HasSuffix(kvs, []byte{1, 1}) {
		return "", errSASLMalformed
	}
	kvs = kvs[:len(kvs)-2]
	var token string
	found := false
	for _, kv := range bytes.Split(kvs, []byte{1}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok || len(k) == 0 {
			return "", errSASLMalformed
		}
		if string(k) != "auth" {
			continue
		}
		if found {
			return "", errSASLMalformed
		}
		scheme, t, ok := bytes.Cut(v, []byte(" "))
		if !ok || !bytes.EqualFold(scheme, []byte("Bearer")) || len(t) == 0 || bytes.ContainsAny(t, " \x00") {
			return "", errSASLMalformed
		}
		token, found = string(t), true
	}
	if !found {
		return "", errSASLMalformed
	}
	return token, nil
}

// readRawToken reads one bare SASL token of a v0 exchange.
func readRawToken(r io.Reader, max int) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || int(n) > max {
		return nil, fmt.Errorf("%w: SASL token of %d bytes (max %d)", ErrFrameTooLarge, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated SASL token: %v", ErrMalformed, err)
	}
	return b, nil
}

// appendRawToken frames a bare SASL token of a v0 exchange.
func appendRawToken(dst, tok []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(tok)))
	return append(dst, tok...)
}
