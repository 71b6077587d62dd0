package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary-io/tributary"
)

var cl = Client{Protocol: "test", Remote: "127.0.0.1:1"}

func open(t *testing.T, cfg Config) *Authority {
	t.Helper()
	a, err := Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A file mosquitto_passwd wrote (alice:secret) verifies.
func TestMosquittoPasswordFile(t *testing.T) {
	a := open(t, Config{UsersFile: "testdata/mosquitto.passwd"})
	if a.AnonymousAllowed() {
		t.Fatal("anonymous allowed with a users file and no allow_anonymous")
	}
	p, err := a.Password(cl, "alice", []byte("secret"))
	if err != nil || p.Name != "alice" || p.Method != MethodPassword {
		t.Fatalf("alice: %+v %v", p, err)
	}
	for _, c := range []struct{ user, pw string }{{"alice", "wrong"}, {"bob", "secret"}, {"", "x"}} {
		if _, err := a.Password(cl, c.user, []byte(c.pw)); !errors.Is(err, ErrBadCredentials) || !errors.Is(err, tributary.ErrUnauthorized) {
			t.Fatalf("%s/%s: %v", c.user, c.pw, err)
		}
	}
	if _, err := a.Password(cl, "", nil); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("no credentials: %v", err)
	}
}

// SetPassword writes lines mosquitto can read and that Tributary verifies;
// a changed file is picked up without a restart; DeletePassword removes.
func TestSetPasswordAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := SetPassword(path, "dev1", []byte("pw1")); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	a := open(t, Config{UsersFile: path})
	if _, err := a.Password(cl, "dev1", []byte("pw1")); err != nil {
		t.Fatal(err)
	}
	if err := SetPassword(path, "dev1", []byte("pw2")); err != nil {
		t.Fatal(err)
	}
	if err := SetPassword(path, "dev2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.checked = time.Time{} // as if usersCheckEvery had passed
	a.mu.Unlock()
	if _, err := a.Password(cl, "dev1", []byte("pw1")); err == nil {
		t.Fatal("old password still accepted after the file changed")
	}
	if _, err := a.Password(cl, "dev1", []byte("pw2")); err != nil {
		t.Fatal(err)
	}
	if err := DeletePassword(path, "dev2"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "dev2") || strings.Count(string(raw), "dev1") != 3 {
		t.Fatalf("file after delete:\n%s", raw)
	}
	if _, err := HashPassword("a:b", []byte("x")); err == nil {
		t.Fatal("user name with ':' accepted")
	}
}

