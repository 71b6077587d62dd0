package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/listen"
)

var saslTestAPIs = APIs{ApiVersionsKey: ApiVersionsVersions, MetadataKey: {0, 12},
	SaslHandshakeKey: SaslHandshakeVersions, SaslAuthenticateKey: SaslAuthenticateVersions}

// whoami answers ApiVersions, and Metadata with the connection's
// principal as the cluster id and the server as the only broker.
type whoami struct{ s **Server }

func (w whoami) Handle(ctx context.Context, req *Request) (kmsg.Response, bool) {
	if r, ok := req.Body.(*kmsg.ApiVersionsRequest); ok {
		return HandleApiVersions(req, r, saslTestAPIs), false
	}
	resp := req.Body.(*kmsg.MetadataRequest).ResponseKind().(*kmsg.MetadataResponse)
	resp.ClusterID = kmsg.StringPtr(req.Principal.String())
	b := kmsg.NewMetadataResponseBroker()
	b.Host, b.Port = (*w.s).Advertised()
	resp.Brokers = append(resp.Brokers, b)
	return resp, false
}

func startSASLServer(t *testing.T, a *auth.Authority, handshake time.Duration) *Server {
	t.Helper()
	return startSASLServerWith(t, a, listen.Config{HandshakeTimeout: handshake})
}

