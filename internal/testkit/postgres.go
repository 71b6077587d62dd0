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
// (`make test` installs postgresql) on a free loopback port, as the
// postgres user when the tests run as root (PostgreSQL refuses root), and
// stops it when the test ends. It returns a DSN for database postgres of
// user tributary (trust authentication). A machine without the server
// binaries fails the test and says which package to install: the stores'
// conformance suites run over PostgreSQL as well as SQLite, never silently
// over one of them.
func Postgres(tb testing.TB) string {
	tb.Helper()
	return StartPostgres(tb).DSN
}

// PG is a throwaway PostgreSQL server (StartPostgres) a test may stop
// and start again, as a database outage.
type PG struct {
	DSN         string
	tb          testing.TB
	ctl         func(args ...string) *exec.Cmd
	data, start []string
}

// Stop stops the server (fast shutdown: connections are closed).
func (pg *PG) Stop() {
	pg.tb.Helper()
	if out, err := pg.ctl(append(pg.data, "-w", "-m", "fast", "stop")...).CombinedOutput(); err != nil {
		pg.tb.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts the stopped server again on its port.
func (pg *PG) Start() {
	pg.tb.Helper()
	if out, err := pg.ctl(pg.start...).CombinedOutput(); err != nil {
		pg.tb.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
}

// StartPostgres is Postgres, returning the server.
func StartPostgres(tb testing.TB) *PG {
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
	asPostgres := func(name string, args ...string) *exec.Cmd {
		if os.Geteuid() != 0 {
			return exec.Command(filepath.Join(bindir, name), args...)
		}
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bindir, name)}, args...)...)
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
		if out, err := asPostgres(name, args...).CombinedOutput(); err != nil {
			tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-A", "trust", "-U", "tributary", "--no-sync")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	start := []string{"-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o",
		fmt.Sprintf("-p %s -h 127.0.0.1 -k %s -c fsync=on", port, dir), "start"}
	run("pg_ctl", start...)
	tb.Cleanup(func() { asPostgres("pg_ctl", "-D", data, "-m", "immediate", "stop").Run() })
	return &PG{DSN: fmt.Sprintf("postgres://tributary@127.0.0.1:%s/postgres?sslmode=disable", port), tb: tb,
		ctl: func(args ...string) *exec.Cmd { return asPostgres("pg_ctl", args...) }, data: []string{"-D", data}, start: start}
}

// StateDBs runs suite once over each database a state store opens — an
// SQLite file of its own and a throwaway PostgreSQL server (Postgres) —
// as parallel subtests named sqlite and postgres, so one conformance suite
// proves both behave the same.
func StateDBs(t *testing.T, suite func(t *testing.T, uri string)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		suite(t, "sqlite://"+filepath.Join(t.TempDir(), "catalog.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		suite(t, Postgres(t))
	})
}
