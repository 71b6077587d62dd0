package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	restcat "github.com/apache/iceberg-go/catalog/rest"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/tables"
)

// rssBytes is the resident memory of process pid, from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// stalledMemoryBound is the most a node may hold with the stalled sockets
// of TestHostileStalledSockets open (it held about 300 MB before the
// handshake deadline existed).
const stalledMemoryBound = 300 << 20

// TestHostileStalledSockets: 300 sockets that connect and never send a
// CONNECT are closed by the handshake deadline (10s by default); the
// node's memory stays bounded, and a well-behaved client publishing
// alongside is acknowledged throughout and lands in the table.
func TestHostileStalledSockets(t *testing.T) {
	data := t.TempDir()
	p := startDev(t, data)
	pid := p.cmd.Process.Pid
	before := rssBytes(t, pid)

	var stalled []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", p.MQTT)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stalled = append(stalled, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	good, err := mqttClient(ctx, p.MQTT, "well-behaved")
	if err != nil {
		t.Fatalf("a good client cannot connect beside the stalled sockets: %v", err)
	}
	l := newLedger()
	sent := 0
	start := time.Now()
	peak := before
	for time.Since(start) < 13*time.Second {
		n, err := publishN(ctx, good, l, "well-behaved", sent, 20)
		if err != nil {
			t.Fatalf("good client's publish failed: %v", err)
		}
		sent += n
		peak = max(peak, rssBytes(t, pid))
		time.Sleep(200 * time.Millisecond)
	}
	// Every stalled socket has been closed by the server.
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 1)
		if _, err := c.Read(buf); err == nil {
			t.Fatalf("stalled socket %d got data", i)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("stalled socket %d still open after the handshake deadline", i)
		}
	}
	t.Logf("rss before %d MiB, peak %d MiB with 300 stalled sockets; %d publishes acknowledged meanwhile",
		before>>20, peak>>20, l.acked())
	if peak > stalledMemoryBound {
		t.Fatalf("node held %d MiB (bound %d MiB)", peak>>20, stalledMemoryBound>>20)
	}
	waitFor(t, 30*time.Second, "every acknowledged publish in the table", func() bool {
		return len(readTable(t, data, "factory.telemetry")) >= l.acked()
	})
	checkRows(t, l, readTable(t, data, "factory.telemetry"))
}

// TestHostileKafkaHeaderBomb: a small zstd batch whose one record carries
// a hundred thousand empty headers (tens of millions took a node from
// 100 MB to 5 GB before the header cap) is refused with INVALID_RECORD,
// stored nowhere, and the node's memory stays bounded, while a kgo
// producer alongside keeps producing.
func TestHostileKafkaHeaderBomb(t *testing.T) {
	data := t.TempDir()
	p := startDev(t, data)
	pid := p.cmd.Process.Pid
	bomb := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 4},
		kafkatest.Rec{Value: []byte("v"), Headers: make([]tributary.Header, 100_000)})
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb of %d bytes", len(bomb))
	}
	rc := kafkatest.Dial(t, p.Kafka)
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "factory.telemetry"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = bomb
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	peak := rssBytes(t, pid)
	for range 20 {
		resp := rc.RoundTrip(req).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 87 { // INVALID_RECORD
			t.Fatalf("header bomb answered %d, want INVALID_RECORD (87)", code)
		}
		peak = max(peak, rssBytes(t, pid))
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic("factory.telemetry"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		if err := kc.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf(`{"ok":%d}`, i))}).FirstErr(); err != nil {
			t.Fatalf("good producer beside the bombs: %v", err)
		}
	}
	t.Logf("rss peak %d MiB over 20 header bombs", peak>>20)
	if peak > stalledMemoryBound {
		t.Fatalf("node held %d MiB (bound %d MiB)", peak>>20, stalledMemoryBound>>20)
	}
	waitFor(t, 30*time.Second, "the good records in the table", func() bool {
		return len(readTable(t, data, "factory.telemetry")) == 50
	})
	for _, r := range readTable(t, data, "factory.telemetry") {
		if len(r.Headers) != 0 {
			t.Fatalf("a record with %d headers was stored", len(r.Headers))
		}
	}
}