func startSASLServerWith(t *testing.T, a *auth.Authority, lim listen.Config) *Server {
	t.Helper()
	var s *Server
	s, err := NewServer(Config{Addr: "127.0.0.1:0", Auth: a, Limits: lim,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, "kafka-test", saslTestAPIs, whoami{&s})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func whoAmI(c *kafkatest.Conn) string {
	c.T.Helper()
	return *c.RoundTrip(&kmsg.MetadataRequest{Version: 12}).(*kmsg.MetadataResponse).ClusterID
}

// closedSilently asserts the server closes c without writing a byte.
func closedSilently(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("server wrote %d bytes before closing", len(b))
	}
	if err != nil && !kafkatest.IsConnReset(err) {
		t.Fatalf("connection not closed: %v", err)
	}
}

// TestSASLRequired: with anonymous clients refused, ApiVersions and SASL
// are answered before authentication, anything else closes the
// connection with nothing written; a client that never finishes SASL is
// closed at the handshake deadline.
func TestSASLRequired(t *testing.T) {
	sec := kafkatest.NewSecurity(t, "alice")
	s := startSASLServer(t, sec.Authority(t), 500*time.Millisecond)

	c := kafkatest.Dial(t, s.Addr())
	av := c.RoundTrip(&kmsg.ApiVersionsRequest{Version: 3, ClientSoftwareName: "t", ClientSoftwareVersion: "1"}).(*kmsg.ApiVersionsResponse)
	keys := map[int16]bool{}
	for _, k := range av.ApiKeys {
		keys[k.ApiKey] = true
	}
	if !keys[SaslHandshakeKey] || !keys[SaslAuthenticateKey] {
		t.Fatalf("SASL not advertised: %v", keys)
	}
	c.C.Write(kafkatest.EncodeRequest(2, "c", &kmsg.MetadataRequest{Version: 12}))
	closedSilently(t, c.C)

	stalled := kafkatest.Dial(t, s.Addr())
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	stalled.RoundTrip(hs)
	start := time.Now()
	closedSilently(t, stalled.C)
	if time.Since(start) > 3*time.Second {
		t.Fatal("a client that never finished SASL was kept past the handshake deadline")
	}
	if st := s.Stats(); st.Unauthenticated != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSASLPlain: PLAIN over SaslAuthenticate v0–v2 and over a v0
// handshake's bare tokens; wrong passwords, unknown mechanisms and
// out-of-order requests get Kafka's errors and a closed connection.
func TestSASLPlain(t *testing.T) {
	sec := kafkatest.NewSecurity(t, "alice", "bob")
	s := startSASLServer(t, sec.Authority(t), 0)
	for _, v := range []int16{0, 1, 2} {
		c := kafkatest.Dial(t, s.Addr())
		if _, ar := c.SASL("PLAIN", v, kafkatest.Plain("alice", "alice-pw")); ar.ErrorCode != 0 || ar.SessionLifetimeMillis != 0 {
			t.Fatalf("v%d: %+v", v, ar)
		}
		if got := whoAmI(c); got != "alice" {
			t.Fatalf("v%d: principal %q", v, got)
		}
		// Re-authentication (KIP-368) keeps the principal; another one is refused.
		if _, ar := c.SASL("PLAIN", v, kafkatest.Plain("alice", "alice-pw")); ar.ErrorCode != 0 {
			t.Fatalf("v%d re-auth: %+v", v, ar)
		}
		if _, ar := c.SASL("PLAIN", v, kafkatest.Plain("bob", "bob-pw")); ar.ErrorCode != CodeSaslAuthenticationFailed {
			t.Fatalf("v%d re-auth as bob: %+v", v, ar)
		}
		c.ExpectClosed()
	}

	bad := kafkatest.Dial(t, s.Addr())
	_, ar := bad.SASL("PLAIN", 2, kafkatest.Plain("alice", "wrong"))
	if ar.ErrorCode != CodeSaslAuthenticationFailed || ar.ErrorMessage == nil || strings.Contains(*ar.ErrorMessage, "password") {
		t.Fatalf("wrong password: %+v", ar)
	}
	bad.ExpectClosed()

	mech := kafkatest.Dial(t, s.Addr())
	hr, _ := mech.SASL("GSSAPI", 1, nil)
	if hr.ErrorCode != CodeUnsupportedSaslMechanism || strings.Join(hr.SupportedMechanisms, ",") != "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER" {
		t.Fatalf("GSSAPI: %+v", hr)
	}
	mech.ExpectClosed()

	early := kafkatest.Dial(t, s.Addr())
	if r := early.RoundTrip(&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: kafkatest.Plain("alice", "alice-pw")}).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != CodeIllegalSaslState {
		t.Fatalf("authenticate without handshake: %+v", r)
	}
	early.ExpectClosed()

	huge := kafkatest.Dial(t, s.Addr())
	if _, ar := huge.SASL("PLAIN", 1, kafkatest.Plain("alice", strings.Repeat("x", MaxSASLMessageBytes))); ar.ErrorCode != CodeSaslAuthenticationFailed {
		t.Fatalf("oversized message: %+v", ar)
	}
	huge.ExpectClosed()

	// Handshake v0: the PLAIN message as a bare token, answered by an
	// empty one (sarama's SASLHandshakeV0).
	raw := kafkatest.Dial(t, s.Addr())
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if r := raw.RoundTrip(hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("handshake v0: %+v", r)
	}
	raw.C.Write(appendRawToken(nil, kafkatest.Plain("bob", "bob-pw")))
	var reply [4]byte
	if _, err := io.ReadFull(raw.C, reply[:]); err != nil || binary.BigEndian.Uint32(reply[:]) != 0 {
		t.Fatalf("v0 token reply %x %v", reply, err)
	}
	if got := whoAmI(raw); got != "bob" {
		t.Fatalf("v0: principal %q", got)
	}
	rawBad := kafkatest.Dial(t, s.Addr())
	rawBad.RoundTrip(hs)
	rawBad.C.Write(appendRawToken(nil, kafkatest.Plain("bob", "nope")))
	closedSilently(t, rawBad.C)
}

// TestSASLOAuthBearer: a valid token authenticates with its remaining
// lifetime as the session lifetime, and the connection ends with the
// token; a bad or expired token gets RFC 7628's error challenge, then
// SASL_AUTHENTICATION_FAILED.
func TestSASLOAuthBearer(t *testing.T) {
	sec := kafkatest.NewSecurity(t)
	s := startSASLServer(t, sec.Authority(t), 0)

	c := kafkatest.Dial(t, s.Addr())
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	_, ar := c.SASL("OAUTHBEARER", 2, kafkatest.OAuthBearer(sec.Token(t, "dave", exp)))
	if ar.ErrorCode != 0 || ar.SessionLifetimeMillis <= 0 || ar.SessionLifetimeMillis > 2000 {
		t.Fatalf("token: %+v", ar)
	}
	if got := whoAmI(c); got != "dave" {
		t.Fatalf("principal %q", got)
	}
	// Idle past the token's expiry: closed by the server.
	c.C.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.C.Read(make([]byte, 1)); err != io.EOF && !kafkatest.IsConnReset(err) {
		t.Fatalf("connection kept past the token's expiry: %v", err)
	}

	for name, tok := range map[string]string{
		"expired": sec.Token(t, "dave", time.Now().Add(-10*time.Second)), // inside the verifier's leeway, still refused
		"forged":  sec.Token(t, "dave", time.Now().Add(time.Hour)) + "x",
	} {
		c := kafkatest.Dial(t, s.Addr())
		_, ar := c.SASL("OAUTHBEARER", 1, kafkatest.OAuthBearer(tok))
		if ar.ErrorCode != 0 || string(ar.SASLAuthBytes) != oauthInvalidToken {
			t.Fatalf("%s: %+v", name, ar)
		}
		r := c.RoundTrip(&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: []byte{1}}).(*kmsg.SASLAuthenticateResponse)
		if r.ErrorCode != CodeSaslAuthenticationFailed {
			t.Fatalf("%s after the challenge: %+v", name, r)
		}
		c.ExpectClosed()
	}
	c = kafkatest.Dial(t, s.Addr())
	if _, ar := c.SASL("OAUTHBEARER", 1, []byte("not a gs2 header")); ar.ErrorCode != CodeSaslAuthenticationFailed {
		t.Fatalf("malformed: %+v", ar)
	}

	// A JWT as the PLAIN password is a token session too.
	c = kafkatest.Dial(t, s.Addr())
	_, ar = c.SASL("PLAIN", 1, kafkatest.Plain("dave", sec.Token(t, "dave", time.Now().Add(time.Hour))))
	if ar.ErrorCode != 0 || ar.SessionLifetimeMillis <= 0 {
		t.Fatalf("JWT as PLAIN password: %+v", ar)
	}
}

