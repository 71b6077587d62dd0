package kafkatest

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
)

// Security is a test identity store: a password file and an HS256 JWT
// secret in a temporary directory.
type Security struct {
	UsersFile  string
	SecretFile string
	Secret     []byte
}

// NewSecurity writes a password file where each user's password is
// Password(user), and a JWT secret.
func NewSecurity(t testing.TB, users ...string) *Security {
	t.Helper()
	dir := t.TempDir()
	s := &Security{UsersFile: filepath.Join(dir, "passwd"), SecretFile: filepath.Join(dir, "jwt.secret"),
		Secret: []byte("kafkatest-jwt-secret-of-at-least-32-bytes")}
	if err := os.WriteFile(s.UsersFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := auth.SetPassword(s.UsersFile, u, []byte(Password(u))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.SecretFile, s.Secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// Password is a test user's password.
func Password(user string) string { return user + "-pw" }

// Authority opens an Authority over the users and the secret with the
// given rules; anonymous clients are refused.
func (s *Security) Authority(t testing.TB, rules ...auth.Rule) *auth.Authority {
	t.Helper()
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: s.UsersFile,
		JWT: auth.JWTConfig{SecretFile: s.SecretFile}, ACL: rules}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Token is an HS256 JWT for sub signed with the secret, expiring at exp.
func (s *Security) Token(t testing.TB, sub string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "iat": time.Now().Unix()}).
		SignedString(s.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// SASL runs a SaslHandshake v1 and one SaslAuthenticate with msg over c
// and returns both responses.
func (c *Conn) SASL(mechanism string, version int16, msg []byte) (*kmsg.SASLHandshakeResponse, *kmsg.SASLAuthenticateResponse) {
	c.T.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mechanism
	hr := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse)
	if hr.ErrorCode != 0 {
		return hr, nil
	}
	ar := kmsg.NewPtrSASLAuthenticateRequest()
	ar.Version, ar.SASLAuthBytes = version, msg
	return hr, c.RoundTrip(ar).(*kmsg.SASLAuthenticateResponse)
}

// Plain is a SASL PLAIN message.
func Plain(user, password string) []byte { return []byte("\x00" + user + "\x00" + password) }

// OAuthBearer is an OAUTHBEARER client initial response (RFC 7628).
func OAuthBearer(token string) []byte { return []byte("n,,\x01auth=Bearer " + token + "\x01\x01") }
