// Package e2e tests Tributary as a user runs it: the real binary as a child
// process on loopback ports, real MQTT clients (paho.golang, mosquitto_pub),
// and the tables read back with iceberg-go.
package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"database/sql"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"

	_ "modernc.org/sqlite"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tributary-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "tributary")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/tributary")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tributary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `tributary dev` child process.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	dataDir string
	MQTT    string // host:port
	MQTTWS  string // the WebSocket listener ("" when off)
	HTTP    string
	Kafka   string
	Catalog string // Iceberg REST catalog host:port
	// CloudKafka is the in-process cloud Kafka consume server host:port.
	CloudKafka string
	// Pulsar is the in-process cloud Pulsar consume server host:port.
	Pulsar string
	// CloudMQTT and CloudMQTTWS are the cloud MQTT listeners (TCP and
	// WebSocket; "" when off): `tributary dev --cloud-mqtt-addr`, or
	// `tributary cloud --mqtt-addr`.
	CloudMQTT, CloudMQTTWS string
	// CloudHTTP is the cloud HTTP read API host:port ("" when off).
	CloudHTTP string
	// Gossip and Peer are the cluster listeners ("" for a single node).
	Gossip, Peer string
	// TLS is the client TLS of the process's listeners (nil: plain text).
	TLS *tls.Config
	// dial, when set, dials the process's ports (e.g. from inside the
	// network namespace it runs in; see netns_test.go).
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	exited   chan struct{}
	logMu    sync.Mutex
	logLines []string
}

// startDev starts `tributary dev` on free loopback ports with no simulator
// and waits until it says it is ready.
func startDev(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"dev", "--data", dataDir, "--mqtt-addr", "127.0.0.1:0", "--mqtt-ws-addr", "",
		"--http-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0", "--catalog-addr", "127.0.0.1:0", "--cloud-kafka-addr", "127.0.0.1:0", "--pulsar-addr", "127.0.0.1:0", "--cloud-mqtt-addr", "127.0.0.1:0", "--cloud-http-addr", "127.0.0.1:0", "--sim-devices", "0", "--commit-interval", "200ms"}, extra...)
	return startProc(t, dataDir, args...)
}

// startSecureDev is startDev with the WebSocket listener on and TLS on
// every listener: a security section (`tributary dev --security FILE`)
// with a server certificate of a fresh test CA, which it returns for the
// clients to trust (ca.Files() is its ca.crt).
func startSecureDev(t *testing.T, dataDir string, extra ...string) (*proc, *testkit.CA) {
	t.Helper()
	ca := testkit.NewCA(t)
	sec := filepath.Join(t.TempDir(), "security.yaml")
	if err := os.WriteFile(sec, []byte(securityYAML(ca.Server(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, dataDir, append([]string{"--security", sec, "--mqtt-ws-addr", "127.0.0.1:0"}, extra...)...)
	p.TLS = &tls.Config{RootCAs: ca.Pool}
	return p, ca
}

// securityYAML is a security section's body (the keys under security:)
// with TLS on every listener from srv's files; indent it with
// indentYAML to put it in a config.
func securityYAML(srv testkit.CertFiles) string {
	return fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n", srv.CertFile, srv.KeyFile)
}

// indentYAML indents every line of y by two spaces.
func indentYAML(y string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(y, "\n"), "\n", "\n  ") + "\n"
}

// httpGet gets path from p's HTTP port (over https when p.TLS is set).
func (p *proc) httpGet(path string) (*http.Response, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	scheme := "http://"
	if p.TLS != nil {
		c.Transport = &http.Transport{TLSClientConfig: p.TLS.Clone()}
		scheme = "https://"
	}
	if p.dial != nil {
		c.Transport = &http.Transport{DialContext: p.dial, TLSClientConfig: p.TLS.Clone()}
	}
	return c.Get(scheme + p.HTTP + path)
}

// startEdge starts `tributary edge -config FILE`.
func startEdge(t *testing.T, dataDir, config string) *proc {
	t.Helper()
	return startProc(t, dataDir, "edge", "-config", config)
}

// startProc starts the binary with args and waits for its ready file
// (--ready-file, in a temporary directory): the JSON object of the bound
// listener addresses it writes once every listener is up.
func startProc(t *testing.T, dataDir string, args ...string) *proc {
	t.Helper()
	return startProcWrapped(t, nil, dataDir, args...)
}

// startProcWrapped is startProc with the binary run by a wrapper command
// (e.g. ip netns exec NS): wrap, then the binary and args.
func startProcWrapped(t *testing.T, wrap []string, dataDir string, args ...string) *proc {
	t.Helper()
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	argv := append([]string{binPath, args[0], "--ready-file", readyFile}, args[1:]...)
	if len(wrap) > 0 {
		argv = append(slices.Clone(wrap), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, dataDir: dataDir, exited: make(chan struct{})}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.logMu.Lock()
			p.logLines = append(p.logLines, sc.Text())
			p.logMu.Unlock()
		}
		io.Copy(io.Discard, stderr) // a line too long for the scanner
	}()
	go func() {
		<-logged // Wait closes the pipe: read it to the end first
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", strings.Join(args[:min(len(args), 2)], " "), p.tail(80))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		raw, err := os.ReadFile(readyFile)
		if err == nil {
			var a map[string]string
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatalf("ready file %s: %v:\n%s", readyFile, err, raw)
			}
			if args[0] == "cloud" {
				p.Catalog, p.CloudKafka, p.Pulsar, p.CloudHTTP = a["catalog"], a["kafka"], a["pulsar"], a["http"]
				p.CloudMQTT, p.CloudMQTTWS = a["mqtt"], a["mqtt_ws"]
			} else {
				p.MQTT, p.HTTP, p.Kafka, p.Catalog, p.CloudKafka, p.Pulsar = a["mqtt"], a["http"], a["kafka"], a["catalog"], a["cloud_kafka"], a["pulsar"]
				p.MQTTWS = a["mqtt_ws"]
				p.CloudMQTT, p.CloudMQTTWS = a["cloud_mqtt"], a["cloud_mqtt_ws"]
				p.Gossip, p.Peer = a["gossip"], a["peer"]
				p.CloudHTTP = a["cloud_http"]
			}
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("tributary %s exited before ready:\n%s", args[0], p.logs())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("tributary %s not ready after 60s:\n%s", args[0], p.logs())
		}
	}
}