// TestSASLAnonymousAllowed: with anonymous access on, a client that does
// not authenticate is anonymous, and one that does gets its principal.
func TestSASLAnonymousAllowed(t *testing.T) {
	sec := kafkatest.NewSecurity(t, "alice")
	yes := true
	a, err := auth.Open(auth.Config{AllowAnonymous: &yes, UsersFile: sec.UsersFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startSASLServer(t, a, 0)
	if got := whoAmI(kafkatest.Dial(t, s.Addr())); got != "anonymous" {
		t.Fatalf("principal %q", got)
	}
	c := kafkatest.Dial(t, s.Addr())
	c.SASL("PLAIN", 1, kafkatest.Plain("alice", "alice-pw"))
	if got := whoAmI(c); got != "alice" {
		t.Fatalf("principal %q", got)
	}
}

func TestParseSASLMessages(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		token string
	}{
		{"n,,\x01auth=Bearer abc.def.ghi\x01\x01", "abc.def.ghi"},
		{"n,a=dave,\x01host=x\x01auth=bearer tok\x01port=1\x01\x01", "tok"},
		{"n,,\x01auth=Bearer \x01\x01", ""},
		{"n,,\x01auth=Basic abc\x01\x01", ""},
		{"n,,\x01auth=Bearer a\x01auth=Bearer b\x01\x01", ""},
		{"p=x,,\x01auth=Bearer a\x01\x01", ""},
		{"n,,\x01auth=Bearer a\x01", ""},
	} {
		tok, err := ParseOAuthBearer([]byte(tc.msg))
		if tok != tc.token || (err == nil) != (tc.token != "") {
			t.Errorf("%q: %q %v", tc.msg, tok, err)
		}
	}
	if z, u, p, err := ParsePlain([]byte("z\x00u\x00p")); err != nil || z != "z" || u != "u" || string(p) != "p" {
		t.Fatalf("plain: %q %q %q %v", z, u, p, err)
	}
	for _, bad := range []string{"u\x00p", "\x00u\x00", "\x00u\x00p\x00q"} {
		if _, _, _, err := ParsePlain([]byte(bad)); err == nil {
			t.Errorf("plain %q accepted", bad)
		}
	}
}

// FuzzParseSASL: the SASL message decoders never panic, and what they
// accept is consistent with its encoding.
func FuzzParseSASL(f *testing.F) {
	for _, s := range saslSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if z, u, p, err := ParsePlain(msg); err == nil {
			if string(msg) != z+"\x00"+u+"\x00"+string(p) || len(p) == 0 {
				t.Fatalf("plain %q -> %q %q %q", msg, z, u, p)
			}
		}
		if tok, err := ParseOAuthBearer(msg); err == nil {
			if tok == "" || strings.ContainsAny(tok, " \x00\x01") || !strings.Contains(string(msg), "Bearer "+tok+"\x01") &&
				!strings.Contains(strings.ToLower(string(msg)), "bearer "+strings.ToLower(tok)+"\x01") {
				t.Fatalf("oauth %q -> %q", msg, tok)
			}
		}
	})
}