// TestHostileRESTCatalog: through the dev node's REST catalog, with
// iceberg-go's own client, a client can neither move a table onto the
// node's data directory nor raise a mark or take a partition; the node's
// data and its acknowledged records are untouched.
func TestHostileRESTCatalog(t *testing.T) {
	data := t.TempDir()
	p := startDev(t, data)
	host, port, _ := strings.Cut(p.MQTT, ":")
	if out, err := exec.Command(mosquittoPub(t), "-h", host, "-p", port, "-q", "1", "-t", "factory/l1/d1/telemetry", "-m", `{"c":1}`).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	waitFor(t, 30*time.Second, "the row", func() bool { return len(readTable(t, data, "factory.telemetry")) == 1 })
	ctx := context.Background()
	cl, err := restcat.NewCatalog(ctx, "tributary", "http://"+p.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.PrimitiveTypes.Int64})
	if _, err := cl.CreateTable(ctx, table.Identifier{"factory", "evil"}, sc, catalog.WithLocation("file://"+data),
		catalog.WithProperties(iceberg.Properties{tables.PropOrphanGraceMs: "1"})); err == nil {
		t.Fatal("table created over the data directory")
	}
	tb, err := cl.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	for _, props := range []iceberg.Properties{
		{tables.PropHighWater + "0": "1000000"},
		{tables.PropOwner + "0": "evil", tables.PropEpoch + "0": "99"},
	} {
		tx := tb.NewTransaction()
		if err := tx.SetProperties(props); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err == nil {
			t.Fatalf("commit of %v accepted", props)
		}
	}
	for _, f := range []string{"wal/wal.db", "catalog.db"} {
		if _, err := os.Stat(filepath.Join(data, f)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	// The node keeps committing its own records.
	if out, err := exec.Command(mosquittoPub(t), "-h", host, "-p", port, "-q", "1", "-t", "factory/l1/d1/telemetry", "-m", `{"c":2}`).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	waitFor(t, 30*time.Second, "the second row", func() bool { return len(readTable(t, data, "factory.telemetry")) == 2 })
}

// TestHostileMaintenanceDelete: through the dev node's REST catalog, with
// a plain HTTP client, a client shortens the table's history with the
// standard Iceberg keys and points a statistics file of an old snapshot
// at a file outside the warehouse. The statistics are refused, the
// history floored at the node's policy, and after maintenance passes the
// victim still exists.
func TestHostileMaintenanceDelete(t *testing.T) {
	data := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, data, "--maintenance-interval", "1s")
	host, port, _ := strings.Cut(p.MQTT, ":")
	for i := range 2 {
		if out, err := exec.Command(mosquittoPub(t), "-h", host, "-p", port, "-q", "1", "-t", "factory/l1/d1/telemetry", "-m", fmt.Sprintf(`{"c":%d}`, i)).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub: %v %s", err, out)
		}
		waitFor(t, 30*time.Second, "the row", func() bool { return len(readTable(t, data, "factory.telemetry")) == i+1 })
	}
	ctx := context.Background()
	cl, err := restcat.NewCatalog(ctx, "tributary", "http://"+p.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := cl.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	old := tb.Metadata().Snapshots()[0].SnapshotID
	// The node's own commits (uplink, maintenance) race the client's: a
	// 409 is the catalog's compare-and-swap, and the client tries again.
	post := func(updates string) (code int, body string) {
		waitFor(t, 30*time.Second, "a commit that does not conflict", func() bool {
			req, err := http.NewRequest("POST", "http://"+p.Catalog+"/v1/namespaces/factory/tables/telemetry",
				strings.NewReader(`{"requirements":[],"updates":[`+updates+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			code, body = resp.StatusCode, string(b)
			return code != http.StatusConflict
		})
		return code, body
	}
	if code, body := post(`{"action":"set-properties","updates":{"history.expire.max-snapshot-age-ms":"1","history.expire.min-snapshots-to-keep":"1"}}`); code != 200 {
		t.Fatalf("set-properties: %d %s", code, body)
	}
	statsCode, statsBody := post(fmt.Sprintf(`{"action":"set-statistics","snapshot-id":%d,"statistics":{"snapshot-id":%d,"statistics-path":%q,"file-size-in-bytes":8,"file-footer-size-in-bytes":1,"blob-metadata":[]}}`,
		old, old, "file://"+victim))
	// Passes run (the first comes after up to an interval).
	start := labelledMetric(t, p, `tributary_maintenance_passes_total{stream="factory.telemetry"}`)
	waitFor(t, 60*time.Second, "two maintenance passes", func() bool {
		return labelledMetric(t, p, `tributary_maintenance_passes_total{stream="factory.telemetry"}`) >= start+2
	})
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a file outside the warehouse was deleted by maintenance: %v", err)
	}
	if statsCode != 403 {
		t.Fatalf("set-statistics naming a file outside the table: %d %s", statsCode, statsBody)
	}
	if n := len(loadSQLiteTable(t, filepath.Join(data, "catalog.db"), "factory.telemetry", nil).Metadata().Snapshots()); n < 3 {
		t.Fatalf("%d snapshots left: the table's 1 ms history was honoured below the node's 1h", n)
	}
}

// TestHostileOpenDevBrowser (issue 35, finding 14): an open dev node is
// reachable from a browser on the same machine. A page whose DNS name is
// rebound to 127.0.0.1 (a foreign Host) is refused on every HTTP
// listener; a cross-site text/plain POST to the REST catalog is refused;
// both MQTT WebSocket listeners refuse a foreign Origin. Loopback Hosts,
// JSON bodies, same-host origins and clients without Origin still work.
func TestHostileOpenDevBrowser(t *testing.T) {
	p := startDev(t, t.TempDir(), "--mqtt-ws-addr", "127.0.0.1:0", "--cloud-mqtt-ws-addr", "127.0.0.1:0")
	get := func(addr, host, path string) int {
		req, err := http.NewRequest("GET", "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, l := range map[string]struct{ addr, path string }{
		"status port": {p.HTTP, "/healthz"}, "REST catalog": {p.Catalog, "/v1/config"}, "cloud HTTP": {p.CloudHTTP, "/healthz"},
	} {
		_, port, _ := strings.Cut(l.addr, ":")
		if code := get(l.addr, "rebound.example:"+port, l.path); code != http.StatusMisdirectedRequest {
			t.Errorf("%s: a foreign Host got %d", name, code)
		}
		for _, h := range []string{l.addr, "localhost:" + port, "[::1]:" + port} {
			if code := get(l.addr, h, l.path); code != 200 {
				t.Errorf("%s: Host %s got %d", name, h, code)
			}
		}
	}
	post := func(ct string) int {
		req, err := http.NewRequest("POST", "http://"+p.Catalog+"/v1/namespaces", strings.NewReader(`{"namespace":["browser"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("text/plain"); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST to the catalog: %d", code)
	}
	if code := post("application/json; charset=utf-8"); code != 200 {
		t.Errorf("JSON POST to the catalog: %d", code)
	}
	for name, addr := range map[string]string{"edge": p.MQTTWS, "cloud": p.CloudMQTTWS} {
		dial := func(origin string) int {
			h := http.Header{}
			if origin != "" {
				h.Set("Origin", origin)
			}
			d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second}
			c, resp, err := d.Dial("ws://"+addr+"/mqtt", h)
			if err == nil {
				c.Close()
				return 101
			}
			if resp == nil {
				t.Fatalf("%s websocket: %v", name, err)
			}
			return resp.StatusCode
		}
		if code := dial("http://evil.example"); code != http.StatusForbidden {
			t.Errorf("%s websocket: a foreign Origin got %d", name, code)
		}
		if code := dial("http://" + addr); code != 101 {
			t.Errorf("%s websocket: its own origin got %d", name, code)
		}
		if code := dial(""); code != 101 {
			t.Errorf("%s websocket: no Origin got %d", name, code)
		}
	}
}