func TestBadPasswordFiles(t *testing.T) {
	for _, body := range []string{"alice\n", "alice:plain\n", "alice:$7$0$AA==$AA==\n", "alice:$7$101$!!$AA==\n",
		"#tributary-scram-sha-256:alice:1:x\n"} {
		if _, err := parsePasswd(strings.NewReader(body)); err == nil {
			t.Errorf("%q accepted", body)
		}
	}
	if _, err := Open(Config{UsersFile: "/nonexistent"}, nil); err == nil || !strings.Contains(err.Error(), "security.users_file") {
		t.Fatalf("missing file: %v", err)
	}
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemPublic(t *testing.T, k any) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestJWT(t *testing.T) {
	secret := []byte(strings.Repeat("s", 40))
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecJWKS, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": base64.RawURLEncoding.EncodeToString(ecJWKS.X.FillBytes(make([]byte, 32))),
		"y": base64.RawURLEncoding.EncodeToString(ecJWKS.Y.FillBytes(make([]byte, 32)))}}})
	users := filepath.Join(t.TempDir(), "passwd")
	if err := SetPassword(users, "svc", []byte("pw")); err != nil {
		t.Fatal(err)
	}
	a := open(t, Config{UsersFile: users, JWT: JWTConfig{SecretFile: writeFile(t, "secret", append(secret, '\n')),
		PublicKeyFiles: []string{writeFile(t, "rsa.pem", pemPublic(t, &rsaKey.PublicKey)), writeFile(t, "ec.pem", pemPublic(t, &ecKey.PublicKey))},
		JWKSFile:       writeFile(t, "jwks.json", jwks), Issuer: "plant"}})
	sign := func(m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, claims)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := func(sub string) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "iss": "plant", "exp": time.Now().Add(time.Hour).Unix()}
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cases := []struct {
		name, token, want string
	}{
		{"hs256", sign(jwt.SigningMethodHS256, secret, "", good("a")), "a"},
		{"rs256", sign(jwt.SigningMethodRS256, rsaKey, "", good("b")), "b"},
		{"es256", sign(jwt.SigningMethodES256, ecKey, "", good("c")), "c"},
		{"jwks", sign(jwt.SigningMethodES256, ecJWKS, "k1", good("d")), "d"},
		{"expired", sign(jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "a", "iss": "plant", "exp": time.Now().Add(-time.Hour).Unix()}), ""},
		{"wrong issuer", sign(jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "a", "iss": "else"}), ""},
		{"other key", sign(jwt.SigningMethodES256, otherKey, "", good("e")), ""},
		{"no sub", sign(jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"iss": "plant"}), ""},
		{"anonymous sub", sign(jwt.SigningMethodHS256, secret, "", good("anonymous")), ""},
		{"alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", good("a")), ""},
		{"garbage", "a.b.c", ""},
	}
	for _, c := range cases {
		p, err := a.Token(cl, c.token)
		if c.want == "" {
			if err == nil {
				t.Errorf("%s: accepted as %+v", c.name, p)
			}
			continue
		}
		if err != nil || p.Name != c.want {
			t.Errorf("%s: %+v %v", c.name, p, err)
		}
		// The same token in an MQTT password field.
		if p, err := a.Password(cl, "", []byte(c.token)); err != nil || p.Name != c.want {
			t.Errorf("%s as password: %+v %v", c.name, p, err)
		}
		if _, err := a.Password(cl, "someone-else", []byte(c.token)); err == nil {
			t.Errorf("%s: token accepted for another user name", c.name)
		}
	}
	tok, exp, err := a.IssueToken(Principal{Name: "svc"}, time.Minute, time.Time{})
	if err != nil || time.Until(exp) > time.Minute {
		t.Fatal(err)
	}
	if p, err := a.Token(cl, tok); err != nil || p.Name != "svc" {
		t.Fatalf("issued token: %+v %v", p, err)
	}
	// A process without the shared secret signs with a key of its own.
	b := open(t, Config{UsersFile: users})
	tok2, _, _ := b.IssueToken(Principal{Name: "svc"}, 0, time.Time{})
	if _, err := a.Token(cl, tok2); err == nil {
		t.Fatal("a token signed by another process's own key accepted")
	}
	if p, err := b.Token(cl, tok2); err != nil || p.Name != "svc" {
		t.Fatal(err)
	}
}