func saslSeeds() map[string][]byte {
	return map[string][]byte{
		"plain":         kafkatest.Plain("alice", "alice-pw"),
		"plain_authzid": []byte("alice\x00alice\x00pw"),
		"plain_short":   []byte("\x00u"),
		"oauth":         kafkatest.OAuthBearer("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkYXZlIn0.sig"),
		"oauth_ext":     []byte("n,a=dave,\x01host=x\x01auth=Bearer tok\x01\x01"),
		"oauth_kvsep":   {1},
		"scram_first":   []byte("n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
	}
}

// TestWriteSASLFuzzSeeds regenerates testdata/fuzz/FuzzParseSASL with
// `WRITE_SASL_SEEDS=1 go test ./kafka -run TestWriteSASLFuzzSeeds`.
func TestWriteSASLFuzzSeeds(t *testing.T) {
	if os.Getenv("WRITE_SASL_SEEDS") == "" {
		t.Skip("set WRITE_SASL_SEEDS=1 to regenerate testdata/fuzz/FuzzParseSASL")
	}
	kafkatest.WriteFuzzSeeds(t, "FuzzParseSASL", saslSeeds())
}

// TestSASLLibrdkafka: kcat (librdkafka) authenticates with PLAIN,
// SCRAM-SHA-256 and SCRAM-SHA-512 (librdkafka 2.0 repeats its client
// nonce in the client-final message; Kafka accepts that, so must we),
// and is refused with a wrong password.
func TestSASLLibrdkafka(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat (librdkafka) is required for this test: install the Debian package kcat (/usr/bin/kcat): %v", err)
	}
	sec := kafkatest.NewSecurity(t, "alice")
	s := startSASLServer(t, sec.Authority(t), 0)
	run := func(mech, pass string) (string, error) {
		out, err := exec.Command(kcat, "-b", s.Addr(), "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms="+mech,
			"-X", "sasl.username=alice", "-X", "sasl.password="+pass, "-m", "5", "-L").CombinedOutput()
		return string(out), err
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "SCRAM-SHA-512", "SCRAM-SHA-512"} {
		if out, err := run(mech, "alice-pw"); err != nil || !strings.Contains(out, "Metadata for all topics") {
			t.Fatalf("%s: %v\n%s", mech, err, out)
		}
	}
	if out, err := run("SCRAM-SHA-512", "wrong"); err == nil || !strings.Contains(out, "Authentication failed") {
		t.Fatalf("wrong password: %v\n%s", err, out)
	}
}

// TestSASLClientCertificate: over TLS with client certificates, a client
// that does not use SASL is its certificate's subject; one without a
// certificate is refused as anonymous; SASL still decides when used.
func TestSASLClientCertificate(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	tl, err := listen.NewTLS(listen.TLSConfig{TLSFiles: listen.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.Files()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec := kafkatest.NewSecurity(t, "alice")
	s := startSASLServerWith(t, sec.Authority(t), listen.Config{TLS: tl.Server("kafka")})
	dial := func(certs ...tls.Certificate) *kafkatest.Conn {
		c, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: ca.Pool, Certificates: certs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &kafkatest.Conn{T: t, C: c}
	}
	if got := whoAmI(dial(ca.Client(t, "sensor-1").TLS(t))); got != "sensor-1" {
		t.Fatalf("certificate principal %q", got)
	}
	withSASL := dial(ca.Client(t, "sensor-1").TLS(t))
	withSASL.SASL("PLAIN", 1, kafkatest.Plain("alice", "alice-pw"))
	if got := whoAmI(withSASL); got != "alice" {
		t.Fatalf("SASL over a certificate: principal %q", got)
	}
	none := dial()
	none.C.Write(kafkatest.EncodeRequest(1, "c", &kmsg.MetadataRequest{Version: 12}))
	closedSilently(t, none.C)
}
