package tables

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/apache/iceberg-go"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/typed"
)

// nestedPayloads have every typed shape: scalars of each type, a struct
// in a struct, lists of scalars, of structs and of lists, empty lists,
// nulls at every level.
var nestedPayloads = []string{
	`{"device":"d1","temp":21.5,"n":3,"ok":true,"at":"2026-01-02T03:04:05.123456Z","loc":{"x":1.5,"geo":{"lat":2,"lon":3}},"tags":["a","b"],"pts":[{"v":1,"w":"p"},{"v":2}],"grid":[[1,2],[3]]}`,
	`{"device":"d2","tags":[],"pts":[],"grid":[[],[4]]}`,
	`{"device":null,"loc":{"x":null,"geo":null},"tags":["c",null],"pts":[null,{"v":null}]}`,
	`{"n":-7}`,
	`not json`,
}

// TestParquetNestedRoundTrip: a file of typed columns with every nested
// shape reads back through iceberg-go (by field id) with the values the
// payloads hold, and dead letters stay null.
func TestParquetNestedRoundTrip(t *testing.T) {
	c, _ := openTestCatalog(t)
	const stream = "factory.nested"
	recs := payloadRecords(0, 0, nestedPayloads...)
	recs[1].Headers = []tributary.Header{}
	recs[2].Headers = []tributary.Header{{Key: "k", Value: nil}, {Key: "k", Value: []byte("v")}}
	recs[3].Key, recs[3].ProducerTimestamp, recs[3].Principal = []byte{}, 1700000000123, "alice"
	commitShaped(t, c, stream, recs)
	tb, err := c.LoadTable(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	got := scanColumns(t, tb, "device", "temp", "n", "ok", "at", "loc", "tags", "pts", "grid", ColHeaders, ColKey, ColProducerTimestamp, ColPrincipal)
	want := map[int64]string{
		0: `d1|21.5|3|true|2026-01-02T03:04:05.123456Z|{"geo":{"lat":2,"lon":3},"x":1.5}|["a","b"]|[{"v":1,"w":"p"},{"v":2,"w":null}]|[[1,2],[3]]|null|null|null|null`,
		1: `d2|null|null|null|null|null|[]|[]|[[],[4]]|[]|null|null|null`,
		2: `null|null|null|null|null|{"geo":null,"x":null}|["c",null]|[null,{"v":null,"w":null}]|null|[{"key":"k","value":null},{"key":"k","value":"dg=="}]|null|null|null`,
		3: `null|null|-7|null|null|null|null|null|null|null||2023-11-14T22:13:20.123|alice`,
		4: `null|null|null|null|null|null|null|null|null|null|null|null|null`,
	}
	for off, w := range want {
		if g := strings.Join(got[off], "|"); g != w {
			t.Errorf("offset %d:\n got %s\nwant %s", off, g, w)
		}
	}
	// The envelope reads back byte-exact, through iceberg-go's scan and
	// through the Kafka read path's own decoder.
	back, err := c.ScanSorted(context.Background(), stream, ScanOptions{Partition: -1})
	if err != nil || len(back) != len(recs) {
		t.Fatalf("scan: %d rows, %v", len(back), err)
	}
	v, err := NewReader(c, ReaderConfig{}).Partition(context.Background(), stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	var read []*tributary.Record
	if err := v.Read(context.Background(), 0, func(r *tributary.Record) bool { read = append(read, r); return true }); err != nil || len(read) != len(recs) {
		t.Fatalf("read: %d rows, %v", len(read), err)
	}
	for i := range recs {
		if err := errors.Join(sameRecord(recs[i], back[i]), sameRecord(recs[i], read[i])); err != nil {
			t.Errorf("offset %d: %v", i, err)
		}
	}
}

// TestParquetFileLayout: the file's Parquet schema has the table's field
// id on every node (nested ones and list elements included), timestamptz
// is TIMESTAMP(isAdjustedToUTC=true, MICROS), offset, timestamp and typed
// long and timestamptz columns are delta-encoded without a dictionary, value has neither a dictionary nor
// statistics, and every column is zstd.
func TestParquetFileLayout(t *testing.T) {
	c, _ := openTestCatalog(t)
	recs := payloadRecords(0, 0, nestedPayloads...)
	sh, err := c.Shape(context.Background(), "factory.layout", typed.Policy{Mode: typed.Infer, Timestamps: true, Longs: true}, recs) // n a long column
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := WriteParquetShaped(&buf, recs, sh); err != nil {
		t.Fatal(err)
	}
	pr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	md := pr.MetaData()

	// Every node's field id is the Iceberg one of its path; the repeated
	// groups of lists carry none.
	ids := map[string]int{}
	for _, f := range sh.Schema.Fields() {
		collectIDs(f.Name, f.ID, f.Type, ids)
	}
	seen := 0
	var walk func(n schema.Node, path string)
	walk = func(n schema.Node, path string) {
		if path != "" {
			if n.RepetitionType() == parquet.Repetitions.Repeated {
				if n.FieldID() > 0 {
					t.Errorf("%s: repeated group with field id %d", path, n.FieldID())
				}
			} else if want, ok := ids[path]; !ok || int(n.FieldID()) != want {
				t.Errorf("%s: field id %d, want %d (known %v)", path, n.FieldID(), want, ok)
			} else {
				seen++
			}
		}
		if g, ok := n.(*schema.GroupNode); ok {
			for i := range g.NumFields() {
				name := g.Field(i).Name()
				p := name
				if path != "" {
					p = path + "." + name
				}
				walk(g.Field(i), p)
			}
		}
	}
	walk(md.Schema.Root(), "")
	if seen != len(ids) {
		t.Errorf("%d nodes with the right id, the Iceberg schema has %d", seen, len(ids))
	}
	// Columns are in the table's order.
	var top []string
	for i := range md.Schema.Root().NumFields() {
		top = append(top, md.Schema.Root().Field(i).Name())
	}
	var wantTop []string
	for _, f := range sh.Schema.Fields() {
		wantTop = append(wantTop, f.Name)
	}
	if strings.Join(top, ",") != strings.Join(wantTop, ",") {
		t.Errorf("top-level columns %v, want %v", top, wantTop)
	}

	for i := range md.Schema.NumColumns() {
		col := md.Schema.Column(i)
		path := col.Path()
		switch path {
		case "at", ColTimestamp:
			if want := schema.NewTimestampLogicalType(path == "at", schema.TimeUnitMicros); !col.LogicalType().Equals(want) {
				t.Errorf("%s: logical type %s, want %s", path, col.LogicalType(), want)
			}
		case ColTopic, "device":
			if !col.LogicalType().Equals(schema.StringLogicalType{}) {
				t.Errorf("%s: logical type %s, want String", path, col.LogicalType())
			}
		}
		cc, err := md.RowGroup(0).ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Compression() != compress.Codecs.Zstd {
			t.Errorf("%s: compression %s", path, cc.Compression())
		}
		switch path {
		case ColOffset, ColTimestamp, "n", "at": // typed long and timestamptz too
			if cc.HasDictionaryPage() || !hasEncoding(cc.Encodings(), parquet.Encodings.DeltaBinaryPacked) {
				t.Errorf("%s: encodings %v dictionary %v, want delta and no dictionary", path, cc.Encodings(), cc.HasDictionaryPage())
			}
		case ColValue:
			stats, err := cc.Statistics()
			if cc.HasDictionaryPage() || err != nil || (stats != nil && stats.HasMinMax()) {
				t.Errorf("value: dictionary %v statistics %v (%v), want neither", cc.HasDictionaryPage(), stats, err)
			}
			if ci := pr.GetPageIndexReader(); ci != nil {
				if rg, err := ci.RowGroup(0); err == nil {
					if idx, err := rg.GetColumnIndex(i); err == nil && idx != nil && len(idx.GetMinValues()) > 0 && len(idx.GetMinValues()[0]) > 0 {
						t.Errorf("value: column index has bounds %q", idx.GetMinValues()[0])
					}
				}
			}
		}
	}
}

func hasEncoding(encs []parquet.Encoding, e parquet.Encoding) bool {
	for _, x := range encs {
		if x == e {
			return true
		}
	}
	return false
}

// collectIDs maps the Parquet path of every node of an Iceberg field (as
// the spec lays out lists and maps) to its field id.
func collectIDs(path string, id int, t iceberg.Type, out map[string]int) {
	out[path] = id
	switch t := t.(type) {
	case *iceberg.StructType:
		for _, f := range t.FieldList {
			collectIDs(path+"."+f.Name, f.ID, f.Type, out)
		}
	case *iceberg.ListType:
		collectIDs(path+".list.element", t.ElementID, t.Element, out)
	case *iceberg.MapType:
		collectIDs(path+".key_value.key", t.KeyID, t.KeyType, out)
		collectIDs(path+".key_value.value", t.ValueID, t.ValueType, out)
	}
}

// TestParquetZstdLevels: each level writes a readable file (a higher one a
// smaller file here), and a level out of range is refused before anything
// is written.
func TestParquetZstdLevels(t *testing.T) {
	recs := benchRecords("firmware", 20000)
	sizes := map[int]int{}
	for _, l := range []int{0, 1, 3, 7, 19} {
		var buf bytes.Buffer
		st, err := ParquetOptions{ZstdLevel: l}.WriteParquet(&buf, recs)
		if err != nil || st.Records != int64(len(recs)) {
			t.Fatalf("level %d: %v %+v", l, err, st)
		}
		sizes[l] = buf.Len()
		pr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("level %d: %v", l, err)
		}
		if pr.NumRows() != int64(len(recs)) || pr.NumRowGroups() != 2 {
			t.Errorf("level %d: %d rows in %d row groups", l, pr.NumRows(), pr.NumRowGroups())
		}
		pr.Close()
	}
	if sizes[0] != sizes[1] || sizes[3] >= sizes[1] || sizes[19] >= sizes[3] {
		t.Errorf("sizes by level %v: want 0 = 1 > 3 > 19", sizes)
	}
	for _, l := range []int{-1, 23} {
		var buf bytes.Buffer
		if _, err := (ParquetOptions{ZstdLevel: l}).WriteParquet(&buf, recs); err == nil || buf.Len() != 0 {
			t.Errorf("level %d: err %v, %d bytes written", l, err, buf.Len())
		}
	}
}

// TestParquetRejectsBadBatches: a batch that is not consecutive offsets of
// one partition (stream tables), or not increasing (dead letters), is
// refused with the record that breaks it.
func TestParquetRejectsBadBatches(t *testing.T) {
	var buf bytes.Buffer
	if _, err := WriteParquet(&buf, nil); err == nil {
		t.Error("empty batch accepted")
	}
	recs := testRecords(0, 0, 5, 1)
	recs[3].Offset = 9
	if _, err := WriteParquet(&buf, recs); err == nil || !strings.Contains(err.Error(), "record 3") {
		t.Errorf("gap: %v", err)
	}
	recs = testRecords(0, 0, 5, 1)
	recs[2].Partition = 1
	if _, err := WriteParquet(&buf, recs); err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Errorf("two partitions: %v", err)
	}
	dls := []DeadLetter{{Record: testRecords(0, 4, 1, 1)[0]}, {Record: testRecords(0, 2, 1, 1)[0]}}
	if _, err := WriteDeadLetters(&buf, dls); err == nil || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("decreasing dead letters: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written by refused batches", buf.Len())
	}
}

