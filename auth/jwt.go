package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxTokenBytes caps a token's size before it is parsed.
const maxTokenBytes = 16 << 10

// keySet holds the keys tokens are verified with.
type keySet struct {
	secret []byte         // HS256 from jwt.secret_file; also signs issued tokens
	issue  []byte         // the key issued tokens are signed with (secret, or a per-process one)
	public []any          // *rsa.PublicKey, *ecdsa.PublicKey from public_key_files
	byKid  map[string]any // from the JWKS file
}

func loadKeys(cfg JWTConfig) (*keySet, error) {
	ks := &keySet{byKid: map[string]any{}}
	if cfg.SecretFile != "" {
		b, err := os.ReadFile(cfg.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("security.jwt.secret_file: %w", err)
		}
		ks.secret = bytes.TrimRight(b, "\r\n")
		if len(ks.secret) < 32 {
			return nil, fmt.Errorf("security.jwt.secret_file %s: the secret has %d bytes; want at least 32", cfg.SecretFile, len(ks.secret))
		}
		ks.issue = ks.secret
	} else {
		ks.issue = make([]byte, 32)
		rand.Read(ks.issue)
	}
	for _, f := range cfg.PublicKeyFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("security.jwt.public_key_files: %w", err)
		}
		k, err := parsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("security.jwt.public_key_files %s: %w", f, err)
		}
		ks.public = append(ks.public, k)
	}
	if cfg.JWKSFile != "" {
		b, err := os.ReadFile(cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("security.jwt.jwks_file: %w", err)
		}
		if ks.byKid, err = parseJWKS(b); err != nil {
			return nil, fmt.Errorf("security.jwt.jwks_file %s: %w", cfg.JWKSFile, err)
		}
	}
	return ks, nil
}

func parsePublicKey(b []byte) (any, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	if blk.Type == "CERTIFICATE" {
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		return checkKey(c.PublicKey)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		if rk, err2 := x509.ParsePKCS1PublicKey(blk.Bytes); err2 == nil {
			return rk, nil
		}
		return nil, err
	}
	return checkKey(k)
}

func checkKey(k any) (any, error) {
	switch k.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T (want RSA or ECDSA)", k)
}

// parseJWKS reads the RSA and EC keys of a JSON Web Key Set.
func parseJWKS(b []byte) (map[string]any, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Use, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	out := map[string]any{}
	dec := base64.RawURLEncoding
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := dec.DecodeString(k.N)
			e, err2 := dec.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(e) > 4 || len(n) < 256 {
				return nil, fmt.Errorf("key %d (%q): bad RSA n or e (or shorter than 2048 bits)", i, k.Kid)
			}
			out[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			if k.Crv != "P-256" {
				return nil, fmt.Errorf("key %d (%q): curve %q not supported (want P-256)", i, k.Kid, k.Crv)
			}
			x, err1 := dec.DecodeString(k.X)
			y, err2 := dec.DecodeString(k.Y)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("key %d (%q): bad x or y", i, k.Kid)
			}
			pk := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
			if _, err := pk.ECDH(); err != nil {
				return nil, fmt.Errorf("key %d (%q): point not on the curve", i, k.Kid)
			}
			out[k.Kid] = pk
		}
	}
	return out, nil
}

func (a *Authority) hasKeys() bool { return a.cfg.JWT.Enabled() }

