package tables

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/typed"
)

var inferPolicy = typed.Policy{Mode: typed.Infer, Timestamps: true}

func payloadRecords(part int32, from int64, payloads ...string) []*tributary.Record {
	out := make([]*tributary.Record, len(payloads))
	for i, p := range payloads {
		out[i] = &tributary.Record{Stream: "factory.telemetry", Partition: part, Offset: from + int64(i),
			Timestamp: 1_700_000_000_000_000 + from + int64(i), Topic: "factory/d1", Value: []byte(p),
			Source: "mqtt", ClientID: "c1", Node: "n1"}
	}
	return out
}

// commitShaped does what the uplink does with a typed batch: shape it,
// write its files, commit its dead letters, then the batch.
func commitShaped(t *testing.T, c *Catalog, stream string, recs []*tributary.Record) *Shaped {
	t.Helper()
	return commitShapedWith(t, c, stream, inferPolicy, recs)
}

func commitShapedWith(t *testing.T, c *Catalog, stream string, pol typed.Policy, recs []*tributary.Record) *Shaped {
	t.Helper()
	ctx := context.Background()
	sh, err := c.Shape(ctx, stream, pol, recs)
	if err != nil {
		t.Fatal(err)
	}
	files := writeShaped(t, c, stream, sh, recs)
	to := recs[len(recs)-1].Offset + 1
	if _, err := c.CommitDeadLetters(ctx, stream, recs[0].Partition, to, Origin{}, sh.DeadLetters(recs)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: recs[0].Partition, From: recs[0].Offset, To: to,
		Files: files}}, nil); err != nil {
		t.Fatal(err)
	}
	return sh
}

// writeShaped writes a shaped batch's files below the table, cut as the
// uplink cuts them (Shaped.CutRuns at the table's granularity).
func writeShaped(t *testing.T, c *Catalog, stream string, sh *Shaped, recs []*tributary.Record) []FileMeta {
	t.Helper()
	g, err := c.Granularity(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var files []FileMeta
	for _, run := range sh.CutRuns(g, recs) {
		var buf bytes.Buffer
		st, err := WriteParquetShaped(&buf, run, sh)
		if err != nil {
			t.Fatal(err)
		}
		url := DataFileURL(c.TableLocation(stream), st, Origin{})
		key, _ := c.KeyOf(url)
		path := filepath.Join(c.Warehouse()[len("file://"):], key)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, FileMeta{URL: url, Size: int64(buf.Len()), Stats: st})
	}
	return files
}