// TestParquetFileStats: the statistics registered with the data file
// (commit.go's dataFile: bounds, value and null counts) are those of the
// rows the file holds, as iceberg-go reads them back.
func TestParquetFileStats(t *testing.T) {
	c, _ := openTestCatalog(t)
	ctx := context.Background()
	const stream = "factory.stats"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	recs := testRecords(0, 0, RowGroupRows+100, 1_700_000_000_000_000)
	fm := writeFile(t, c, stream, recs)
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: 0, To: int64(len(recs)), Files: []FileMeta{fm}}}, nil); err != nil {
		t.Fatal(err)
	}
	tb, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	files, err := liveDataFiles(ctx, tb)
	if err != nil || len(files) != 1 {
		t.Fatalf("%d files, %v", len(files), err)
	}
	df := files[0].df
	back, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: -1})
	if err != nil || len(back) != len(recs) {
		t.Fatalf("scan: %d rows, %v", len(back), err)
	}
	var nullKeys, nullTS, nullPrin int64
	minTS, maxTS := back[0].Timestamp, back[0].Timestamp
	for _, r := range back {
		if r.Key == nil {
			nullKeys++
		}
		if r.ProducerTimestamp == 0 {
			nullTS++
		}
		if r.Principal == "" {
			nullPrin++
		}
		minTS, maxTS = min(minTS, r.Timestamp), max(maxTS, r.Timestamp)
	}
	nulls := df.NullValueCounts()
	if nulls[FieldKey] != nullKeys || nulls[FieldProducerTimestamp] != nullTS || nulls[FieldPrincipal] != nullPrin || nullKeys == 0 || nullPrin == 0 {
		t.Errorf("registered null counts %v; the rows have key %d, producer_timestamp %d, principal %d", nulls, nullKeys, nullTS, nullPrin)
	}
	if df.Count() != int64(len(back)) || df.ValueCounts()[FieldOffset] != int64(len(back)) || df.FileSizeBytes() != fm.Size {
		t.Errorf("registered %d rows, %d offsets, %d bytes; file has %d rows, %d bytes", df.Count(), df.ValueCounts()[FieldOffset], df.FileSizeBytes(), len(back), fm.Size)
	}
	if files[0].first != 0 || files[0].last != int64(len(recs)-1) || files[0].partition != 0 {
		t.Errorf("registered bounds p%d [%d,%d]", files[0].partition, files[0].first, files[0].last)
	}
	lo, hi := df.LowerBoundValues()[FieldTimestamp], df.UpperBoundValues()[FieldTimestamp]
	if len(lo) != 8 || int64(binary.LittleEndian.Uint64(lo)) != minTS || int64(binary.LittleEndian.Uint64(hi)) != maxTS {
		t.Errorf("timestamp bounds %x %x, rows %d..%d", lo, hi, minTS, maxTS)
	}
}