// looksLikeJWT tells whether b has a JWT's shape (three base64url parts
// of which the first is a JSON header).
func looksLikeJWT(b []byte) bool {
	if len(b) < 10 || len(b) > maxTokenBytes || bytes.Count(b, []byte(".")) != 2 {
		return false
	}
	h, _, _ := bytes.Cut(b, []byte("."))
	raw, err := base64.RawURLEncoding.DecodeString(string(h))
	return err == nil && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{"))
}

// Token verifies a JWT: signature (HS256 with the secret or this
// process's own issuing key, RS256/ES256 with the public keys or the
// JWKS key its kid names), expiry (required unless
// jwt.allow_without_exp) and not-before (with 30s leeway), and the
// issuer and audience when configured. The principal is the
// configured claim (default sub).
//
// A token IssueToken made (it carries userClaim) is valid only while its
// principal's entry in the password file is the one it was issued for:
// deleting the user or changing its password revokes it.
func (a *Authority) Token(c Client, token string) (Principal, error) {
	if a.throttled(c, "") {
		return Principal{}, ErrBadCredentials
	}
	v, reason := a.verifyToken(token)
	if reason != "" {
		a.fail(c, "", reason) // a token failure throttles its address, not a user name it may not prove
		return Principal{}, ErrBadCredentials
	}
	a.metrics.success(c.Protocol, MethodToken)
	p := v.p
	p.Expires = v.expires
	return p, nil
}

// ExchangeToken verifies subject for a token exchange (the REST catalog's
// refresh): only a token this Authority issued (IssueToken), whose user
// still exists with the same password, is exchanged; expires is its
// expiry, which the new token must not outlive. Failures are audited.
func (a *Authority) ExchangeToken(c Client, subject string) (p Principal, expires time.Time, err error) {
	if a.throttled(c, "") {
		return Principal{}, time.Time{}, ErrBadCredentials
	}
	v, reason := a.verifyToken(subject)
	if reason == "" && !v.own {
		reason = "token_exchange_not_ours"
	}
	if reason != "" {
		a.fail(c, "", reason) // a token failure throttles its address, not a user name it may not prove
		return Principal{}, time.Time{}, ErrBadCredentials
	}
	a.metrics.success(c.Protocol, MethodToken)
	p = v.p
	p.Expires = v.expires
	return p, v.expires, nil
}

// userClaim is the claim of the tokens IssueToken makes that binds them
// to the password-file entry of their principal (userFingerprint).
const userClaim = "tributary_user"

// userFingerprint binds a token to user's entry line: a MAC with the
// issuing key, so that only this Authority (or a replica sharing
// jwt.secret_file) makes one, and a new line (password changed) or none
// (user deleted) no longer matches.
func userFingerprint(key []byte, user, line string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%d:%s:%s", len(user), user, line)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// verified is what verifyToken found.
type verified struct {
	p       Principal
	own     bool      // issued by IssueToken (carries a current userClaim)
	expires time.Time // the exp claim; zero without one
}

func (a *Authority) verifyToken(token string) (verified, string) {
	p, claims, reason := a.parseToken(token)
	if reason != "" {
		return verified{p: p}, reason
	}
	v := verified{p: p}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		v.expires = exp.Time
		// The leeway is for a token not yet valid by our clock, not for
		// one expired: a connection it opened would end at once.
		if !time.Now().Before(v.expires) {
			return v, "token_expired"
		}
	}
	if fp, ok := claims[userClaim]; ok {
		s, _ := fp.(string)
		a.refreshUsers()
		a.mu.RLock()
		e, key := a.users[p.Name], a.keys.issue
		a.mu.RUnlock()
		if e == nil || s == "" || !hmac.Equal([]byte(s), []byte(userFingerprint(key, p.Name, e.line))) {
			return v, "token_revoked"
		}
		v.own = true
	}
	return v, ""
}

func (a *Authority) parseToken(token string) (Principal, jwt.MapClaims, string) {
	if len(token) > maxTokenBytes {
		return Principal{}, nil, "token_too_large"
	}
	a.mu.RLock()
	ks := a.keys
	a.mu.RUnlock()
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{"HS256", "RS256", "ES256"}), jwt.WithLeeway(30 * time.Second)}
	if !a.cfg.JWT.AllowWithoutExp {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if a.cfg.JWT.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(a.cfg.JWT.Issuer))
	}
	if a.cfg.JWT.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.cfg.JWT.Audience))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case "HS256":
			if ks.secret != nil {
				return ks.secret, nil
			}
			return ks.issue, nil
		}
		if kid, _ := t.Header["kid"].(string); kid != "" {
			if k, ok := ks.byKid[kid]; ok {
				return k, nil
			}
		}
		var keys []jwt.VerificationKey
		for _, k := range ks.public {
			switch t.Method.Alg() {
			case "RS256":
				if _, ok := k.(*rsa.PublicKey); ok {
					keys = append(keys, k)
				}
			case "ES256":
				if _, ok := k.(*ecdsa.PublicKey); ok {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 {
			return nil, errNoKeys
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return Principal{}, nil, "token_without_exp"
	case errors.Is(err, jwt.ErrTokenExpired):
		return Principal{}, nil, "token_expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return Principal{}, nil, "token_not_valid_yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), errors.Is(err, jwt.ErrTokenInvalidAudience):
		return Principal{}, nil, "token_wrong_issuer_or_audience"
	case err != nil:
		return Principal{}, nil, "bad_token"
	}
	claim := a.cfg.JWT.PrincipalClaim
	if claim == "" {
		claim = "sub"
	}
	name, _ := claims[claim].(string)
	if name == "" || name == anonymousName || strings.ContainsAny(name, "\n\r") {
		return Principal{}, nil, "token_without_principal"
	}
	return Principal{Name: name, Method: MethodToken}, claims, ""
}

// IssueToken signs a token for p, a user of the password file, valid for
// ttl (0 = the configured token_ttl) but never beyond notAfter when it is
// set (a token exchange: no lifetime beyond the subject token's). It is
// HS256 with jwt.secret_file's secret when set (so every replica of a
// stateless cloud server accepts it), else with a key of this process's
// own, and carries userClaim, so that it is valid only while the user's
// entry stays as it was (see Token).
func (a *Authority) IssueToken(p Principal, ttl time.Duration, notAfter time.Time) (string, time.Time, error) {
	if p.Name == "" {
		return "", time.Time{}, errors.New("auth: no token for an anonymous principal")
	}
	if ttl <= 0 {
		ttl = a.cfg.TokenTTL
	}
	a.refreshUsers()
	a.mu.RLock()
	key, e := a.keys.issue, a.users[p.Name]
	a.mu.RUnlock()
	if e == nil {
		return "", time.Time{}, fmt.Errorf("auth: no token for %q: not a user of security.users_file", p.Name)
	}
	now := time.Now()
	exp := now.Add(ttl)
	if !notAfter.IsZero() && exp.After(notAfter) {
		exp = notAfter
	}
	if !exp.After(now) {
		return "", time.Time{}, errors.New("auth: no token: its subject token has expired")
	}
	claims := jwt.MapClaims{"sub": p.Name, "iat": now.Unix(), "exp": exp.Unix(), userClaim: userFingerprint(key, p.Name, e.line)}
	if c := a.cfg.JWT.PrincipalClaim; c != "" && c != "sub" {
		claims[c] = p.Name
	}
	if a.cfg.JWT.Issuer != "" {
		claims["iss"] = a.cfg.JWT.Issuer
	}
	if a.cfg.JWT.Audience != "" {
		claims["aud"] = a.cfg.JWT.Audience
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	return s, time.Unix(exp.Unix(), 0), err
}
