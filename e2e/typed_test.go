package e2e

// Typed columns (issue 17): a stream in infer mode gets typed columns
// next to the envelope, new fields evolve the schema without a restart,
// payloads that cannot be typed land in <stream>_dlq with the reason, and
// nothing is lost or changed for the envelope's readers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/tables"
)

// snapshotFiles are the local paths of the data files of tbl's current
// snapshot, as iceberg-go plans them.
func snapshotFiles(t *testing.T, tbl *table.Table) []string {
	t.Helper()
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, task := range tasks {
		files = append(files, strings.TrimPrefix(task.File.FilePath(), "file://"))
	}
	return files
}

// duckQuery runs sql with DuckDB over files (FILES in sql stands for
// read_parquet of them, union_by_name) and returns the rows.
func duckQuery(t *testing.T, sql string, files []string) []map[string]any {
	t.Helper()
	out := duckScript(t, "query.mjs", append([]string{sql}, files...)...)
	var rows []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("duckdb output %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}

// duckScript runs one of the DuckDB scripts of duckdbDir with args and
// returns its standard output.
func duckScript(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	ensureDuckDB(t)
	cmd := exec.Command("node", append([]string{script}, args...)...)
	cmd.Dir = duckdbDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb %s %.200q: %v\n%s", script, args, err, stderr.String())
	}
	return out
}

// schemaTypes maps the column names of tbl's current schema to their
// types and field ids.
func schemaTypes(tbl *table.Table) map[string]string {
	out := map[string]string{}
	for _, f := range tbl.Schema().Fields() {
		out[f.Name] = fmt.Sprintf("%s#%d", f.Type, f.ID)
	}
	return out
}

func fieldID(tbl *table.Table, name string) int {
	f, ok := tbl.Schema().FindFieldByName(name)
	if !ok {
		return -1
	}
	return f.ID
}

// TestTypedInfer (issue 17, test 1): firmware-sim telemetry over MQTT into
// factory.telemetry, which `tributary dev` types by inference: DuckDB's
// SELECT device, avg(temp_c) … GROUP BY device over the current
// snapshot's files matches the averages computed from the payloads;
// iceberg-go and the REST catalog report the typed schema.
func TestTypedInfer(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	sum, err := firmwaresim.Run(ctx, firmwaresim.Config{Broker: "tcp://" + p.MQTT, Devices: 6, Messages: 60, QoS: 1, InFlight: 4, Seed: 17})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Acked != 360 {
		t.Fatalf("firmware-sim: %+v", sum)
	}
	waitRows(t, dir, "factory.telemetry", int(sum.Acked)+int(sum.Failed)) // a failed attempt may have landed too
	waitFor(t, 20*time.Second, "WAL drained", func() bool { return walDrained(t, p) })

	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", nil)
	types := schemaTypes(tbl)
	for col, typ := range map[string]string{"device": "string", "line": "string", "seq": "double", "ts": "timestamptz",
		"temp_c": "double", "humidity": "double", "vibration_mm_s": "double", "status": "string"} {
		got, ok := types[col]
		if !ok || !strings.HasPrefix(got, typ+"#") {
			t.Errorf("column %s: %q, want %s (schema %v)", col, got, typ, types)
		}
		if id := fieldID(tbl, col); id <= 15 {
			t.Errorf("column %s has field id %d, want one after the envelope's 15", col, id)
		}
	}

	// The averages from the payloads themselves (the value column is the
	// published bytes: TestDuckDBReadsSnapshot, TestTypedConsumersByteExact).
	rows := readTable(t, dir, "factory.telemetry")
	type acc struct {
		sum float64
		n   int
	}
	want := map[string]*acc{}
	for _, r := range rows {
		var m struct {
			Device string  `json:"device"`
			Temp   float64 `json:"temp_c"`
		}
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if want[m.Device] == nil {
			want[m.Device] = &acc{}
		}
		want[m.Device].sum += m.Temp
		want[m.Device].n++
	}
	got := duckQuery(t, `SELECT device, avg(temp_c) AS avg_temp, count(*) AS n, count(ts) AS with_ts FROM FILES GROUP BY device ORDER BY device`,
		snapshotFiles(t, tbl))
	if len(got) != len(want) || len(want) != 6 {
		t.Fatalf("duckdb: %d devices, payloads: %d: %v", len(got), len(want), got)
	}
	for _, g := range got {
		dev, _ := g["device"].(string)
		w := want[dev]
		avg, _ := g["avg_temp"].(float64)
		if w == nil || math.Abs(avg-w.sum/float64(w.n)) > 1e-9 || fmt.Sprint(g["n"]) != fmt.Sprint(w.n) || fmt.Sprint(g["with_ts"]) != fmt.Sprint(w.n) {
			t.Errorf("duckdb %v, payloads: %v", g, w)
		}
	}

	// The REST catalog serves the typed schema.
	rc, err := rest.NewCatalog(ctx, "tributary", "http://"+p.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rc.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := rt.Schema().FindFieldByName("temp_c"); !ok || f.Type.String() != "double" || f.ID != fieldID(tbl, "temp_c") {
		t.Errorf("REST catalog: temp_c %+v (present %v)", f, ok)
	}

	// Nothing went to the dead-letter table; the status page says so.
	st := statusTyped(t, p)
	if len(st) != 1 || st[0].Stream != "factory.telemetry" || st[0].Mode != "infer" || st[0].DeadLetters != 0 || st[0].TypedColumnsAdded != 8 {
		t.Errorf("status typed: %+v", st)
	}
	if v := metricLabeled(t, p, "tributary_dlq_records_total", `stream="factory.telemetry"`); v != 0 {
		t.Errorf("tributary_dlq_records_total = %v", v)
	}
}

type typedStatus struct {
	Stream            string  `json:"stream"`
	Mode              string  `json:"mode"`
	DeadLetterTable   string  `json:"dead_letter_table"`
	DeadLetters       int64   `json:"dead_letters"`
	DeadLettersPerMin float64 `json:"dead_letters_per_minute"`
	TypedColumnsAdded int64   `json:"typed_columns_added"`
}

func statusTyped(t *testing.T, p *proc) []typedStatus {
	t.Helper()
	resp, err := p.httpGet("/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Typed []typedStatus `json:"typed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s.Typed
}

// metricLabeled is the value of the sample of family name with labels
// (as written in the exposition, e.g. `stream="a.b"`), or -1.
func metricLabeled(t *testing.T, p *proc, name, labels string) float64 {
	t.Helper()
	resp, err := p.httpGet("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prefix := name + "{" + labels + "} "
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// publishPayloads publishes each payload with QoS 1 from one client and
// fails unless every one is acknowledged.
func publishPayloads(t *testing.T, addr, client string, payloads [][]byte) {
	t.Helper()
	publishTo(t, addr, client, "factory/line1/"+client+"/telemetry", payloads)
}

// publishTo is publishPayloads to topic.
func publishTo(t *testing.T, addr, client, topic string, payloads [][]byte) {
	t.Helper()
	ctx := context.Background()
	cl, err := mqttClient(ctx, addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Disconnect(&paho.Disconnect{ReasonCode: 0})
	for i, pl := range payloads {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		pr, err := cl.Publish(pctx, &paho.Publish{Topic: topic, QoS: 1, Payload: pl})
		cancel()
		if err != nil || pr.ReasonCode >= 0x80 {
			t.Fatalf("publish %d (%.40q): %v %v", i, pl, err, pr)
		}
	}
}

func jsonPayloads(format string, from, n int) [][]byte {
	var out [][]byte
	for i := from; i < from+n; i++ {
		out = append(out, []byte(fmt.Sprintf(format, i)))
	}
	return out
}

// TestTypedEvolution (issue 17, test 2): a field that appears mid-run adds
// a column without a restart and old rows read it as null; the same after
// a restart; and two edge nodes that add different fields at the same
// moment both see their columns land.
func TestTypedEvolution(t *testing.T) {
	t.Run("one node, across a restart", func(t *testing.T) {
		dir := t.TempDir()
		p := startDev(t, dir)
		publishPayloads(t, p.MQTT, "evo", jsonPayloads(`{"device":"d1","a":%d}`, 0, 20))
		waitRows(t, dir, "factory.telemetry", 20)
		cat := filepath.Join(dir, "catalog.db")
		if id := fieldID(loadSQLiteTable(t, cat, "factory.telemetry", nil), "b"); id != -1 {
			t.Fatalf("column b exists before any payload has it (id %d)", id)
		}
		publishPayloads(t, p.MQTT, "evo", jsonPayloads(`{"device":"d1","a":%d,"b":"x"}`, 20, 20))
		waitRows(t, dir, "factory.telemetry", 40)
		tbl := loadSQLiteTable(t, cat, "factory.telemetry", nil)
		if fieldID(tbl, "b") <= fieldID(tbl, "a") {
			t.Fatalf("column b not added after a: %v", schemaTypes(tbl))
		}
		got := duckQuery(t, `SELECT count(*) FILTER (WHERE b IS NULL AND a < 20) AS old_null, count(*) FILTER (WHERE b = 'x' AND a >= 20) AS new_x, count(*) AS n FROM FILES`,
			snapshotFiles(t, tbl))
		if len(got) != 1 || fmt.Sprint(got[0]["old_null"]) != "20" || fmt.Sprint(got[0]["new_x"]) != "20" {
			t.Fatalf("duckdb after the new field: %v", got)
		}
		p.stop()

		p = startDev(t, dir)
		publishPayloads(t, p.MQTT, "evo", jsonPayloads(`{"device":"d1","a":%d,"c":{"on":true}}`, 40, 10))
		waitRows(t, dir, "factory.telemetry", 50)
		tbl = loadSQLiteTable(t, cat, "factory.telemetry", nil)
		if !strings.HasPrefix(schemaTypes(tbl)["c"], "struct<") {
			t.Fatalf("column c after the restart: %v", schemaTypes(tbl))
		}
		got = duckQuery(t, `SELECT count(*) FILTER (WHERE c IS NULL) AS c_null, count(*) FILTER (WHERE c.on) AS c_on, count(b) AS with_b FROM FILES`,
			snapshotFiles(t, tbl))
		if len(got) != 1 || fmt.Sprint(got[0]["c_null"]) != "40" || fmt.Sprint(got[0]["c_on"]) != "10" || fmt.Sprint(got[0]["with_b"]) != "20" {
			t.Fatalf("duckdb after the restart: %v", got)
		}
		// iceberg-go reads the old files with the new columns as null.
		rows := readTable(t, dir, "factory.telemetry")
		if len(rows) != 50 {
			t.Fatalf("%d rows, want 50", len(rows))
		}
		p.stop()
	})

	t.Run("two nodes at once", func(t *testing.T) {
		shared := t.TempDir()
		var nodes []*proc
		for _, id := range []string{"evo-1", "evo-2"} {
			dir := filepath.Join(shared, id)
			cfg := edgeConfig(t, mkdir(t, dir), id, fmt.Sprintf("catalog:\n  uri: sqlite://%[1]s/catalog.db\n  warehouse: file://%[1]s/warehouse\n", shared))
			raw, _ := os.ReadFile(cfg)
			raw = bytes.Replace(raw, []byte(`stream: factory.telemetry}`), []byte(`stream: factory.telemetry, payload: infer}`), 1)
			if err := os.WriteFile(cfg, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, startEdge(t, dir, cfg))
		}
		for round := range 3 {
			var wg sync.WaitGroup
			for i, p := range nodes {
				wg.Go(func() {
					field := fmt.Sprintf("n%d_r%d", i+1, round)
					publishPayloads(t, p.MQTT, fmt.Sprintf("evo%d", i), jsonPayloads(`{"device":"d","`+field+`":%d}`, 0, 5))
				})
			}
			wg.Wait()
		}
		for _, p := range nodes {
			waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
		}
		tbl := loadSQLiteTable(t, filepath.Join(shared, "catalog.db"), "factory.telemetry", nil)
		var sel []string
		for round := range 3 {
			for n := 1; n <= 2; n++ {
				f := fmt.Sprintf("n%d_r%d", n, round)
				if !strings.HasPrefix(schemaTypes(tbl)[f], "double#") {
					t.Fatalf("column %s missing: %v", f, schemaTypes(tbl))
				}
				sel = append(sel, fmt.Sprintf("count(%s) AS %s", f, f))
			}
		}
		got := duckQuery(t, "SELECT count(*) AS n, "+strings.Join(sel, ", ")+" FROM FILES", snapshotFiles(t, tbl))
		if len(got) != 1 || fmt.Sprint(got[0]["n"]) != "30" {
			t.Fatalf("duckdb: %v", got)
		}
		for k, v := range got[0] {
			if k != "n" && fmt.Sprint(v) != "5" {
				t.Errorf("column %s has %v values, want 5", k, v)
			}
		}
		for _, p := range nodes {
			if st := statusTyped(t, p); len(st) != 1 || st[0].DeadLetters != 0 {
				t.Errorf("status typed: %+v", st)
			}
		}
	})
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTypedGarbage (issue 17, test 3): payloads that cannot be typed —
// not JSON, a top-level array, a type conflict, nesting beyond the limit
// (16), numbers beyond long and double, invalid UTF-8, duplicate names —
// are each acknowledged, in the stream table once with null typed
// columns, and in factory.telemetry_dlq with the reason; the good
// payloads around them are typed as usual.
func TestTypedGarbage(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	deep := strings.Repeat(`{"a":`, 17) + "1" + strings.Repeat("}", 17)
	cases := []struct {
		payload string
		reason  string // "" = typed
	}{
		{`{"device":"g1","seq":1,"temp_c":20.5}`, ""},
		{`this is not json`, "not JSON"},
		{`[{"device":"g1"}]`, "not a JSON object"},
		{`{"device":"g1","seq":"two"}`, "type conflict"},
		{deep, "nested deeper than 16"},
		{`{"device":"g1","seq":123456789012345678901234567890}`, "out of range"},
		{`{"device":"g1","temp_c":1e400}`, "out of range"},
		{"{\"device\":\"g\xff\xfe\"}", "UTF-8"},
		{`{"device":"g1","device":"g2"}`, "duplicate"},
		{``, "not JSON"},
		{`{"device":"g1","seq":3,"temp_c":21}`, ""},
	}
	var payloads [][]byte
	for _, c := range cases {
		payloads = append(payloads, []byte(c.payload))
	}
	publishPayloads(t, p.MQTT, "garbage", payloads)
	waitRows(t, dir, "factory.telemetry", len(cases))
	waitFor(t, 20*time.Second, "WAL drained", func() bool { return walDrained(t, p) })

	rows := readTable(t, dir, "factory.telemetry")
	if len(rows) != len(cases) {
		t.Fatalf("%d rows, want %d", len(rows), len(cases))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Offset < rows[j].Offset })
	for i, r := range rows {
		if r.Offset != int64(i) || !bytes.Equal(r.Value, payloads[i]) {
			t.Fatalf("row %d: offset %d value %q, published %q", i, r.Offset, r.Value, payloads[i])
		}
	}
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", nil)
	typedRows := duckQuery(t, `SELECT "offset", device, seq, temp_c FROM FILES ORDER BY "offset"`, snapshotFiles(t, tbl))
	for i, c := range cases {
		r := typedRows[i]
		if (c.reason == "") != (r["device"] != nil) {
			t.Errorf("offset %d (%.30q): typed columns %v", i, c.payload, r)
		}
	}
	if fmt.Sprint(typedRows[10]["temp_c"]) != "21" || fmt.Sprint(typedRows[10]["seq"]) != "3" {
		t.Errorf("last good row: %v", typedRows[10])
	}

	dlq := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry_dlq", nil)
	dead := duckQuery(t, `SELECT "offset", error, schema_version, to_base64(value) AS v, topic FROM FILES ORDER BY "offset"`, snapshotFiles(t, dlq))
	byOffset := map[string]map[string]any{}
	for _, d := range dead {
		byOffset[fmt.Sprint(d["offset"])] = d
	}
	want := 0
	for i, c := range cases {
		d := byOffset[fmt.Sprint(i)]
		if c.reason == "" {
			if d != nil {
				t.Errorf("offset %d is typed but in the DLQ: %v", i, d)
			}
			continue
		}
		want++
		if d == nil {
			t.Errorf("offset %d (%.30q) missing from the DLQ", i, c.payload)
			continue
		}
		if e, _ := d["error"].(string); !strings.Contains(e, c.reason) {
			t.Errorf("offset %d: DLQ error %q, want %q", i, e, c.reason)
		}
		if d["schema_version"] == nil || !strings.HasPrefix(fmt.Sprint(d["topic"]), "factory/") {
			t.Errorf("offset %d: DLQ row %v", i, d)
		}
	}
	if len(dead) != want {
		t.Errorf("%d DLQ rows, want %d", len(dead), want)
	}
	if v := metricLabeled(t, p, "tributary_dlq_records_total", `stream="factory.telemetry"`); v != float64(want) {
		t.Errorf("tributary_dlq_records_total = %v, want %d", v, want)
	}
	if st := statusTyped(t, p); len(st) != 1 || st[0].DeadLetters != int64(want) || st[0].DeadLetterTable != "factory.telemetry_dlq" || st[0].DeadLettersPerMin <= 0 {
		t.Errorf("status typed: %+v", st)
	}
	// The console shows them with the refusals (and charts their rate).
	found := false
	for _, c := range consoleModel(t, p).Overview.Refusals {
		if c.Label == "dead letters (stored, not typed): factory.telemetry" {
			found = c.Value == int64(want)
		}
	}
	if !found {
		t.Errorf("console refusals %+v: no dead-letter count of %d for factory.telemetry", consoleModel(t, p).Overview.Refusals, want)
	}
	// The node is unaffected: more good payloads are typed.
	publishPayloads(t, p.MQTT, "garbage", jsonPayloads(`{"device":"g3","seq":%d}`, 100, 5))
	waitRows(t, dir, "factory.telemetry", len(cases)+5)
	got := duckQuery(t, `SELECT count(*) AS n FROM FILES WHERE device = 'g3'`, snapshotFiles(t, loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", nil)))
	if len(got) != 1 || fmt.Sprint(got[0]["n"]) != "5" {
		t.Errorf("after the garbage: %v", got)
	}
}

// TestTypedConsumersByteExact (issue 17, test 5): Kafka (franz-go) and
// Pulsar consumers of a typed stream, typed and dead-lettered payloads
// mixed, get every payload byte-exact at its offset.
func TestTypedConsumersByteExact(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	var payloads [][]byte
	for i := range 60 {
		switch i % 4 {
		case 0:
			payloads = append(payloads, []byte(fmt.Sprintf(`{"device":"c%d","temp_c":%d.25,"extra_%d":true}`, i%3, i, i%5)))
		case 1:
			payloads = append(payloads, []byte(fmt.Sprintf(`{"device":"c%d","temp_c":"hot"}`, i)))
		case 2:
			payloads = append(payloads, append([]byte(fmt.Sprintf("raw-%d", i)), 0x00, 0xff))
		default:
			payloads = append(payloads, []byte(fmt.Sprintf(`  {"device" : "c%d", "nested": {"v": [%d, 2]} }  `, i, i)))
		}
	}
	publishPayloads(t, p.MQTT, "bytes", payloads)
	waitRows(t, dir, "factory.telemetry", len(payloads))
	want := tableByPartition(t, dir, "factory.telemetry")
	for _, r := range want[0] {
		if !bytes.Equal(r.Value, payloads[r.Offset]) {
			t.Fatalf("table offset %d: %q, published %q", r.Offset, r.Value, payloads[r.Offset])
		}
	}

	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumeTopics("factory.telemetry"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	got := pollKgo(t, cl, len(payloads), 30*time.Second)
	cl.Close()
	checkExactlyOnce(t, "kgo", want, got)
	for _, d := range got {
		if !bytes.Equal(d.value, payloads[d.offset]) {
			t.Fatalf("kgo offset %d: %q, published %q", d.offset, d.value, payloads[d.offset])
		}
	}

	pc := pulsarClient(t, p.Pulsar)
	c := pulsarSubscribe(t, pc, pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "typed",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	offs := pulsarConsumeAll(t, "pulsar", want[0], []pulsar.Consumer{c}, len(payloads))
	pulsarCheckOnce(t, "pulsar", offs, len(payloads))

	// The Kafka listing has the stream, not its dead-letter table.
	adm, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	topics := map[string]bool{}
	for _, tp := range resp.Topics {
		if tp.Topic != nil {
			topics[*tp.Topic] = true
		}
	}
	if !topics["factory.telemetry"] || topics["factory.telemetry_dlq"] {
		t.Errorf("cloud Kafka topics: %v", topics)
	}

	// Nobody produces into a dead-letter table at the edge.
	prod, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "factory.telemetry_dlq", Value: []byte("x")}).FirstErr(); err == nil {
		t.Errorf("a produce to factory.telemetry_dlq was accepted")
	}
	dl := readTable(t, dir, "factory.telemetry_dlq")
	for _, r := range dl {
		if string(r.Value) == "x" {
			t.Errorf("the dead-letter table has a produced record: %+v", r)
		}
	}
}

const telemetrySchemaV1 = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "required": ["device", "temp_c"],
  "properties": {
    "device": {"type": "string"},
    "temp_c": {"type": "number"},
    "ts": {"type": "string", "format": "date-time"},
    "loc": {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "integer"}}}
  }
}`

// TestTypedSchema (issue 17, test 4): a stream in schema mode with a JSON
// Schema file: valid payloads are typed as declared, invalid ones are in
// the dead-letter table with the reason; `tributary config check` reports
// a refused schema change and accepts an allowed one, which a restarted
// node applies.
func TestTypedSchema(t *testing.T) {
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "telemetry.schema.json")
	if err := os.WriteFile(schemaFile, []byte(telemetrySchemaV1), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := edgeConfig(t, dir, "schema-edge", "")
	raw, _ := os.ReadFile(cfg)
	raw = bytes.Replace(raw, []byte(`stream: factory.telemetry}`), []byte(`stream: factory.telemetry, payload: schema, schema_file: `+schemaFile+`}`), 1)
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdge(t, dir, cfg)
	cases := []struct{ payload, reason string }{
		{`{"device":"s1","temp_c":21.5,"ts":"2025-01-02T03:04:05Z","loc":{"x":3},"undeclared":1}`, ""},
		{`{"device":"s2","temp_c":22}`, ""},
		{`{"temp_c":1}`, "required device is missing"},
		{`{"device":"s3","temp_c":"hot"}`, "temp_c is string, want a number"},
		{`{"device":"s4","temp_c":1,"ts":"yesterday"}`, "ts is string, want an RFC 3339"},
		{`{"device":"s5","temp_c":1,"loc":{"y":1}}`, "loc.y is not declared"},
		{`not json`, "not JSON"},
	}
	var payloads [][]byte
	for _, c := range cases {
		payloads = append(payloads, []byte(c.payload))
	}
	publishPayloads(t, p.MQTT, "schema", payloads)
	waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	cat := filepath.Join(dir, "catalog.db")
	tbl := loadSQLiteTable(t, cat, "factory.telemetry", nil)
	types := schemaTypes(tbl)
	for col, typ := range map[string]string{"device": "string", "temp_c": "double", "ts": "timestamptz", "loc": "struct<"} {
		if !strings.HasPrefix(types[col], typ) {
			t.Errorf("column %s: %q, want %s", col, types[col], typ)
		}
	}
	if _, ok := types["undeclared"]; ok {
		t.Errorf("an undeclared member became a column: %v", types)
	}
	got := duckQuery(t, `SELECT "offset", device, temp_c, loc.x AS x FROM FILES ORDER BY "offset"`, snapshotFiles(t, tbl))
	if len(got) != len(cases) || fmt.Sprintf("%v %v %v", got[0]["device"], got[0]["temp_c"], got[0]["x"]) != "s1 21.5 3" || fmt.Sprint(got[1]["temp_c"]) != "22" {
		t.Fatalf("typed rows: %v", got)
	}
	dead := duckQuery(t, `SELECT "offset", error FROM FILES ORDER BY "offset"`, snapshotFiles(t, loadSQLiteTable(t, cat, "factory.telemetry_dlq", nil)))
	if len(dead) != len(cases)-2 {
		t.Fatalf("dead letters: %v", dead)
	}
	for i, d := range dead {
		c := cases[i+2]
		if fmt.Sprint(d["offset"]) != fmt.Sprint(i+2) || !strings.Contains(fmt.Sprint(d["error"]), c.reason) || got[i+2]["device"] != nil {
			t.Errorf("offset %d: dead letter %v, typed %v, want %q", i+2, d, got[i+2], c.reason)
		}
	}
	p.stop()

	// A refused change: temp_c from number to integer, loc dropped.
	refusedSchema := strings.Replace(telemetrySchemaV1, `"temp_c": {"type": "number"}`, `"temp_c": {"type": "integer"}`, 1)
	refusedSchema = strings.Replace(refusedSchema, `,
    "loc": {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "integer"}}}`, "", 1)
	if err := os.WriteFile(schemaFile, []byte(refusedSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runConfigCheck(t, cfg)
	if code == 0 || !strings.Contains(stderr, "refused change: temp_c: the table's column is double, the schema says long") ||
		!strings.Contains(stderr, "refused change: loc: the table has this column") || !strings.Contains(stderr, "2 schema change(s) refused") {
		t.Fatalf("config check of a refused change: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// An allowed change: an optional field added.
	allowed := strings.Replace(telemetrySchemaV1, `"device": {"type": "string"},`, `"device": {"type": "string"}, "fw": {"type": "integer"},`, 1)
	if err := os.WriteFile(schemaFile, []byte(allowed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runConfigCheck(t, cfg)
	if code != 0 || !strings.Contains(stdout, "adds column fw long") {
		t.Fatalf("config check of an allowed change: exit %d\n%s\n%s", code, stdout, stderr)
	}
	p = startEdge(t, dir, cfg)
	publishPayloads(t, p.MQTT, "schema", [][]byte{[]byte(`{"device":"s6","temp_c":20,"fw":7}`)})
	waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	tbl = loadSQLiteTable(t, cat, "factory.telemetry", nil)
	got = duckQuery(t, `SELECT count(fw) AS with_fw, sum(fw) AS fw, count(*) AS n FROM FILES`, snapshotFiles(t, tbl))
	if len(got) != 1 || fmt.Sprintf("%v %v %v", got[0]["with_fw"], got[0]["fw"], got[0]["n"]) != "1 7 8" {
		t.Fatalf("after the allowed change: %v", got)
	}
}

// TestTypedPartitionSpecs (issue 17, test 6): on an edge whose tables are
// hour-partitioned, a typed stream partitioned by the ingest hour and one
// partitioned by the hour of its event-time field both work: files per
// partition as the spec says, typed columns and event_time queryable.
func TestTypedPartitionSpecs(t *testing.T) {
	dir := t.TempDir()
	cfg := edgeConfig(t, dir, "spec-edge", "catalog:\n  partition_granularity: hour\n")
	raw, _ := os.ReadFile(cfg)
	raw = bytes.Replace(raw, []byte(`    - {filter: "factory/#", stream: factory.telemetry}`),
		[]byte(`    - {filter: "factory/#", stream: factory.telemetry, payload: infer, timestamps: true}
    - {filter: "events/#", stream: factory.events, payload: infer, timestamps: true, event_time: ts, partition_by: event_time}`), 1)
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdge(t, dir, cfg)
	base := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	var events [][]byte
	perHour := map[string]int{}
	for i := range 30 {
		ts := base.Add(time.Duration(i%3)*time.Hour + time.Duration(i)*time.Minute)
		events = append(events, []byte(fmt.Sprintf(`{"device":"e%d","temp_c":%d.5,"ts":%q}`, i%4, 20+i%5, ts.Format(time.RFC3339Nano))))
		perHour[ts.Truncate(time.Hour).Format("2006-01-02 15")]++
	}
	events = append(events, []byte(`{"device":"late","temp_c":1.5}`), []byte(`garbage`))
	publishTo(t, p.MQTT, "ev", "events/site1", events)
	publishPayloads(t, p.MQTT, "tel", jsonPayloads(`{"device":"t","temp_c":%d.25}`, 0, 20))
	waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	cat := filepath.Join(dir, "catalog.db")

	tel := loadSQLiteTable(t, cat, "factory.telemetry", nil)
	if s := tel.Spec().String(); !strings.Contains(s, "hour") || tables.PartitionSource(tel.Spec()) != tables.FieldTimestamp {
		t.Errorf("factory.telemetry spec %s: want hour(timestamp)", s)
	}
	got := duckQuery(t, `SELECT count(*) AS n, avg(temp_c) AS t FROM FILES`, snapshotFiles(t, tel))
	if len(got) != 1 || fmt.Sprint(got[0]["n"]) != "20" || fmt.Sprint(got[0]["t"]) != "9.75" {
		t.Errorf("factory.telemetry: %v", got)
	}

	ev := loadSQLiteTable(t, cat, "factory.events", nil)
	etID := fieldID(ev, "event_time")
	evSpec := ev.Spec()
	if etID <= 15 || evSpec.NumFields() != 1 || tables.PartitionSource(ev.Spec()) != etID || !strings.Contains(ev.Spec().String(), "hour") {
		t.Fatalf("factory.events spec %s (event_time id %d): want hour(event_time)", ev.Spec(), etID)
	}
	tasks, err := ev.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byPart := map[string]int64{}
	for _, task := range tasks {
		if task.File.SpecID() != int32(evSpec.ID()) {
			continue // files committed before the spec became event time's (none here)
		}
		for _, v := range task.File.Partition() {
			byPart[fmt.Sprint(v)] += task.File.Count()
		}
	}
	for h, n := range perHour {
		hh, _ := time.Parse("2006-01-02 15", h)
		if byPart[fmt.Sprint(int32(hh.Unix()/3600))] != int64(n) {
			t.Errorf("event hour %s: %d rows in its partition, payloads say %d (partitions %v)", h, byPart[fmt.Sprint(int32(hh.Unix()/3600))], n, byPart)
		}
	}
	if byPart["<nil>"] != 2 {
		t.Errorf("rows without an event time: %d in the null partition, want 2 (%v)", byPart["<nil>"], byPart)
	}
	rows := duckQuery(t, `SELECT strftime(event_time AT TIME ZONE 'UTC', '%Y-%m-%d %H') AS h, count(*) AS n FROM FILES WHERE event_time IS NOT NULL GROUP BY h ORDER BY h`, snapshotFiles(t, ev))
	if len(rows) != len(perHour) {
		t.Fatalf("duckdb hours %v, payloads %v", rows, perHour)
	}
	for _, r := range rows {
		if fmt.Sprint(r["n"]) != fmt.Sprint(perHour[fmt.Sprint(r["h"])]) {
			t.Errorf("duckdb hour %v: %v rows, payloads %d", r["h"], r["n"], perHour[fmt.Sprint(r["h"])])
		}
	}
	if st := statusTyped(t, p); len(st) != 2 {
		t.Errorf("status typed: %+v", st)
	}
}
