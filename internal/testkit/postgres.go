package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Postgres runs a throwaway PostgreSQL server from Debian's packages
// (`make test` installs postgresql) on a loopback port, as the postgres
// user when the tests run as root (PostgreSQL refuses root), stopped when
// tb ends. It returns a DSN.
func Postgres(tb testing.TB) string {
	tb.Helper()
	bindir := ""
	for _, d := range []string{"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			bindir = d
			break
		}
	}
	if bindir == "" {
		tb.Fatal("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (Debian package postgresql; `make test` installs it)")
	}
	dir, err := os.MkdirTemp("", "tributary-pg")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	command := func(name string, args ...string) *exec.Cmd {
		if os.Geteuid() == 0 {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bindir, name)}, args...)...)
		}
		return exec.Command(filepath.Join(bindir, name), args...)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	run := func(name string, args ...string) {
		tb.Helper()
		if out, err := command(name, args...).CombinedOutput(); err != nil {
			tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-A", "trust", "-U", "tributary", "--no-sync")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	_, port, _ := strings.Cut(ln.Addr().String(), ":")
	ln.Close()
	run("pg_ctl", "-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o",
		fmt.Sprintf("-p %s -h 127.0.0.1 -k %s -c fsync=on", port, dir), "start")
	tb.Cleanup(func() { command("pg_ctl", "-D", data, "-m", "immediate", "stop").Run() })
	return fmt.Sprintf("postgres://tributary@127.0.0.1:%s/postgres?sslmode=disable", port)
}