// tail is the last n lines the process logged.
func (p *proc) tail(n int) string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return strings.Join(p.logLines[max(0, len(p.logLines)-n):], "\n")
}

// logs is everything the process logged.
func (p *proc) logs() string { return p.tail(math.MaxInt) }

// logged reports whether the process logs s within d. Lines reach the
// captured log a moment after the process wrote them (its ready file can
// come first), so a line logged just before ready is waited for.
func (p *proc) logged(s string, d time.Duration) bool {
	return poll(d, func() bool { return strings.Contains(p.logs(), s) })
}

// kill sends SIGKILL (no final commit, no flush: a crash).
func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// stop sends SIGTERM and waits for the clean shutdown with its final commit.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("tributary did not stop within 60s of SIGTERM:\n%s", p.logs())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("tributary exited with %d:\n%s", code, p.logs())
	}
}

// runExit runs the binary with args, which must exit within timeout (a
// start that should have been refused but serves fails the test), and
// returns its exit code and combined output.
func runExit(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v did not exit within %s (it started, serving the network): %s", args, timeout, out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	return 0, string(out)
}

// waitFor polls cond until it holds or the timeout (at least
// testkit.MinWait: a deadline ends a hung test, it does not time the code)
// passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, testkit.MinWait)
	if !poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// poll checks cond every 20 ms until it holds (true) or d has passed
// (false).
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// readTable reads a stream's table with iceberg-go directly from the dev
// data directory's SQLite catalog.
func readTable(t *testing.T, dataDir, stream string) []*tributary.Record {
	t.Helper()
	return readTableProps(t, dataDir, stream, nil)
}

// readTableProps is readTable with catalog properties (e.g. s3.* FileIO
// settings for a warehouse on S3).
func readTableProps(t *testing.T, dataDir, stream string, props map[string]string) []*tributary.Record {
	t.Helper()
	tbl, db := sqliteTable(t, filepath.Join(dataDir, "catalog.db"), stream, props)
	defer db.Close()
	return scanAll(t, tbl)
}

// loadSQLiteTable loads a stream's table with iceberg-go from a SQLite
// catalog file, with catalog properties props (the catalog is closed when
// the test ends).
func loadSQLiteTable(t *testing.T, catalogDB, stream string, props map[string]string) *table.Table {
	t.Helper()
	tbl, db := sqliteTable(t, catalogDB, stream, props)
	t.Cleanup(func() { db.Close() })
	return tbl
}

// sqliteTable is loadSQLiteTable returning the catalog's database, for
// the caller to close.
func sqliteTable(t *testing.T, catalogDB, stream string, props map[string]string) (*table.Table, *sql.DB) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+catalogDB+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := sqlcat.NewCatalog("tributary", db, sqlcat.SQLite, props)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	ns, name, _ := strings.Cut(stream, ".")
	tbl, err := cat.LoadTable(context.Background(), table.Identifier{ns, name})
	if err != nil {
		db.Close()
		t.Fatalf("load %s: %v", stream, err)
	}
	return tbl, db
}

// scanAll reads every row of a table with iceberg-go's scan.
func scanAll(t *testing.T, tbl *table.Table) []*tributary.Record {
	t.Helper()
	_, it, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*tributary.Record
	for b, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		recs, err := tables.RecordsFromArrow(b)
		b.Release()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

// checkDense asserts that every partition's offsets are exactly 0..n-1.
func checkDense(t *testing.T, rows []*tributary.Record) map[int32]int {
	t.Helper()
	seen := map[int32]map[int64]bool{}
	for _, r := range rows {
		if seen[r.Partition] == nil {
			seen[r.Partition] = map[int64]bool{}
		}
		if seen[r.Partition][r.Offset] {
			t.Fatalf("partition %d offset %d appears twice", r.Partition, r.Offset)
		}
		seen[r.Partition][r.Offset] = true
	}
	counts := map[int32]int{}
	for p, offs := range seen {
		for i := int64(0); i < int64(len(offs)); i++ {
			if !offs[i] {
				t.Fatalf("partition %d: offset %d missing among %d rows (offsets not dense)", p, i, len(offs))
			}
		}
		counts[p] = len(offs)
	}
	return counts
}
