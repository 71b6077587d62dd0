package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kgo"
)

// parquetCols are the columns TestParquetEnginesAgree compares, each as
// DuckDB renders it to text (NULL stays null): the envelope, scalars of
// each typed kind, a struct with a list inside, a list with null
// elements, and the headers' list of structs. Lists are their elements
// joined by commas (~ for a null element).
var parquetCols = []struct{ name, duck string }{
	{"partition", `CAST("partition" AS VARCHAR)`},
	{"topic", `topic`},
	{"key", `to_base64("key")`},
	{"value", `to_base64("value")`},
	{"timestamp", `CAST(epoch_us("timestamp") AS VARCHAR)`},
	{"producer_timestamp", `CAST(epoch_us(producer_timestamp) AS VARCHAR)`},
	{"source", `source`},
	{"client_id", `client_id`},
	{"node", `node`},
	{"headers", `array_to_string(list_transform(headers, h -> h."key" || '=' || coalesce(to_base64(h."value"), '~')), ',')`},
	{"principal", `principal`},
	{"device", `device`},
	{"a", `CAST(a AS VARCHAR)`},
	{"b", `b`},
	{"at", `CAST(epoch_us("at") AS VARCHAR)`},
	{"c.on", `CAST(c."on" AS VARCHAR)`},
	{"c.pos", `array_to_string(list_transform(c.pos, x -> coalesce(CAST(x AS VARCHAR), '~')), ',')`},
	{"tags", `array_to_string(list_transform(tags, x -> coalesce(x, '~')), ',')`},
}

// TestParquetEnginesAgree (issue 16): the data files the uplink writes
// with parquet-go, across a schema that evolved between files (typed
// columns added twice: scalars and a timestamptz, then a struct holding a
// list and a list with null elements), from MQTT and from Kafka (keys,
// headers with null and empty values, producer timestamps), plus
// payloads that are not typed, read back identically by iceberg-go (by
// field id, through Arrow) and by DuckDB (read_parquet over the current
// snapshot's files, by name): every column of every row.
func TestParquetEnginesAgree(t *testing.T) {
	ensureDuckDB(t)
	dir := t.TempDir()
	p := startDev(t, dir, "--commit-interval", "200ms")
	publishPayloads(t, p.MQTT, "pq", jsonPayloads(`{"device":"d1","a":%d}`, 0, 20))
	waitRows(t, dir, "factory.telemetry", 20)
	var second [][]byte
	for i := 20; i < 40; i++ {
		second = append(second, fmt.Appendf(nil, `{"device":"d2","a":%d,"b":"x%d","at":"2026-12-01T10:00:%02d.25Z"}`, i, i, i))
	}
	publishPayloads(t, p.MQTT, "pq", second)
	waitRows(t, dir, "factory.telemetry", 40)
	var third [][]byte
	for i := 40; i < 60; i++ {
		third = append(third, fmt.Appendf(nil, `{"device":"d3","a":%d,"c":{"on":%v,"pos":[1.5,%d.25,null]},"tags":["t%d",null]}`, i, i%2 == 0, i, i))
	}
	third = append(third, []byte("not json"), []byte(`{"a":"conflict"}`), []byte(`{"tags":[],"c":{"pos":[]}}`))
	publishPayloads(t, p.MQTT, "pq", third)
	waitRows(t, dir, "factory.telemetry", 63)

	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic("factory.telemetry"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := &kgo.Record{Value: fmt.Appendf(nil, `{"device":"k","a":%d}`, 100+i),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}, {Key: "nil"}}}
		if i%2 == 0 {
			r.Key = []byte(fmt.Sprintf("key-%d", i))
		}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	waitRows(t, dir, "factory.telemetry", 73)
	p.stop()

	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", nil)
	files := snapshotFiles(t, tbl)
	if len(files) < 4 {
		t.Fatalf("%d data files: want one per phase at least", len(files))
	}
	want := icebergCells(t, tbl)
	var sel []string
	for _, c := range parquetCols {
		sel = append(sel, c.duck+` AS "`+c.name+`"`)
	}
	rows := duckQuery(t, `SELECT CAST("offset" AS VARCHAR) AS "offset", `+strings.Join(sel, ", ")+` FROM FILES ORDER BY "offset"`, files)
	if len(rows) != 73 || len(want) != 73 {
		t.Fatalf("duckdb read %d rows, iceberg-go %d, want 73", len(rows), len(want))
	}
	nonNull := map[string]int{}
	for _, r := range rows {
		off := fmt.Sprint(r["offset"])
		w, ok := want[off]
		if !ok {
			t.Fatalf("duckdb has offset %s, iceberg-go has not", off)
		}
		for i, c := range parquetCols {
			g := "null"
			if v := r[c.name]; v != nil {
				g = fmt.Sprint(v)
				nonNull[c.name]++
			}
			if !sameCells(g, w[i]) {
				t.Errorf("offset %s column %s: duckdb %q, iceberg-go %q", off, c.name, g, w[i])
			}
		}
	}
	// The columns hold what was sent: typed values only from the phase
	// that had them; envelope nulls only where the protocol has none.
	for col, n := range map[string]int{"device": 70, "a": 70, "b": 20, "at": 20, "c.on": 20, "c.pos": 21, "tags": 21,
		"key": 5, "headers": 10, "producer_timestamp": 10, "principal": 0, "value": 73} {
		if nonNull[col] != n {
			t.Errorf("column %s: %d values, want %d", col, nonNull[col], n)
		}
	}
	if w := want["45"]; w[15] != "false" || w[16] != "1.5,45.25,~" || w[17] != "t45,~" || w[13] != "null" {
		t.Errorf("offset 45: %v", w)
	}
	if w := want["25"]; w[14] != strconv.FormatInt(time.Date(2026, 12, 1, 10, 0, 25, 250e6, time.UTC).UnixMicro(), 10) || w[13] != "x25" {
		t.Errorf("offset 25: at %s b %s", w[14], w[13])
	}
	if w := want["63"]; w[9] != "h=MA==,empty=,nil=~" || w[2] != base64.StdEncoding.EncodeToString([]byte("key-0")) {
		t.Errorf("offset 63: headers %s key %s", w[9], w[2])
	}
}

