package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecureByDefault: `tributary edge` and `tributary cloud` on a
// non-loopback address without client authentication refuse to start
// with an error that says what to configure; allow_anonymous: true (or a
// users file) lets the same file through.
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%v did not exit: %s", args, out)
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	open := "data_dir: " + dir + "\nmqtt:\n  addr: 0.0.0.0:0\nhttp_addr: 127.0.0.1:0\n"
	f := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(f, []byte(open), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := run("edge", "-config", f)
	for _, want := range []string{"mqtt.addr (0.0.0.0:0)", "security.users_file", "tributary passwd", "allow_anonymous: true"} {
		if code == 0 || !strings.Contains(out, want) {
			t.Fatalf("edge on 0.0.0.0 without auth: exit %d, output does not name %q:\n%s", code, want, out)
		}
	}
	if code, out := run("config", "check", f); code == 0 || !strings.Contains(out, "mqtt.addr (0.0.0.0:0)") {
		t.Fatalf("config check: exit %d\n%s", code, out)
	}
	if err := os.WriteFile(f, []byte(open+"security:\n  allow_anonymous: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := run("config", "check", f); code != 0 {
		t.Fatalf("allow_anonymous: true still refused: %s", out)
	}
	code, out = run("cloud", "--data", filepath.Join(dir, "cloud"), "--catalog-addr", "0.0.0.0:0", "--kafka-addr", "", "--pulsar-addr", "")
	if code == 0 || !strings.Contains(out, "catalog.addr (0.0.0.0:0)") {
		t.Fatalf("cloud on 0.0.0.0 without auth: exit %d\n%s", code, out)
	}
}