func TestACL(t *testing.T) {
	no := false
	a := open(t, Config{UsersFile: "testdata/mosquitto.passwd", AllowAnonymous: &no,
		Groups: map[string][]string{"readers": {"analyst-*"}},
		ACL: []Rule{
			{Principal: "sensor-*", Allow: []Action{Publish, Subscribe}, Topics: []string{"factory/%u/#", "cmd/%c"}},
			{Principal: "group:readers", Allow: []Action{Consume}, Streams: []string{"factory.*"}, Groups: []string{"%u-*"}},
			{Principal: "edge", Allow: []Action{Write}, Streams: []string{"factory.*"}, ClientIDs: []string{"edge-node-*"}},
			{Principal: "ops", Allow: []Action{Admin}},
			{Principal: "dash", Allow: []Action{Subscribe}, Topics: []string{"factory/+/temp"}, Streams: []string{"factory.*"}},
			{Principal: "team-a", Allow: []Action{Subscribe}, Topics: []string{"factory/#"}, Groups: []string{"team-a*"}},
		}})
	P := func(n string) Principal { return Principal{Name: n, Method: MethodPassword} }
	cases := []struct {
		r    Request
		want bool
	}{
		{Request{Principal: P("sensor-1"), Action: Publish, Topic: "factory/sensor-1/temp"}, true},
		{Request{Principal: P("sensor-1"), Action: Publish, Topic: "factory/sensor-2/temp"}, false},
		{Request{Principal: P("sensor-1"), Action: Publish, Topic: "cmd/c1", ClientID: "c1"}, true},
		{Request{Principal: P("sensor-1"), Action: Publish, Topic: "cmd/c2", ClientID: "c1"}, false},
		{Request{Principal: P("sensor-1"), Action: Subscribe, Topic: "factory/sensor-1/+"}, true},
		{Request{Principal: P("sensor-1"), Action: Subscribe, Topic: "$share/g/factory/sensor-1/#"}, true},
		{Request{Principal: P("sensor-1"), Action: Subscribe, Topic: "factory/+/temp"}, false},
		{Request{Principal: P("sensor-1"), Action: Subscribe, Topic: "#"}, false},
		{Request{Principal: P("sensor-1"), Action: Produce, Stream: "factory.a"}, false},
		{Request{Principal: P("sensor-1"), Action: Subscribe, Topic: "factory/sensor-1/+", Stream: "office.x"}, true}, // no streams listed: any
		{Request{Principal: P("dash"), Action: Subscribe, Topic: "factory/+/temp", Stream: "factory.telemetry"}, true},
		{Request{Principal: P("dash"), Action: Subscribe, Topic: "factory/+/temp", Stream: "office.telemetry"}, false},
		{Request{Principal: P("dash"), Action: Subscribe, Topic: "factory/#", Stream: "factory.telemetry"}, false},
		{Request{Principal: P("sensor-#"), Action: Publish, Topic: "factory/#"}, false}, // a wildcard in a name never widens %u
		// $share groups: the rule's groups (none listed: any).
		{Request{Principal: P("team-a"), Action: Subscribe, Topic: "$share/team-a/factory/#"}, true},
		{Request{Principal: P("team-a"), Action: Subscribe, Topic: "$share/team-b/factory/#"}, false},
		{Request{Principal: P("team-a"), Action: Subscribe, Topic: "factory/#", Stream: "factory.x", Group: "team-a-2"}, true},
		{Request{Principal: P("team-a"), Action: Subscribe, Topic: "factory/#", Stream: "factory.x", Group: "team-b"}, false},
		{Request{Principal: P("team-a"), Action: Subscribe, Topic: "factory/#"}, true},
		{Request{Principal: P("analyst-1"), Action: Consume, Stream: "factory.temp", Group: "analyst-1-dash"}, true},
		{Request{Principal: P("analyst-1"), Action: Consume, Stream: "factory.temp", Group: "other"}, false},
		{Request{Principal: P("analyst-1"), Action: Consume, Stream: "office.temp"}, false},
		{Request{Principal: P("analyst-1"), Action: Consume, Namespace: "factory"}, true},
		{Request{Principal: P("analyst-1"), Action: Consume, Namespace: "office"}, false},
		{Request{Principal: P("analyst-1"), Action: Write, Stream: "factory.temp"}, false},
		{Request{Principal: P("edge"), Action: Write, Stream: "factory.temp"}, true},
		{Request{Principal: P("ops"), Action: Admin}, true},
		{Request{Principal: P("ops"), Action: Write, Stream: "x.y"}, true},
		{Request{Principal: P("nobody"), Action: Consume, Stream: "factory.temp"}, false},
		{Request{Principal: Principal{}, Action: Consume, Stream: "factory.temp"}, false},
	}
	for _, c := range cases {
		if got := a.Allowed(c.r); got != c.want {
			t.Errorf("%+v: allowed=%v, want %v", c.r, got, c.want)
		}
		if err := a.Authorize(c.r); (err == nil) != c.want || (err != nil && !errors.Is(err, tributary.ErrUnauthorized)) {
			t.Errorf("%+v: Authorize %v", c.r, err)
		}
	}
	ids := []struct {
		p    string
		id   string
		want bool
	}{{"sensor-1", "sensor-1", true}, {"sensor-1", "sensor-2", false},
		// By default a principal's own name only: sensor cannot take
		// sensor-1 (and its cmd/sensor-1 commands) as "%u-*" allowed.
		{"sensor", "sensor-1", false}, {"sensor-1", "sensor-1-a", false},
		{"edge", "edge-node-3", true}, {"edge", "edge", false}, {"ops", "anything", true},
		// Anonymous: no rule of its lists client ids, so any id is refused
		// (it gets one the server assigns).
		{"", "sensor-1", false}, {"", "anything", false}}
	for _, c := range ids {
		if err := a.AuthorizeClientID(cl, P(c.p), c.id); (err == nil) != c.want {
			t.Errorf("client id %s as %q: %v", c.id, c.p, err)
		}
	}
	// Explicit patterns keep working, for anonymous clients too.
	yes := true
	b := open(t, Config{UsersFile: "testdata/mosquitto.passwd", AllowAnonymous: &yes, ACL: []Rule{
		{Principal: "sensor-*", Allow: []Action{Publish}, ClientIDs: []string{"%u", "%u-*"}},
		{Principal: "anonymous", Allow: []Action{Subscribe}, ClientIDs: []string{"kiosk-*"}},
	}})
	for _, c := range []struct {
		p, id string
		want  bool
	}{{"sensor-1", "sensor-1-backup", true}, {"sensor-1", "sensor-2", false}, {"", "kiosk-3", true}, {"", "sensor-1", false}} {
		if err := b.AuthorizeClientID(cl, P(c.p), c.id); (err == nil) != c.want {
			t.Errorf("configured patterns: client id %s as %q: %v", c.id, c.p, err)
		}
	}
}