// openHourlyCatalog is openTestCatalog with hour-partitioned tables.
func openHourlyCatalog(t *testing.T) *Catalog {
	t.Helper()
	dir := t.TempDir()
	c, err := Open(context.Background(), Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse"), Granularity: "hour"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// scanColumns reads the whole table with iceberg-go and returns, by
// offset, the string form of the named columns.
func scanColumns(t *testing.T, tb *table.Table, cols ...string) map[int64][]string {
	t.Helper()
	_, batches, err := tb.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]string{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		offs := b.Column(b.Schema().FieldIndices(ColOffset)[0]).(*array.Int64)
		for i := range int(b.NumRows()) {
			var row []string
			for _, c := range cols {
				ix := b.Schema().FieldIndices(c)
				if len(ix) == 0 {
					row = append(row, "<no column>")
					continue
				}
				col := b.Column(ix[0])
				if col.IsNull(i) {
					row = append(row, "null")
				} else {
					row = append(row, col.ValueStr(i))
				}
			}
			out[offs.Value(i)] = row
		}
		b.Release()
	}
	return out
}

func TestTypedColumnsEvolveAndDeadLetters(t *testing.T) {
	c, _ := openTestCatalog(t)
	ctx := context.Background()
	const stream = "factory.telemetry"
	commitShaped(t, c, stream, payloadRecords(0, 0,
		`{"device":"d1","temp_c":21.5,"seq":1,"ts":"2025-01-02T03:04:05.123456Z","offset":99}`,
		`{"device":"d2","temp_c":22,"seq":2}`,
	))
	tb, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"device": "string", "temp_c": "double", "seq": "double", "ts": "timestamptz"} {
		f, ok := tb.Schema().FindFieldByName(name)
		if !ok || f.Type.String() != want || f.ID <= FieldPrincipal {
			t.Errorf("column %s: %+v (present %v), want %s with an id above %d", name, f, ok, want, FieldPrincipal)
		}
	}
	// offset is the envelope's: the payload's member stays in value only.
	if f, _ := tb.Schema().FindFieldByName(ColOffset); f.ID != FieldOffset {
		t.Errorf("offset column is %+v", f)
	}

	// Batch 2: a new nested field, a conflict, garbage.
	deep := strings.Repeat(`{"a":`, typed.MaxDepth+1) + "1" + strings.Repeat("}", typed.MaxDepth+1)
	sh := commitShaped(t, c, stream, payloadRecords(0, 2,
		`{"device":"d3","loc":{"x":1,"y":2.5},"tags":["a","b"]}`,
		`{"device":"d4","seq":"three"}`,
		`not json`,
		`[1,2,3]`,
		deep,
		`{"seq":123456789012345678901234567890}`,
		"{\"device\":\"\xff\"}",
		`{"device":"d5","temp_c":23.25}`,
	))
	dls := sh.DeadLetters(payloadRecords(0, 2, make([]string, 8)...))
	if len(dls) != 6 {
		t.Fatalf("%d dead letters, want 6: %+v", len(dls), dls)
	}
	tb, _ = c.LoadTable(ctx, stream)
	got := scanColumns(t, tb, "device", "temp_c", "seq", "loc", "tags", ColValue)
	if len(got) != 10 {
		t.Fatalf("%d rows, want 10", len(got))
	}
	for off, want := range map[int64]string{
		0: "d1 21.5 1", 1: "d2 22 2", 2: "d3 null null", 3: "null null null", 4: "null null null", 9: "d5 23.25 null",
	} {
		if g := strings.Join(got[off][:3], " "); g != want {
			t.Errorf("offset %d: %s, want %s", off, g, want)
		}
	}
	if got[0][3] != "null" || !strings.Contains(got[2][3], "1") || !strings.Contains(got[2][4], "a") {
		t.Errorf("old row's loc %s (want null), new row's loc %s tags %s", got[0][3], got[2][3], got[2][4])
	}

	// The dead-letter table has the six, with reasons, once.
	dt, err := c.LoadTable(ctx, DLQStream(stream))
	if err != nil {
		t.Fatal(err)
	}
	dl := scanColumns(t, dt, ColDLQError, ColDLQSchemaVersion, ColValue)
	want := map[int64]string{3: "type conflict", 4: "not JSON", 5: "not a JSON object", 6: "nested deeper", 7: "out of range", 8: "UTF-8"}
	if len(dl) != len(want) {
		t.Fatalf("dead letters %v", dl)
	}
	for off, w := range want {
		if !strings.Contains(dl[off][0], w) {
			t.Errorf("dead letter %d: %q, want %q", off, dl[off][0], w)
		}
	}
	// A retry of the same range adds nothing (the mark covers it).
	n, err := c.CommitDeadLetters(ctx, stream, 0, 10, Origin{}, dls)
	if err != nil || n != 0 {
		t.Errorf("recommit: %d, %v", n, err)
	}
	// A partly covered range adds only what is above the mark.
	more := payloadRecords(0, 10, `x`, `y`)
	n, err = c.CommitDeadLetters(ctx, stream, 0, 12, Origin{}, []DeadLetter{dls[0], {Record: more[0], Error: "e"}, {Record: more[1], Error: "e"}})
	if err != nil || n != 2 {
		t.Errorf("partly covered: %d, %v", n, err)
	}

	// Kafka's view: the envelope is byte-exact.
	var recs []*tributary.Record
	for r, err := range c.Scan(ctx, stream, ScanOptions{Partition: -1}) {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	all := append(payloadRecords(0, 0, `{"device":"d1","temp_c":21.5,"seq":1,"ts":"2025-01-02T03:04:05.123456Z","offset":99}`, `{"device":"d2","temp_c":22,"seq":2}`),
		payloadRecords(0, 2, `{"device":"d3","loc":{"x":1,"y":2.5},"tags":["a","b"]}`, `{"device":"d4","seq":"three"}`, `not json`, `[1,2,3]`, deep,
			`{"seq":123456789012345678901234567890}`, "{\"device\":\"\xff\"}", `{"device":"d5","temp_c":23.25}`)...)
	for _, r := range recs {
		if !bytes.Equal(r.Value, all[r.Offset].Value) {
			t.Errorf("offset %d: value %q, want %q", r.Offset, r.Value, all[r.Offset].Value)
		}
	}

	// Compaction keeps the typed columns (derived again from value).
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{TargetFileSize: 1 << 30, MaxCompactBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 1 {
		t.Fatalf("compaction: %+v", res)
	}
	tb, _ = c.LoadTable(ctx, stream)
	after := scanColumns(t, tb, "device", "temp_c", "seq", "loc", "tags", ColValue)
	for off, row := range got {
		if strings.Join(row, "|") != strings.Join(after[off], "|") {
			t.Errorf("offset %d after compaction: %v, before %v", off, after[off], row)
		}
	}
	if _, err := c.Maintain(ctx, DLQStream(stream), MaintainOptions{Policy: Policy{TargetFileSize: 1 << 30, MaxCompactBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
}

// Two nodes (two catalogs on one SQLite file) add different fields at the
// same moment: both columns land, both batches are typed.
func TestTypedColumnsConcurrentNodes(t *testing.T) {
	c1, dir := openTestCatalog(t)
	c2, err := Open(context.Background(), Config{
		URI:       "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx := context.Background()
	const stream = "factory.telemetry"
	p1, err := c1.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c2.AllocatePartition(ctx, stream, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		var wg sync.WaitGroup
		for i, c := range []*Catalog{c1, c2} {
			p := []int32{p1, p2}[i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				field := fmt.Sprintf("n%d_r%d", i+1, round)
				commitShaped(t, c, stream, payloadRecords(p, int64(round), fmt.Sprintf(`{%q:%d}`, field, round)))
			}()
		}
		wg.Wait()
	}
	tb, _ := c1.LoadTable(ctx, stream)
	var cols []string
	for round := range 5 {
		for n := 1; n <= 2; n++ {
			cols = append(cols, fmt.Sprintf("n%d_r%d", n, round))
		}
	}
	_, batches, err := tb.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		for i := range int(b.NumRows()) {
			rows++
			nonNull := 0
			for _, c := range cols {
				ix := b.Schema().FieldIndices(c)
				if len(ix) == 0 {
					t.Fatalf("column %s missing: %s", c, tb.Schema())
				}
				if !b.Column(ix[0]).IsNull(i) {
					nonNull++
				}
			}
			if nonNull != 1 {
				t.Errorf("row %d has %d typed values, want 1", i, nonNull)
			}
		}
		b.Release()
	}
	if rows != 10 {
		t.Errorf("%d rows, want 10", rows)
	}
}

func snapshotFiles(t *testing.T, tb *table.Table) []string {
	t.Helper()
	tasks, err := tb.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		out = append(out, task.File.FilePath())
	}
	return out
}

// An hour-partitioned table with typed columns: a batch spanning two
// hours is cut into one file per hour, each with its typed columns.
func TestTypedColumnsHourPartitions(t *testing.T) {
	c := openHourlyCatalog(t)
	ctx := context.Background()
	const stream = "factory.hourly"
	recs := payloadRecords(0, 0, `{"device":"a","v":1}`, `{"device":"b","v":2}`, `{"device":"c","v":3}`, `{"device":"d","v":"x"}`)
	base := int64(1_700_000_000_000_000) / 3_600_000_000 * 3_600_000_000
	for i, r := range recs {
		r.Stream = stream
		r.Timestamp = base + int64(i/2)*3_600_000_000 + int64(i) // two hours
	}
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Granularity(ctx, stream); err != nil || g != GranularityHour {
		t.Fatalf("granularity %v %v", g, err)
	}
	sh := commitShaped(t, c, stream, recs)
	tb, _ := c.LoadTable(ctx, stream)
	if files, _ := tb.Scan().PlanFiles(ctx); len(files) != 2 {
		t.Fatalf("%d files, want one per hour", len(files))
	}
	if len(sh.DeadLetters(recs)) != 1 {
		t.Errorf("dead letters %v", sh.DeadLetters(recs))
	}
	got := scanColumns(t, tb, "device", "v")
	for off, want := range map[int64]string{0: "a 1", 1: "b 2", 2: "c 3", 3: "null null"} {
		if g := strings.Join(got[off], " "); g != want {
			t.Errorf("offset %d: %s, want %s", off, g, want)
		}
	}
}

// A stream partitioned by event time: the table gets an event_time column
// and an hour(event_time) spec; a batch is cut into one file per event
// hour (payloads without one apart, partition null); compaction keeps the
// event times.
func TestTypedColumnsEventTimePartitions(t *testing.T) {
	c := openHourlyCatalog(t)
	ctx := context.Background()
	const stream = "factory.events"
	pol := typed.Policy{Mode: typed.Infer, Timestamps: true, EventTime: "ts", PartitionByEventTime: true}
	commit := func(from int64, payloads ...string) int {
		recs := payloadRecords(0, from, payloads...)
		for _, r := range recs {
			r.Stream = stream
		}
		if _, err := c.EnsureTable(ctx, stream); err != nil {
			t.Fatal(err)
		}
		before, _ := c.LoadTable(ctx, stream)
		n := 0
		if s := before.CurrentSnapshot(); s != nil {
			n = len(snapshotFiles(t, before))
		}
		commitShapedWith(t, c, stream, pol, recs)
		after, _ := c.LoadTable(ctx, stream)
		return len(snapshotFiles(t, after)) - n
	}
	n := commit(0,
		`{"device":"a","ts":"2025-01-02T03:10:00Z"}`,
		`{"device":"b","ts":"2025-01-02T03:50:00.5Z"}`,
		`{"device":"c","ts":"2025-01-02T05:00:00Z"}`,
		`{"device":"d"}`,
		`not json`)
	if n != 3 {
		t.Fatalf("%d files, want 3 (hour 3, hour 5, no event time)", n)
	}
	commit(5, `{"device":"e","ts":"2025-01-02T03:20:00Z"}`)
	commit(6, `{"device":"f","ts":"2025-01-02T03:30:00Z"}`)
	tb, _ := c.LoadTable(ctx, stream)
	et, ok := tb.Schema().FindFieldByName(ColEventTime)
	if !ok || PartitionSource(tb.Spec()) != et.ID || et.Type.String() != "timestamptz" {
		t.Fatalf("spec %s, event_time %+v", tb.Spec(), et)
	}
	check := func(when string) {
		tb, _ := c.LoadTable(ctx, stream)
		got := scanColumns(t, tb, "device", ColEventTime)
		for off, want := range map[int64]string{0: "a 2025-01-02 03:10:00Z", 2: "c 2025-01-02 05:00:00Z", 3: "d null", 4: "null null", 5: "e 2025-01-02 03:20:00Z", 6: "f 2025-01-02 03:30:00Z"} {
			if g := strings.Join(got[off], " "); !strings.HasPrefix(strings.ReplaceAll(g, "T", " "), strings.TrimSuffix(want, "Z")) {
				t.Errorf("%s: offset %d: %q, want %q", when, off, g, want)
			}
		}
		tasks, err := tb.Scan().PlanFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hours := map[string]int64{}
		for _, task := range tasks {
			for _, v := range task.File.Partition() {
				hours[fmt.Sprint(v)] += task.File.Count()
			}
		}
		h3 := fmt.Sprint(GranularityHour.Bucket(time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC).UnixMicro()))
		h5 := fmt.Sprint(GranularityHour.Bucket(time.Date(2025, 1, 2, 5, 0, 0, 0, time.UTC).UnixMicro()))
		if hours[h3] != 4 || hours[h5] != 1 || hours["<nil>"] != 2 {
			t.Errorf("%s: rows by event hour %v, want %s:4 %s:1 null:2", when, hours, h3, h5)
		}
	}
	check("written")
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{TargetFileSize: 1 << 30, MaxCompactBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 1 || res.CompactInputs != 2 {
		t.Fatalf("compaction: %+v, want the two adjacent hour-3 files merged", res)
	}
	check("compacted")
}

// TestTypedNumbers: on a fresh stream a reading of 22 and then one of
// 21.5 both land as typed rows of a double column, without a dead letter;
// a table whose column is long (numbers: long) keeps it, takes 22.0 and
// sends 21.5 to the dead-letter table with a plain reason.
func TestTypedNumbers(t *testing.T) {
	c, _ := openTestCatalog(t)
	ctx := context.Background()
	const stream = "factory.telemetry"
	for i, p := range []string{`{"c":22}`, `{"c":21.5}`} {
		if sh := commitShaped(t, c, stream, payloadRecords(0, int64(i), p)); len(sh.DeadLetters(payloadRecords(0, int64(i), p))) != 0 {
			t.Fatalf("%s: dead letters %+v", p, sh.DeadLetters(payloadRecords(0, int64(i), p)))
		}
	}
	tb, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := tb.Schema().FindFieldByName("c"); !ok || f.Type.String() != "double" {
		t.Fatalf("column c: %+v", f)
	}
	if got := scanColumns(t, tb, "c"); len(got) != 2 || got[0][0] != "22" || got[1][0] != "21.5" {
		t.Fatalf("rows %v", got)
	}
	if dt, err := c.LoadTable(ctx, DLQStream(stream)); err == nil {
		if dl := scanColumns(t, dt, ColDLQError); len(dl) != 0 {
			t.Errorf("dead letters %v", dl)
		}
	}

	const longs = "factory.counters"
	commitShapedWith(t, c, longs, typed.Policy{Mode: typed.Infer, Longs: true}, payloadRecords(0, 0, `{"c":22}`))
	recs := payloadRecords(0, 1, `{"c":23.0}`, `{"c":21.5}`)
	sh := commitShapedWith(t, c, longs, inferPolicy, recs)
	dls := sh.DeadLetters(recs)
	if len(dls) != 1 || dls[0].Record.Offset != 2 || !strings.Contains(dls[0].Error, "field c is a long column (the table's type, which it keeps) and 21.5 is not a whole number") {
		t.Fatalf("dead letters %+v", dls)
	}
	tb, _ = c.LoadTable(ctx, longs)
	if f, _ := tb.Schema().FindFieldByName("c"); f.Type.String() != "long" {
		t.Fatalf("column c became %s", f.Type)
	}
	if got := scanColumns(t, tb, "c"); got[0][0] != "22" || got[1][0] != "23" || got[2][0] != "null" {
		t.Fatalf("rows %v", got)
	}
}
