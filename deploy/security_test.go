package deploy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/node"
)

// The security sections of the kit name files (certificates, keys, the
// password file, the JWT secret) that the artifact itself must provide —
// a Secret or ConfigMap volume, a compose secret or config, a file the
// systemd unit lists. The checks below materialize exactly what an
// artifact provides in a sandbox (test certificates and users in place of
// the operator's), rewrite the in-container paths into it, and run the
// built binary's own checks on the result: `tributary config check` for
// an edge config, `tributary cloud --check ARGS` for a cloud command line.
// Both load every file and refuse what a start would refuse (a listener
// off loopback without client authentication included).

// ---- test material ----

var (
	materialOnce sync.Once
	material     map[string][]byte // kind → content
	materialErr  error
)

func testMaterial(t *testing.T) map[string][]byte {
	t.Helper()
	materialOnce.Do(func() { material, materialErr = makeMaterial() })
	if materialErr != nil {
		t.Fatal(materialErr)
	}
	return material
}

func makeMaterial() (map[string][]byte, error) {
	m := map[string][]byte{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "deploy-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tributary"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	m["ca"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	m["cert"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	m["key"] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	secret := make([]byte, 48)
	rand.Read(secret)
	m["jwt"] = []byte(base64.StdEncoding.EncodeToString(secret) + "\n")
	m["secret"] = m["jwt"]
	m["gossip"] = []byte(base64.StdEncoding.EncodeToString(secret[:32]) + "\n")
	// A password file as `tributary passwd` writes it.
	dir, err := os.MkdirTemp("", "tributary-deploy-passwd")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pw := filepath.Join(dir, "passwd")
	cmd := exec.Command(binPath, "passwd", pw, "ops")
	cmd.Stdin = strings.NewReader("test-password\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tributary passwd: %v\n%s", err, out)
	}
	if m["passwd"], err = os.ReadFile(pw); err != nil {
		return nil, err
	}
	return m, nil
}

// materialFor is the test stand-in for a file the artifact provides, by
// its name (a Secret key, a compose secret's file, a path).
func materialFor(t *testing.T, where, name string) []byte {
	t.Helper()
	m := testMaterial(t)
	b := strings.ToLower(filepath.Base(name))
	switch {
	case strings.Contains(b, "passwd"):
		return m["passwd"]
	case strings.Contains(b, "jwt"):
		return m["jwt"]
	case strings.Contains(b, "gossip"):
		return m["gossip"]
	case strings.Contains(b, "secret"):
		return m["secret"]
	case b == "ca.crt" || b == "ca.pem" || strings.HasSuffix(b, "-ca.crt") || strings.HasSuffix(b, "_ca") || strings.HasSuffix(b, "_ca.crt"):
		return m["ca"]
	case strings.HasSuffix(b, ".crt") || strings.HasSuffix(b, ".pem") || strings.HasSuffix(b, "_crt"):
		return m["cert"]
	case strings.HasSuffix(b, ".key") || strings.HasSuffix(b, "_key"):
		return m["key"]
	}
	t.Errorf("%s: provides %s, a file the deploy tests cannot stand in for (name it *passwd*, *jwt*, *secret*, *.crt, *.key)", where, name)
	return nil
}

// ---- the sandbox ----

// sandbox holds what one artifact provides, at its in-container paths
// under root.
type sandbox struct {
	t     *testing.T
	root  string
	paths map[string]bool
}

func newSandbox(t *testing.T) *sandbox {
	return &sandbox{t: t, root: t.TempDir(), paths: map[string]bool{}}
}

// provide puts content at the absolute in-artifact path p.
func (s *sandbox) provide(p string, content []byte) {
	s.t.Helper()
	if !filepath.IsAbs(p) {
		s.t.Errorf("sandbox: %q is not an absolute path", p)
		return
	}
	host := filepath.Join(s.root, p)
	if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(host, content, 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.paths[filepath.Clean(p)] = true
}

func (s *sandbox) provided(p string) bool { return s.paths[filepath.Clean(p)] }

// remap rewrites every provided path in text to its place in the sandbox.
func (s *sandbox) remap(text string) string {
	if len(s.paths) == 0 {
		return text
	}
	var ps []string
	for p := range s.paths {
		ps = append(ps, regexp.QuoteMeta(p))
	}
	sort.Slice(ps, func(i, j int) bool { return len(ps[i]) > len(ps[j]) })
	re := regexp.MustCompile(`(^|[^\w./-])(` + strings.Join(ps, "|") + `)([^\w./-]|$)`)
	return re.ReplaceAllStringFunc(text, func(m string) string {
		sm := re.FindStringSubmatch(m)
		return sm[1] + filepath.Join(s.root, sm[2]) + sm[3]
	})
}

// run runs the built binary with argv (paths remapped) and exactly env.
func (s *sandbox) run(env map[string]string, argv ...string) (string, error) {
	var args []string
	for _, a := range argv {
		args = append(args, s.remap(a))
	}
	cmd := exec.Command(binPath, args...)
	cmd.Dir = s.t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// ---- the files a security section names ----

// securityFiles lists field → path of every file s names.
func securityFiles(s config.Security, prefix string) map[string]string {
	out := map[string]string{}
	add := func(field, p string) {
		if p != "" {
			out[prefix+field] = p
		}
	}
	add("users_file", s.UsersFile)
	add("jwt.secret_file", s.JWT.SecretFile)
	add("jwt.jwks_file", s.JWT.JWKSFile)
	for i, p := range s.JWT.PublicKeyFiles {
		add("jwt.public_key_files["+string(rune('0'+i))+"]", p)
	}
	add("tls.cert_file", s.TLS.CertFile)
	add("tls.key_file", s.TLS.KeyFile)
	add("tls.client_ca_file", s.TLS.ClientCAFile)
	for name, f := range s.TLS.Listeners {
		add("tls.listeners."+name+".cert_file", f.CertFile)
		add("tls.listeners."+name+".key_file", f.KeyFile)
		add("tls.listeners."+name+".client_ca_file", f.ClientCAFile)
	}
	return out
}

// edgeFiles: the files an edge config names.
func edgeFiles(c node.Config) map[string]string {
	out := securityFiles(c.Security, "security.")
	for field, p := range map[string]string{"catalog.ca_file": c.Catalog.CAFile,
		"cluster.gossip_key_file": c.Cluster.GossipKeyFile, "cluster.secret_file": c.Cluster.SecretFile} {
		if p != "" {
			out[field] = p
		}
	}
	return out
}

// checkProvided reports every named file the sandbox does not hold.
func checkProvided(t *testing.T, where string, sb *sandbox, files map[string]string, how string) {
	t.Helper()
	var fields []string
	for f := range files {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	for _, f := range fields {
		if !sb.provided(files[f]) {
			t.Errorf("%s: %s %s is not provided by the artifact (no %s holds it)", where, f, files[f], how)
		}
	}
}

// ---- edge ----

// checkEdgeStarts validates an edge config as the artifact provides it:
// the files its security section and catalog name are provided, and
// `tributary config check` passes on it in the sandbox with env. It
// returns the parsed config (paths as written).
func checkEdgeStarts(t *testing.T, where string, sb *sandbox, raw string, env map[string]string, how string) node.Config {
	t.Helper()
	cfg := parseEdgeConfig(t, where, raw, env)
	checkProvided(t, where, sb, edgeFiles(cfg), how)
	f := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(f, []byte(sb.remap(raw)), 0o600); err != nil {
		t.Fatal(err)
	}
	// --offline: the site's names (its catalog's host) do not resolve here.
	if out, err := sb.run(env, "config", "check", "--offline", f); err != nil {
		t.Errorf("%s: tributary config check fails (the node would refuse to start): %v\n%s", where, err, out)
	}
	return cfg
}

// ---- cloud ----

// cloudCheck is what `tributary cloud --check` printed.
type cloudCheck map[string]string

func (c cloudCheck) tlsOn(listener string) bool {
	for _, l := range strings.Split(c["tls"], ",") {
		if l == listener {
			return true
		}
	}
	return false
}

// checkCloudStarts runs `tributary cloud --check` with the artifact's
// argv (after the binary) and env in the sandbox, after checking that the
// files the --config and --security files name are provided.
func checkCloudStarts(t *testing.T, where string, sb *sandbox, argv []string, env map[string]string, how string) cloudCheck {
	t.Helper()
	if len(argv) == 0 || argv[0] != "cloud" {
		t.Fatalf("%s: %q does not run tributary cloud", where, argv)
	}
	_, vals := checkArgs(t, where, argv)
	var sec config.Security
	secWhere := ""
	if p := vals["config"]; p != "" {
		raw, err := os.ReadFile(filepath.Join(sb.root, p))
		if err != nil {
			t.Errorf("%s: --config %s is not provided by the artifact (no %s holds it)", where, p, how)
		} else {
			var cc cloud.Config
			for k, v := range env {
				t.Setenv(k, v)
			}
			if err := config.Decode(raw, &cc); err != nil {
				t.Errorf("%s: --config %s: %v", where, p, err)
			}
			sec, secWhere = cc.Security, "--config "+p+" "
		}
	}
	if p := vals["security"]; p != "" {
		raw, err := os.ReadFile(filepath.Join(sb.root, p))
		if err != nil {
			t.Errorf("%s: --security %s is not provided by the artifact (no %s holds it)", where, p, how)
		} else {
			sec = config.Security{}
			if err := config.Decode(raw, &sec); err != nil {
				t.Errorf("%s: --security %s: %v", where, p, err)
			}
			secWhere = "--security " + p + " "
		}
	}
	checkProvided(t, where+" "+secWhere+"security", sb, securityFiles(sec, "security."), how)
	// The provided files are remapped as copies, so that the paths in them
	// point into the sandbox too.
	for p := range sb.paths {
		if strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") {
			host := filepath.Join(sb.root, p)
			raw, err := os.ReadFile(host)
			if err == nil {
				os.WriteFile(host, []byte(sb.remap(string(raw))), 0o600)
			}
		}
	}
	args := append([]string{"cloud", "--check"}, argv[1:]...)
	out, err := sb.run(env, args...)
	if err != nil {
		t.Errorf("%s: tributary cloud --check fails (the server would refuse to start): %v\n%s", where, err, out)
		return cloudCheck{}
	}
	c := cloudCheck{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			c[k] = v
		}
	}
	if c["catalog.addr"] == "" {
		t.Errorf("%s: tributary cloud --check printed no catalog.addr:\n%s", where, out)
	}
	return c
}

// checkProbeScheme: a probe of a port that serves TLS must say HTTPS, and
// only then.
func checkProbeScheme(t *testing.T, where string, scheme string, tlsOn bool) {
	t.Helper()
	want := "HTTP"
	if tlsOn {
		want = "HTTPS"
	}
	if scheme == "" {
		scheme = "HTTP"
	}
	if scheme != want {
		t.Errorf("%s: scheme %s, but the port %s TLS: want scheme: %s", where, scheme, map[bool]string{true: "serves", false: "does not serve"}[tlsOn], want)
	}
}

// checkEdgeToCloud: the edge's catalog.uri reaches the cloud the way the
// cloud serves it (https exactly when its catalog port serves TLS, with a
// CA to verify it), with credentials the cloud accepts.
func checkEdgeToCloud(t *testing.T, where string, cfg node.Config, cc cloudCheck, cloudNodeToken bool) {
	t.Helper()
	if len(cc) == 0 {
		return // the cloud's check failed, reported already
	}
	u := cfg.Catalog.URI
	switch {
	case cc.tlsOn("rest") && !strings.HasPrefix(u, "https://"):
		t.Errorf("%s: catalog.uri %q: the cloud's catalog port serves TLS, want https://", where, u)
	case !cc.tlsOn("rest") && !strings.HasPrefix(u, "http://"):
		t.Errorf("%s: catalog.uri %q: the cloud's catalog port serves plain HTTP, want http://", where, u)
	}
	if strings.HasPrefix(u, "https://") && cfg.Catalog.CAFile == "" {
		t.Errorf("%s: catalog.uri %q without catalog.ca_file: the cloud's certificate is checked against the system roots", where, u)
	}
	switch {
	case cfg.Catalog.Token != "":
		if !cloudNodeToken {
			t.Errorf("%s: catalog.token is set but the cloud has no node token: its commits would be refused (403)", where)
		}
	case cfg.Catalog.Credential != "":
		if cc["authentication"] != "true" {
			t.Errorf("%s: catalog.credential is set but the cloud authenticates nobody (no users_file): its token endpoint refuses it", where)
		}
	default:
		t.Errorf("%s: neither catalog.credential nor catalog.token: the edge's commits would be refused (it writes the tables' tributary.* properties)", where)
	}
}

// placeholder stands in for the value of the environment variable name
// that comes from a secret (Kubernetes Secret, compose interpolation, an
// EnvironmentFile): a credential has the client_id:client_secret shape.
func placeholder(name string) string {
	if strings.Contains(name, "CREDENTIAL") {
		return "edge-test:from-secret"
	}
	return "from-" + strings.ToLower(name)
}

// ---- probes over TLS ----

// getTLS is a probe as the kubelet makes it over HTTPS: no client
// certificate, no credentials, the server's certificate not verified.
func getTLS(t *testing.T, url string) int {
	t.Helper()
	return getWith(t, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, url) // as the kubelet's probes
}

// checkCloudTLSProbes starts the artifact's cloud command line (after
// checkCloudStarts prepared sb) on loopback ports and a local warehouse,
// with its security section, and probes paths over HTTPS unauthenticated.
func checkCloudTLSProbes(t *testing.T, where string, sb *sandbox, argv []string, env map[string]string, paths ...string) {
	t.Helper()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready.json")
	args := append([]string{}, argv...)
	args = append(args, "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "", "--pulsar-addr", "",
		"--data", dir, "--catalog", "sqlite://"+filepath.Join(dir, "catalog.db"), "--warehouse", "file://"+filepath.Join(dir, "warehouse"), "--ready-file", ready)
	for i, a := range args {
		args[i] = sb.remap(a)
	}
	cmd := exec.Command(binPath, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	var addrs map[string]string
	for time.Now().Before(deadline) {
		if raw, err := os.ReadFile(ready); err == nil && json.Unmarshal(raw, &addrs) == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if addrs["catalog"] == "" {
		t.Errorf("%s: tributary cloud with the artifact's security did not become ready in 30s:\n%s", where, out.String())
		return
	}
	for _, p := range paths {
		if code := getTLS(t, "https://"+addrs["catalog"]+p); code != 200 {
			t.Errorf("%s: GET https://…%s without credentials = %d, want 200 (probes carry none)", where, p, code)
		}
	}
}

// checkEdgeTLSProbes runs a node with the edge config's security section
// (files from sb) on loopback ports and its own catalog, and probes paths
// on its HTTP port over HTTPS unauthenticated.
func checkEdgeTLSProbes(t *testing.T, where string, sb *sandbox, raw string, env map[string]string, paths ...string) {
	t.Helper()
	cfg := parseEdgeConfig(t, where, sb.remap(raw), env)
	dir := t.TempDir()
	probe := node.Config{NodeID: "probe-1", DataDir: dir, HTTPAddr: "127.0.0.1:0", Security: cfg.Security}
	probe.MQTT.Addr = "127.0.0.1:0"
	n, err := node.New(context.Background(), probe, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Errorf("%s: a node with this security section: %v", where, err)
		return
	}
	defer n.Close(context.Background())
	if err := n.Start(context.Background()); err != nil {
		t.Errorf("%s: a node with this security section: %v", where, err)
		return
	}
	for _, p := range paths {
		if code := getTLS(t, "https://"+n.HTTPAddr()+p); code != 200 {
			t.Errorf("%s: GET https://…%s without credentials = %d, want 200 (probes carry none)", where, p, code)
		}
	}
}
