package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/config"
)

// TestReadSecurityWithOrWithoutLevel: a --security file may hold the
// section's keys or the same under security: (as an edge config has it);
// an unknown key is still refused.
func TestReadSecurityWithOrWithoutLevel(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"bare.yaml":    "users_file: /etc/tributary/passwd\nallow_anonymous: false\n",
		"wrapped.yaml": "security:\n  users_file: /etc/tributary/passwd\n  allow_anonymous: false\n",
	} {
		f := filepath.Join(dir, name)
		os.WriteFile(f, []byte(body), 0o644)
		var s config.Security
		if err := readSecurity(f, &s); err != nil || s.UsersFile != "/etc/tributary/passwd" {
			t.Errorf("%s: %+v, %v", name, s, err)
		}
	}
	f := filepath.Join(dir, "typo.yaml")
	os.WriteFile(f, []byte("security:\n  users_fil: x\n"), 0o644)
	var s config.Security
	if err := readSecurity(f, &s); err == nil || !strings.Contains(err.Error(), "users_fil") {
		t.Errorf("a typo under security: %v", err)
	}
}

// TestPasswdCreatesItsDirectory: tributary passwd makes a missing
// directory of its file (it failed with "open ….tmp: no such file or
// directory"), and says plainly when it cannot.
func TestPasswdCreatesItsDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "etc", "tributary", "passwd")
	var out, errs strings.Builder
	if code := cmdPasswd([]string{file, "sensor-1"}, strings.NewReader("a sensor password\n"), &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if _, err := os.Stat(file); err != nil || !strings.Contains(out.String(), "created directory") {
		t.Fatalf("%v; %s", err, out.String())
	}
	ro := filepath.Join(t.TempDir(), "ro")
	os.Mkdir(ro, 0o500)
	if os.Getuid() == 0 {
		ro = "/proc/tributary-test" // root may write anywhere else
	}
	out.Reset()
	errs.Reset()
	if code := cmdPasswd([]string{filepath.Join(ro, "sub", "passwd"), "u"}, strings.NewReader("pw\n"), &out, &errs); code != 1 ||
		!strings.Contains(errs.String(), "does not exist and cannot be created") {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
}

// TestDevSecurityFilesBeforeBanner: dev --security naming a certificate
// that does not exist fails before it prints where to connect.
func TestDevSecurityFilesBeforeBanner(t *testing.T) {
	f := filepath.Join(t.TempDir(), "security.yaml")
	os.WriteFile(f, []byte("security:\n  tls:\n    listeners:\n      mqtt: {cert_file: /no/such/mqtt.crt, key_file: /no/such/mqtt.key}\n"), 0o644)
	var out, errs strings.Builder
	code := run([]string{"dev", "--data", t.TempDir(), "--security", f, "--sim-devices", "0"}, &out, &errs)
	if code != 2 || !strings.Contains(errs.String(), "/no/such/mqtt.crt") || strings.Contains(out.String(), "Publish:") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
}