// TestParquetWorstNesting: the deepest payloads typed accepts (lists of
// lists and structs of structs at typed.MaxDepth, the most Dremel levels a
// column can get) and the widest (typed.DefaultMaxColumns fields) write
// and read back through iceberg-go.
func TestParquetWorstNesting(t *testing.T) {
	c, _ := openTestCatalog(t)
	d := typed.MaxDepth - 1 // the payload's object is one level
	lists := `{"l":` + strings.Repeat("[", d) + "1,null" + strings.Repeat("]", d) + `}`
	structs := `{"s":` + strings.Repeat(`{"x":`, d-2) + `{"y":[1,2]}` + strings.Repeat("}", d-2) + `}`
	var wide strings.Builder
	wide.WriteString(`{"w0":0`)
	for i := 1; i < typed.DefaultMaxColumns-40; i++ {
		fmt.Fprintf(&wide, `,"w%d":%d`, i, i)
	}
	wide.WriteString("}")
	recs := payloadRecords(0, 0, lists, structs, wide.String(), lists)
	sh := commitShaped(t, c, "factory.worst", recs)
	if dls := sh.DeadLetters(recs); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
	tb, err := c.LoadTable(context.Background(), "factory.worst")
	if err != nil {
		t.Fatal(err)
	}
	got := scanColumns(t, tb, "l", "s", "w1", fmt.Sprintf("w%d", typed.DefaultMaxColumns-41))
	wantL := strings.Repeat("[", d) + "1,null" + strings.Repeat("]", d)
	if got[0][0] != wantL || got[3][0] != wantL || got[1][0] != "null" {
		t.Errorf("l: %q, want %q", got[0][0], wantL)
	}
	if !strings.Contains(got[1][1], `{"y":[1,2]}`) || got[0][1] != "null" {
		t.Errorf("s: %q", got[1][1])
	}
	if got[2][2] != "1" || got[2][3] != strconv.Itoa(typed.DefaultMaxColumns-41) {
		t.Errorf("wide: %v", got[2])
	}
}

// TestParquetConcurrentWriters: the uplink, compaction and dead letters
// write at once through the shared plans and codecs; each file is the
// same bytes as when written alone.
func TestParquetConcurrentWriters(t *testing.T) {
	recs := testRecords(0, 0, 3000, 1_700_000_000_000_000)
	var alone bytes.Buffer
	if _, err := WriteParquet(&alone, recs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 3 {
				var buf bytes.Buffer
				if _, err := WriteParquet(&buf, recs); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(buf.Bytes(), alone.Bytes()) {
					t.Error("a file written concurrently differs from the same file written alone")
					return
				}
			}
		})
	}
	wg.Wait()
}
