package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
)

// SCRAM is the server side of one SCRAM-SHA-256 or SCRAM-SHA-512 exchange
// (RFC 5802, RFC 7677) as Kafka's SASL carries it: Step takes the
// client-first message and answers the server-first one, then takes the
// client-final message and answers the server-final one.
type SCRAM struct {
	a         *Authority
	c         Client
	mech      string
	newHash   func() hash.Hash
	step      int
	user      string
	cred      *SCRAMCredential
	known     bool
	unknown   string // the audit reason when !known
	nonce     string
	firstBare string
	srvFirst  string
	principal Principal
}

// maxSCRAMMessage caps a SCRAM message.
const maxSCRAMMessage = 4 << 10

// NewSCRAM starts an exchange for mechanism (SCRAM-SHA-256 or
// SCRAM-SHA-512).
func (a *Authority) NewSCRAM(c Client, mechanism string) (*SCRAM, error) {
	s := &SCRAM{a: a, c: c, mech: mechanism}
	switch mechanism {
	case "SCRAM-SHA-256":
		s.newHash = sha256.New
	case "SCRAM-SHA-512":
		s.newHash = sha512.New
	default:
		return nil, fmt.Errorf("auth: unsupported SASL mechanism %q", mechanism)
	}
	return s, nil
}

var errSCRAMSyntax = errors.New("malformed SCRAM message")

// Step handles the next client message. done is true after the
// server-final message (the principal is authenticated); an error ends the
// exchange (audited): ErrBadCredentials for a wrong proof or unknown user.
func (s *SCRAM) Step(msg []byte) (reply []byte, done bool, err error) {
	if len(msg) > maxSCRAMMessage {
		return s.failed("scram_message_too_large")
	}
	switch s.step {
	case 0:
		s.step++
		return s.first(string(msg))
	case 1:
		s.step++
		return s.final(string(msg))
	}
	return nil, false, errors.New("auth: SCRAM exchange already finished")
}

func (s *SCRAM) failed(reason string) ([]byte, bool, error) {
	s.a.fail(s.c, s.user, reason)
	s.step = 3
	return nil, false, ErrBadCredentials
}

func (s *SCRAM) first(msg string) ([]byte, bool, error) {
	// gs2-header: "n,," or "y,," (no channel binding), optional a=authzid.
	cb, rest, ok := strings.Cut(msg, ",")
	if !ok || (cb != "n" && cb != "y") {
		return s.failed("scram_channel_binding")
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return s.failed("scram_syntax")
	}
	attrs, err := scramAttrs(bare)
	if err != nil || attrs["n"] == "" || attrs["r"] == "" || attrs["m"] != "" {
		return s.failed("scram_syntax")
	}
	user, err := scramUnescape(attrs["n"])
	if err != nil {
		return s.failed("scram_syntax")
	}
	if authz != "" {
		if z, _ := scramUnescape(strings.TrimPrefix(authz, "a=")); z != user {
			return s.failed("scram_authzid")
		}
	}
	if attrs["tokenauth"] == "true" {
		return s.failed("scram_delegation_token")
	}
	s.user = user
	if s.a.throttled(s.c, user) {
		s.step = 3
		return nil, false, ErrBadCredentials
	}
	s.cred, s.unknown = s.a.scramCredential(s.mech, user)
	s.known = s.unknown == ""
	if !s.known {
		s.cred = s.fakeCredential(user)
	}
	nb := make([]byte, 18)
	rand.Read(nb)
	s.nonce = attrs["r"] + base64.RawStdEncoding.EncodeToString(nb)
	s.firstBare = bare
	s.srvFirst = fmt.Sprintf("r=%s,s=%s,i=%d", s.nonce, base64.StdEncoding.EncodeToString(s.cred.Salt), s.cred.Iterations)
	return []byte(s.srvFirst), false, nil
}

// fakeCredential answers for an unknown user with a salt that stays the
// same for the same name, so the answer does not tell the user is unknown.
func (s *SCRAM) fakeCredential(user string) *SCRAMCredential {
	s.a.mu.RLock()
	key := s.a.keys.issue
	s.a.mu.RUnlock()
	m := hmac.New(sha256.New, key)
	m.Write([]byte("scram-salt:" + s.mech + ":" + user))
	return &SCRAMCredential{Salt: m.Sum(nil)[:saltLen], Iterations: DefaultIterations,
		StoredKey: make([]byte, s.newHash().Size()), ServerKey: make([]byte, s.newHash().Size())}
}

func (s *SCRAM) final(msg string) ([]byte, bool, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return s.failed("scram_syntax")
	}
	withoutProof := msg[:i]
	attrs, err := scramAttrs(withoutProof)
	// The nonce must end with ours (client part and server part), as
	// Kafka's ScramSaslServer checks: librdkafka 2.0 sends its client
	// nonce once more in front of it, and Kafka brokers accept that. The
	// AuthMessage is computed over the message as sent, so the proof
	// still covers our fresh server nonce.
	if err != nil || !strings.HasSuffix(attrs["r"], s.nonce) || attrs["c"] == "" {
		return s.failed("scram_nonce")
	}
	if cbind, err := base64.StdEncoding.DecodeString(attrs["c"]); err != nil || !bytes.HasPrefix(cbind, []byte("n,")) && !bytes.HasPrefix(cbind, []byte("y,")) {
		return s.failed("scram_channel_binding")
	}
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil || len(proof) != s.newHash().Size() {
		return s.failed("scram_syntax")
	}
	authMsg := s.firstBare + "," + s.srvFirst + "," + withoutProof
	sig := hmacSum(s.newHash, s.cred.StoredKey, []byte(authMsg))
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ sig[j]
	}
	h := s.newHash()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), s.cred.StoredKey) != 1 || !s.known {
		if !s.known {
			return s.failed(s.unknown)
		}
		return s.failed("bad_password")
	}
	s.principal = Principal{Name: s.user, Method: MethodPassword}
	s.a.throttle.succeeded(userKey(s.user))
	s.a.metrics.success(s.c.Protocol, MethodPassword)
	srvSig := hmacSum(s.newHash, s.cred.ServerKey, []byte(authMsg))
	return []byte("v=" + base64.StdEncoding.EncodeToString(srvSig)), true, nil
}

// Principal is the authenticated principal once Step reported done.
func (s *SCRAM) Principal() Principal { return s.principal }

func scramAttrs(msg string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.Split(msg, ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, errSCRAMSyntax
		}
		if _, dup := out[k]; dup {
			return nil, errSCRAMSyntax
		}
		out[k] = v
	}
	return out, nil
}

func scramUnescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", errSCRAMSyntax
		}
		i += 2
	}
	return b.String(), nil
}
