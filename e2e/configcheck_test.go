package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/internal/testkit"
)

// runConfigCheck runs `tributary config check FILE` with extra environment.
func runConfigCheck(t *testing.T, file string, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runConfigCheckArgs(t, []string{"config", "check", file}, env...)
}

func runConfigCheckArgs(t *testing.T, args []string, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, o.String(), e.String()
}

// TestConfigCheck runs `tributary config check` on broken files (non-zero
// exit, the message names the field: FILE:LINE: key path as written, the
// nearest key for a misspelling, never a Go type) and on deploy/edge.yaml (ok).
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, yaml string
		want       []string // each must appear in stderr
	}{
		{"invalid values", "wal:\n  max_bytes: 10\ncatalog:\n  partition_granularity: week\nuplink:\n  commit_interval: 1ms\n",
			[]string{"wal.max_bytes", "catalog.partition_granularity", "week", "uplink.commit_interval"}},
		{"unknown key", "mqtt:\n  adr: 0.0.0.0:1883\n", []string{".yaml:2: mqtt.adr: unknown key (did you mean addr?)"}},
		{"misspelt key", "node_id: a\nmqtt:\n  max_packet_bytes: 1\n", []string{".yaml:3: mqtt.max_packet_bytes: unknown key (did you mean max_packet_size?)"}},
		{"deep misspelt key", "security:\n  tls:\n    listeners:\n      mqtt: {cert_fil: a, key_file: b}\n",
			[]string{".yaml:4: security.tls.listeners.mqtt.cert_fil: unknown key (did you mean cert_file?)"}},
		{"wrong type", "mqtt:\n  max_packet_size: abc\ncluster:\n  replication_factor: abc\n",
			[]string{`.yaml:2: mqtt.max_packet_size: want a size such as 64MiB, 1GiB or 1000, got "abc"`, `.yaml:4: cluster.replication_factor: want an integer, got "abc"`}},
		{"key written twice", "mqtt:\n  addr: :1883\n  addr: :1884\n", []string{".yaml:3: mqtt.addr: key written twice (first at line 2)"}},
		{"cloud misspelt key", "role: cloud\nkafka:\n  max_grups: 5\n", []string{".yaml:3: kafka.max_grups: unknown key (did you mean max_groups?)"}},
		{"bad catalog uri", "catalog:\n  uri: mysql://db/x\n", []string{"catalog.uri", "mysql://db/x"}},
		{"bad route", "mqtt:\n  routes:\n    - filter: a/#\n      stream: nodot\n", []string{"mqtt.routes[0].stream"}},
		{"unset env", "node_id: ${TRIBUTARY_TEST_SURELY_UNSET}\n", []string{"TRIBUTARY_TEST_SURELY_UNSET"}},
		{"bad size", "wal:\n  max_bytes: lots\n", []string{"lots"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, "broken"+string(rune('a'+i))+".yaml")
			if err := os.WriteFile(f, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runConfigCheck(t, f)
			if code == 0 {
				t.Fatalf("config check accepted a broken file (exit 0):\n%s", stdout)
			}
			for _, w := range c.want {
				if strings.HasPrefix(w, ".yaml:") {
					w = f + strings.TrimPrefix(w, ".yaml") // FILE:LINE: key path: message
				}
				if !strings.Contains(stderr, w) {
					t.Errorf("config check message does not name %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "struct {") || strings.Contains(stderr, "yaml:\"") {
				t.Errorf("config check names a Go type:\n%s", stderr)
			}
		})
	}

	t.Run("deploy/edge.yaml", func(t *testing.T) {
		// The example names its TLS, password and JWT files under
		// /etc/tributary, which config check loads: put test ones there.
		root := t.TempDir()
		tlsDir, authDir := filepath.Join(root, "etc/tributary/tls"), filepath.Join(root, "etc/tributary/auth")
		for _, d := range []string{tlsDir, authDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		testkit.NewCA(t).WriteFiles(t, tlsDir, "tls")
		passwd := exec.Command(binPath, "passwd", filepath.Join(authDir, "passwd"), "ops")
		passwd.Stdin = strings.NewReader("an ops password\n")
		if out, err := passwd.CombinedOutput(); err != nil {
			t.Fatalf("tributary passwd: %v\n%s", err, out)
		}
		if err := os.WriteFile(filepath.Join(authDir, "jwt.secret"), bytes.Repeat([]byte("k"), 48), 0o600); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile("../deploy/edge.yaml")
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(root, "edge.yaml")
		if err := os.WriteFile(f, []byte(strings.ReplaceAll(string(raw), " /etc/tributary/", " "+root+"/etc/tributary/")), 0o600); err != nil {
			t.Fatal(err)
		}
		env := []string{"HOSTNAME=edge-test-1", "TRIBUTARY_CATALOG_CREDENTIAL=edge-test-1:secret"}
		// Its catalog's host resolves only on the plant: the online check
		// says so, naming the key; --offline checks the rest.
		if code, _, stderr := runConfigCheck(t, f, env...); code == 0 || !strings.HasPrefix(stderr, "catalog.uri: cannot reach the catalog") {
			t.Fatalf("deploy/edge.yaml checked online here: exit %d, want catalog.uri: cannot reach the catalog:\n%s", code, stderr)
		}
		code, stdout, stderr := runConfigCheckArgs(t, []string{"config", "check", "--offline", f}, env...)
		if code != 0 {
			t.Fatalf("deploy/edge.yaml: exit %d:\n%s%s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, f+": ok") || !strings.Contains(stdout, "node_id: edge-test-1") {
			t.Fatalf("unexpected output:\n%s", stdout)
		}
		// Without its files it is refused, naming the field.
		code, _, stderr = runConfigCheck(t, "../deploy/edge.yaml", "HOSTNAME=edge-test-1", "TRIBUTARY_CATALOG_CREDENTIAL=edge-test-1:secret")
		if code == 0 || !strings.Contains(stderr, "security.") {
			t.Fatalf("deploy/edge.yaml with its files missing: exit %d, %s", code, stderr)
		}
	})
}