func TestAnonymousPostures(t *testing.T) {
	open0 := open(t, Config{})
	if !open0.Open() || !open0.Allowed(Request{Action: Admin}) {
		t.Fatal("nothing configured: want open")
	}
	yes := true
	anonRules := open(t, Config{AllowAnonymous: &yes, UsersFile: "testdata/mosquitto.passwd",
		ACL: []Rule{{Principal: "anonymous", Allow: []Action{Subscribe}, Topics: []string{"public/#"}}}})
	if !anonRules.Allowed(Request{Action: Subscribe, Topic: "public/x"}) || anonRules.Allowed(Request{Action: Publish, Topic: "public/x"}) {
		t.Fatal("anonymous rule")
	}
	if anonRules.Allowed(Request{Principal: Principal{Name: "alice"}, Action: Subscribe, Topic: "public/x"}) {
		t.Fatal("an anonymous rule granted alice")
	}
	if err := (Config{ACL: []Rule{{Principal: "x", Allow: []Action{"fly"}}}}).validateErr(); err == nil {
		t.Fatal("unknown action accepted")
	}
}

func (c Config) validateErr() error {
	var errs []string
	c.Validate(func(f, format string, args ...any) { errs = append(errs, f) })
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, ","))
	}
	return nil
}

func TestCertificate(t *testing.T) {
	a := open(t, Config{})
	p, err := a.Certificate(cl, &x509.Certificate{Subject: pkix.Name{CommonName: "dev-7"}})
	if err != nil || p.Name != "dev-7" || p.Method != MethodCertificate {
		t.Fatal(p, err)
	}
	if _, err := a.Certificate(cl, &x509.Certificate{}); err == nil {
		t.Fatal("certificate without CN accepted")
	}
}

