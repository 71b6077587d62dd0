package e2e

// Authentication and authorization of the cloud's Pulsar server and REST
// catalog, with real clients against real processes started from YAML
// configs: pulsar-client-go with JWTs (pulsar.NewAuthenticationToken),
// iceberg-go's REST client with OAuth2 client credentials, an edge node
// committing through the REST catalog with its own credential, and the
// admin-only /debug/pprof. Everything over TLS with a test CA (Pulsar with
// client certificates too).

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/golang-jwt/jwt/v5"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

// authSite is a cloud data directory with a users file (reader, edge-1,
// ops, nobody; password "pw-"+name), an HS256 secret, and the ACL: reader
// consumes factory.* with subscriptions app-*, edge-* write factory.*,
// ops is admin, nobody has no rule.
type authSite struct {
	dir, users, secretFile string
	secret                 []byte
}

func newAuthSite(t *testing.T) *authSite {
	t.Helper()
	s := &authSite{dir: t.TempDir(), secret: []byte("e2e-secret-e2e-secret-e2e-secret-0123")}
	s.users = filepath.Join(s.dir, "passwd")
	for _, u := range []string{"reader", "edge-1", "ops", "nobody"} {
		if err := auth.SetPassword(s.users, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	s.secretFile = filepath.Join(s.dir, "jwt.secret")
	if err := os.WriteFile(s.secretFile, s.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// sign makes a JWT for sub expiring at exp.
func (s *authSite) sign(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(s.secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// startCloud starts `tributary cloud -config` with the site's security
// section (anonymous off, security.debug on; tlsYAML: its tls key, indented
// by two spaces), REST catalog and Pulsar.
func (s *authSite) startCloud(t *testing.T, tlsYAML string) *proc {
	t.Helper()
	cfg := fmt.Sprintf(`role: cloud
data_dir: %[1]s
catalog:
  addr: 127.0.0.1:0
kafka:
  addr: ""
pulsar:
  addr: 127.0.0.1:0
maintenance:
  enabled: false
security:
  allow_anonymous: false
  users_file: %[2]s
  jwt:
    secret_file: %[3]s
  debug: true
  acl:
    - {principal: reader, allow: [consume], streams: ["factory.*"], groups: ["app-*"]}
    - {principal: "edge-*", allow: [write], streams: ["factory.*"]}
    - {principal: ops, allow: [admin]}
%[4]s`, s.dir, s.users, s.secretFile, tlsYAML)
	path := filepath.Join(s.dir, "cloud.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return startProc(t, s.dir, "cloud", "-config", path)
}

// authPulsarClient is a pulsar-client-go client of pulsar+ssl://addr
// trusting ca, authenticating with a.
func authPulsarClient(t *testing.T, addr string, ca *testkit.CA, a pulsar.Authentication, timeout time.Duration) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar+ssl://" + addr, TLSTrustCertsFilePath: ca.Files(),
		Authentication: a, OperationTimeout: timeout, ConnectionTimeout: 5 * time.Second, Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestPulsarAuth(t *testing.T) {
	s := newAuthSite(t)
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(s.dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(s.dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.EnsureTable(context.Background(), "factory.telemetry"); err != nil {
		t.Fatal(err)
	}
	commitRows(t, cat, s.dir, "factory.telemetry", 0, 0, 20)
	cat.Close()
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	cloud := s.startCloud(t, fmt.Sprintf("  tls:\n    listeners:\n      pulsar:\n        cert_file: %s\n        key_file: %s\n"+
		"        client_ca_file: %s\n", srv.CertFile, srv.KeyFile, ca.Files()))

	consumes := func(name string, a pulsar.Authentication, sub string) {
		t.Run(name, func(t *testing.T) {
			cl := authPulsarClient(t, cloud.Pulsar, ca, a, 15*time.Second)
			c := mustSubscribe(t, cl, pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: sub, Type: pulsar.Shared,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 20 {
				m, err := c.Receive(ctx)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				c.Ack(m)
			}
		})
	}
	consumes("token consumes", pulsar.NewAuthenticationToken(s.sign(t, "reader", time.Now().Add(time.Hour))), "app-1")
	reader := ca.Client(t, "reader")
	consumes("client certificate consumes", mustTLSAuth(t, reader), "app-cert")
	t.Run("token refreshed in place", func(t *testing.T) {
		// Tokens of 2 s from a provider: at each expiry the server
		// challenges, the client answers with a fresh one, and the
		// connection stays.
		var calls atomic.Int32
		a := pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) {
			calls.Add(1)
			return s.sign(t, "reader", time.Now().Add(2*time.Second)), nil
		})
		cl := authPulsarClient(t, cloud.Pulsar, ca, a, 15*time.Second)
		c := mustSubscribe(t, cl, pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "app-refresh",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		time.Sleep(4500 * time.Millisecond) // two expiries
		if n := calls.Load(); n < 3 {
			t.Fatalf("the token provider was asked %d times, want the CONNECT and two refreshes", n)
		}
		if strings.Contains(cloud.logs(), "token expired") {
			t.Fatalf("the connection was closed for its token:\n%s", cloud.tail(20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Receive(ctx); err != nil {
			t.Fatalf("receive after the refreshes: %v", err)
		}
	})
	// Each refusal is audited with its reason (one more line each time).
	refused := func(name string, a pulsar.Authentication, sub, audit string) {
		t.Run(name, func(t *testing.T) {
			before := strings.Count(cloud.logs(), audit)
			cl := authPulsarClient(t, cloud.Pulsar, ca, a, 2*time.Second)
			c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: sub})
			if err == nil {
				c.Close()
				t.Fatal("subscribed")
			}
			waitFor(t, 5*time.Second, "audit line "+audit, func() bool { return strings.Count(cloud.logs(), audit) > before })
		})
	}
	refused("wrong token", pulsar.NewAuthenticationToken(s.sign(t, "reader", time.Now().Add(time.Hour))+"x"), "app-2", "reason=bad_token")
	refused("expired token", pulsar.NewAuthenticationToken(s.sign(t, "reader", time.Now().Add(-time.Hour))), "app-3", "reason=token_expired")
	refused("no token", nil, "app-4", "reason=no_credentials")
	refused("no consume rights", pulsar.NewAuthenticationToken(s.sign(t, "nobody", time.Now().Add(time.Hour))), "app-5",
		"principal=nobody action=consume")
	refused("subscription outside the rule", pulsar.NewAuthenticationToken(s.sign(t, "reader", time.Now().Add(time.Hour))), "other",
		"group:other")
	refused("client certificate without rights", mustTLSAuth(t, ca.Client(t, "nobody")), "app-6", "principal=nobody action=consume")
}

func mustTLSAuth(t *testing.T, f testkit.CertFiles) pulsar.Authentication {
	t.Helper()
	return pulsar.NewAuthenticationTLS(f.CertFile, f.KeyFile)
}

// TestRESTAuth: an edge node commits through the cloud's REST catalog with
// its own credential; iceberg-go with OAuth2 client credentials reads the
// table; no token is 401, a reader's commit 403; /debug/pprof is
// admin-only on the cloud and 404 on the edge (security.debug off).
func TestRESTAuth(t *testing.T) {
	s := newAuthSite(t)
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	cloud := s.startCloud(t, indentYAML(securityYAML(srv)))
	roots := &tls.Config{RootCAs: ca.Pool}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: roots.Clone()}}
	edgeDir := filepath.Join(s.dir, "edge")
	if err := os.MkdirAll(edgeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := edgeConfig(t, edgeDir, "edge-1", fmt.Sprintf(`catalog:
  uri: https://%[1]s
  ca_file: %[3]s
  credential: edge-1:pw-edge-1
  warehouse: file://%[2]s/warehouse
maintenance:
  enabled: false
`, cloud.Catalog, s.dir, ca.Files()))
	edge := startEdge(t, edgeDir, path)
	ctx := context.Background()

	t.Run("edge commits with its credential", func(t *testing.T) {
		mc, err := mqttClient(ctx, edge.MQTT, "restauth")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publishN(ctx, mc, newLedger(), "restauth", 0, 10); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the edge's rows committed through the REST catalog", func() bool { return walDrained(t, edge) })
	})
	open := func(t *testing.T, cred string) *rest.Catalog {
		t.Helper()
		c, err := rest.NewCatalog(ctx, "tributary", "https://"+cloud.Catalog, rest.WithCredential(cred), rest.WithTLSConfig(roots.Clone()))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	id := table.Identifier{"factory", "telemetry"}
	t.Run("reader reads with client credentials", func(t *testing.T) {
		tbl, err := open(t, "reader:pw-reader").LoadTable(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(scanAll(t, tbl)); n != 10 {
			t.Fatalf("%d rows, want 10", n)
		}
	})
	t.Run("no token is 401", func(t *testing.T) {
		resp, err := hc.Get("https://" + cloud.Catalog + "/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%d %q, want 401 with a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if _, err := rest.NewCatalog(ctx, "tributary", "https://"+cloud.Catalog, rest.WithCredential("reader:wrong"),
			rest.WithTLSConfig(roots.Clone())); err == nil {
			t.Fatal("a wrong client secret opened the catalog")
		}
	})
	t.Run("reader cannot commit", func(t *testing.T) {
		tbl, err := open(t, "reader:pw-reader").LoadTable(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(map[string]string{"owner": "reader"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err == nil || !strings.Contains(err.Error(), "may not write") {
			t.Fatalf("commit: %v, want 403", err)
		}
	})
	t.Run("debug endpoints", func(t *testing.T) {
		get := func(url, user string) int {
			req, _ := http.NewRequest("GET", url, nil)
			if user != "" {
				req.SetBasicAuth(user, "pw-"+user)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		pprof := "https://" + cloud.Catalog + "/debug/pprof/"
		for user, want := range map[string]int{"": 401, "reader": 403, "ops": 200} {
			if got := get(pprof, user); got != want {
				t.Errorf("cloud /debug/pprof/ as %q: %d, want %d", user, got, want)
			}
		}
		if got := get("https://"+cloud.Catalog+"/metrics", ""); got != 401 {
			t.Errorf("cloud /metrics without credentials: %d, want 401", got)
		}
		if got := get("https://"+cloud.Catalog+"/healthz", ""); got != 200 {
			t.Errorf("cloud /healthz: %d, want 200", got)
		}
		if got := get("http://"+edge.HTTP+"/debug/pprof/", ""); got != 404 {
			t.Errorf("edge /debug/pprof/ with security.debug off: %d, want 404", got)
		}
	})
}

// edgeConfig writes dir/edge.yaml for node id: data_dir dir, the given
// sections (catalog, storage, ...: YAML at the top level), MQTT on a free
// port routing factory/# to factory.telemetry, the HTTP port, and commits
// every 200ms. It returns the file's path.
func edgeConfig(t *testing.T, dir, id, sections string) string {
	t.Helper()
	cfg := fmt.Sprintf(`node_id: %s
data_dir: %s
%s
mqtt:
  addr: 127.0.0.1:0
  routes:
    - {filter: "factory/#", stream: factory.telemetry}
http_addr: 127.0.0.1:0
uplink:
  commit_interval: 200ms
`, id, dir, strings.TrimRight(sections, "\n"))
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