// icebergCells reads tbl with iceberg-go and renders parquetCols of each
// row as DuckDB does, by offset.
func icebergCells(t *testing.T, tbl *table.Table) map[string][]string {
	t.Helper()
	_, it, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for b, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		col := func(name string) arrow.Array {
			path := strings.Split(name, ".")
			ix := b.Schema().FieldIndices(path[0])
			if len(ix) == 0 {
				t.Fatalf("iceberg-go batch without column %s", path[0])
			}
			a := b.Column(ix[0])
			if len(path) == 2 {
				st := a.(*array.Struct)
				fi, _ := st.DataType().(*arrow.StructType).FieldIdx(path[1])
				return structField{st, st.Field(fi)}
			}
			return a
		}
		offs := col("offset").(*array.Int64)
		cols := make([]arrow.Array, len(parquetCols))
		for i, c := range parquetCols {
			cols[i] = col(c.name)
		}
		for r := range int(b.NumRows()) {
			row := make([]string, len(cols))
			for i, a := range cols {
				row[i] = cell(a, r)
			}
			out[strconv.FormatInt(offs.Value(r), 10)] = row
		}
		b.Release()
	}
	return out
}

// structField is a struct's member array that is null where the struct is.
type structField struct {
	parent *array.Struct
	arrow.Array
}

// cell renders a[i] as DuckDB's text of it (parquetCols).
func cell(a arrow.Array, i int) string {
	if sf, ok := a.(structField); ok {
		if sf.parent.IsNull(i) {
			return "null"
		}
		a = sf.Array
	}
	if a.IsNull(i) {
		return "null"
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.Int32:
		return strconv.Itoa(int(a.Value(i)))
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.Float64:
		return strconv.FormatFloat(a.Value(i), 'f', -1, 64)
	case *array.Boolean:
		return strconv.FormatBool(a.Value(i))
	case *array.Timestamp:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		var elems []string
		for j := int(lo); j < int(hi); j++ {
			if st, ok := a.ListValues().(*array.Struct); ok { // headers: key=base64(value)
				v := cell(st.Field(1), j)
				if v == "null" {
					v = "~"
				}
				elems = append(elems, cell(st.Field(0), j)+"="+v)
				continue
			}
			v := cell(a.ListValues(), j)
			if v == "null" {
				v = "~"
			}
			elems = append(elems, v)
		}
		return strings.Join(elems, ",")
	}
	return fmt.Sprintf("<%s>", a.DataType())
}

// sameCells compares two renderings of a cell (lists as elements joined
// by commas): equal text, or, element by element, equal numbers — DuckDB
// writes the double 21 as "21.0" where Go writes "21" (inferred numbers
// are doubles).
func sameCells(a, b string) bool {
	if a == b {
		return true
	}
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if as[i] == bs[i] {
			continue
		}
		x, err1 := strconv.ParseFloat(as[i], 64)
		y, err2 := strconv.ParseFloat(bs[i], 64)
		if err1 != nil || err2 != nil || x != y {
			return false
		}
	}
	return true
}