// franz-go's SCRAM client against the server side, both mechanisms.
func TestSCRAMWithFranzGo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := SetPassword(path, "kafka-user", []byte("pw")); err != nil {
		t.Fatal(err)
	}
	a := open(t, Config{UsersFile: path})
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		for _, pw := range []string{"pw", "bad"} {
			m := scram.Auth{User: "kafka-user", Pass: pw}.AsSha256Mechanism()
			if mech == "SCRAM-SHA-512" {
				m = scram.Auth{User: "kafka-user", Pass: pw}.AsSha512Mechanism()
			}
			sess, msg, err := m.Authenticate(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			srv, _ := a.NewSCRAM(cl, mech)
			var ok bool
			for i := 0; i < 3 && err == nil; i++ {
				var reply []byte
				var done bool
				reply, done, err = srv.Step(msg)
				if err != nil {
					break
				}
				var cdone bool
				cdone, msg, err = sess.Challenge(reply)
				if done && cdone && err == nil {
					ok = true
					break
				}
			}
			if want := pw == "pw"; ok != want {
				t.Errorf("%s with %q: ok=%v err=%v", mech, pw, ok, err)
			}
			if ok && srv.Principal().Name != "kafka-user" {
				t.Errorf("principal %+v", srv.Principal())
			}
		}
	}
	// An unknown user gets a server-first message like a known one.
	srv, _ := a.NewSCRAM(cl, "SCRAM-SHA-512")
	reply, _, err := srv.Step([]byte("n,,n=ghost,r=abc"))
	if err != nil || !strings.Contains(string(reply), "i=10000") {
		t.Fatalf("unknown user: %q %v", reply, err)
	}
	if _, _, err := srv.Step([]byte("c=biws,r=wrong,p=AAAA")); err == nil {
		t.Fatal("bad final accepted")
	}
}

func TestGlobAndFilters(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{{"*", "", true}, {"a*", "abc", true}, {"*c", "abc", true}, {"a*c", "abxc", true}, {"a*d", "abc", false}, {"factory.*", "factory.t", true},
		{"factory.*", "office.t", false}, {"a**b", "ab", true}, {"x", "xy", false}} {
		if glob(c.p, c.s) != c.want {
			t.Errorf("glob(%q,%q)", c.p, c.s)
		}
	}
	for _, c := range []struct {
		f, t string
		want bool
	}{{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"a/+", "a/b", true}, {"a/+", "a/b/c", false}, {"#", "$SYS/x", false}, {"+/x", "a/x", true}} {
		if topicMatch(c.f, c.t) != c.want {
			t.Errorf("topicMatch(%q,%q)", c.f, c.t)
		}
	}
	for _, c := range []struct {
		sub, f string
		want   bool
	}{{"a/b", "a/#", true}, {"a/#", "a/#", true}, {"a/+", "a/#", true}, {"#", "a/#", false}, {"a/+", "a/b", false}, {"a/+/c", "a/+/c", true}, {"a", "a/#", true}} {
		if filterWithin(c.sub, c.f) != c.want {
			t.Errorf("filterWithin(%q,%q)", c.sub, c.f)
		}
	}
}

// TestJWTStartupWarnings: keys of an outside identity provider without
// issuer and audience, and accepting tokens without exp, are logged at
// start-up with the keys to set.
func TestJWTStartupWarnings(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := writeFile(t, "ec.pem", pemPublic(t, &ecKey.PublicKey))
	for _, c := range []struct {
		jwt  JWTConfig
		want []string
	}{
		{JWTConfig{PublicKeyFiles: []string{pub}}, []string{"security.jwt.issuer and security.jwt.audience"}},
		{JWTConfig{PublicKeyFiles: []string{pub}, Issuer: "idp"}, []string{"security.jwt.issuer and security.jwt.audience"}},
		{JWTConfig{PublicKeyFiles: []string{pub}, Issuer: "idp", Audience: "tributary"}, nil},
		{JWTConfig{SecretFile: writeFile(t, "secret", []byte(strings.Repeat("s", 32))), AllowWithoutExp: true}, []string{"allow_without_exp"}},
	} {
		var buf bytes.Buffer
		if _, err := Open(Config{JWT: c.jwt}, slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatal(err)
		}
		if len(c.want) == 0 && strings.Contains(buf.String(), "WARN") {
			t.Errorf("%+v: unexpected warning %s", c.jwt, buf.String())
		}
		for _, w := range c.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%+v: no warning naming %q in %q", c.jwt, w, buf.String())
			}
		}
	}
}
