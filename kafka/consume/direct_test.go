package consume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/pqkafka"
	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/tables"
)

// The field ids the direct encoder reads are the envelope's.
func TestDirectFieldIDs(t *testing.T) {
	sc := tables.EnvelopeSchema()
	for i, name := range []string{tables.ColOffset, tables.ColTimestamp, tables.ColKey, tables.ColValue,
		tables.ColProducerTimestamp, "headers.element.key", "headers.element.value"} {
		f, ok := sc.FindFieldByName(name)
		if !ok || f.ID != pqkafka.FieldIDs[i] {
			t.Fatalf("%s: field id %d (found %v), pqkafka reads %d", name, f.ID, ok, pqkafka.FieldIDs[i])
		}
	}
}

// edgeRecords are n records from offset first with every shape a Kafka
// record can take in a table: null and empty keys, empty values, headers
// with null, empty and repeated keys and values, many headers, producer
// timestamps and none, values large enough that a row group holds many
// batches, and MQTT-like rows.
func edgeRecords(first int64, n int, ts int64) []*tributary.Record {
	out := make([]*tributary.Record, n)
	for i := range out {
		off := first + int64(i)
		r := &tributary.Record{Stream: cloudStream, Offset: off, Timestamp: ts + off*1500, Topic: "t/x",
			Source: "kafka", ClientID: "c", Node: "n", Value: fmt.Appendf(nil, "v%d", off)}
		switch off % 9 {
		case 0:
			r.Key = []byte{} // empty, not null
		case 1:
			r.Key = []byte(fmt.Sprintf("key-%d", off))
			r.Value = []byte{}
		case 2:
			r.Headers = []tributary.Header{{Key: "a", Value: nil}, {Key: "", Value: []byte{}}, {Key: "a", Value: []byte("dup")}}
			r.ProducerTimestamp = ts/1000 - 5000 + off
		case 3:
			r.Value = bytes.Repeat([]byte{byte(off)}, 3000+int(off%500))
		case 4:
			for h := range 40 {
				r.Headers = append(r.Headers, tributary.Header{Key: fmt.Sprintf("h%d", h), Value: bytes.Repeat([]byte{'x'}, h)})
			}
		case 5:
			r.Source, r.Headers = "mqtt", []tributary.Header{{Key: "user-prop", Value: []byte("1")}}
		case 6:
			r.Key, r.Headers = []byte{}, []tributary.Header{} // empty headers list
		}
		out[i] = r
	}
	return out
}

// The batches the direct encoder builds from the Parquet pages are byte
// for byte those the record path (tables.Reader's decode, then
// kafka.AppendBatch) builds from the same row group, and those built from
// the records that were committed; a fetch from inside a batch serves the
// whole batch, the same bytes.
func TestDirectBatchesMatchRecordPath(t *testing.T) {
	e := newCloudEnv(t, "n1")
	var all []*tributary.Record
	for _, n := range []int{tables.RowGroupRows + 700, 1, 333} { // two row groups; a single row; a small file
		recs := edgeRecords(int64(len(all)), n, e.ts)
		tabletest.Commit(t, e.cat, cloudStream, recs)
		all = append(all, recs...)
	}
	ctx := context.Background()
	tr := tables.NewReader(e.cat, tables.ReaderConfig{PrefetchRowGroups: -1})
	v, err := tr.Partition(ctx, cloudStream, 0)
	if err != nil {
		t.Fatal(err)
	}
	groups := 0
	for off := int64(0); off < v.End; {
		ref, ok, err := v.RowGroupAt(ctx, off)
		if err != nil || !ok {
			t.Fatalf("row group at %d: %v %v", off, ok, err)
		}
		direct, err := buildDirect(ctx, v, ref)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := v.Rows(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		old := encodeGroup(ref.First, rows)
		truth := encodeGroup(ref.First, all[ref.First:ref.End()])
		for _, c := range []struct {
			name string
			g    *encodedGroup
		}{{"record path", old}, {"committed records", truth}} {
			if !bytes.Equal(direct.buf, c.g.buf) || fmt.Sprint(direct.ends, direct.starts) != fmt.Sprint(c.g.ends, c.g.starts) {
				t.Fatalf("row group %s#%d: direct batches (%d bytes, %d batches) differ from the %s's (%d bytes, %d batches)",
					ref.Key.Path, ref.Key.Index, len(direct.buf), len(direct.ends), c.name, len(c.g.buf), len(c.g.ends))
			}
		}
		if ref.Count > 1000 && len(direct.ends) < 10 {
			t.Fatalf("row group of %d rows: %d batches, want many", ref.Count, len(direct.ends))
		}
		groups++
		off = ref.End()
	}
	if groups != 4 {
		t.Fatalf("%d row groups, want 4", groups)
	}

	// Through the server: a fetch from inside the third batch.
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())
	bs := splitBatches(t, rawFetch(t, rc, 0, 1<<20).RecordBatches)
	mid := bs[2].FirstOffset + int64(bs[2].NumRecords)/2
	got := splitBatches(t, rawFetch(t, rc, mid, 1<<20).RecordBatches)
	if got[0].FirstOffset != bs[2].FirstOffset || !bytes.Equal(got[0].Records, bs[2].Records) {
		t.Fatalf("fetch %d: first batch %d+%d, want the stored batch %d+%d", mid, got[0].FirstOffset, got[0].NumRecords, bs[2].FirstOffset, bs[2].NumRecords)
	}
}

// The first fetch of a cold row group is answered from a prefix of it
// while the whole row group is built in the background: the same bytes
// as the fetch answered once the row group is cached, whether the fetch
// starts at the row group's first offset or inside it, and the row group
// is built once.
func TestFirstFetchFromPrefix(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, tables.RowGroupRows, 200)
	e.commit(0, tables.RowGroupRows, 200)
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())
	for _, off := range []int64{0, int64(tables.RowGroupRows) + 9000} {
		cold := rawFetch(t, rc, off, 256<<10).RecordBatches
		for deadline := time.Now().Add(10 * time.Second); len(cs.batches.workers) > 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("builds still running")
			}
		}
		warm := rawFetch(t, rc, off, 256<<10).RecordBatches
		if len(cold) == 0 || !bytes.Equal(cold, warm) {
			t.Fatalf("fetch %d: cold %d bytes, warm %d bytes, or different bytes", off, len(cold), len(warm))
		}
		bs := splitBatches(t, cold)
		if bs[0].FirstOffset > off || bs[0].FirstOffset+int64(bs[0].NumRecords) <= off {
			t.Fatalf("fetch %d: first batch %d+%d", off, bs[0].FirstOffset, bs[0].NumRecords)
		}
	}
	// Two row groups, each built once (prefetch may have built the second
	// already; it is never built twice).
	if n := cs.batches.builds.Load(); n != 2 {
		t.Fatalf("%d builds, want 2", n)
	}
}

// Files the direct encoder does not take (compressed with snappy) are
// served through the table reader's records, and files written by
// arrow-go's pqarrow (the writer before parquet-go, with dictionary
// encodings) through the direct encoder: the same batches either way.
func TestDirectFallbackAndArrowFiles(t *testing.T) {
	for _, c := range []struct {
		name   string
		codec  compress.Compression
		direct bool
	}{{"pqarrow zstd", compress.Codecs.Zstd, true}, {"pqarrow snappy", compress.Codecs.Snappy, false}} {
		t.Run(c.name, func(t *testing.T) {
			e := newCloudEnv(t, "n1")
			recs := edgeRecords(0, 3000, e.ts)
			f := tabletest.WriteFile(t, e.cat, cloudStream, "", recs)
			rewriteWithArrow(t, e, f.URL, c.codec)
			if _, err := e.cat.CommitAppend(context.Background(), cloudStream, []tables.PartitionAppend{{Partition: 0,
				From: 0, To: 3000, Files: []tables.FileMeta{f}}}, nil); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			v, err := tables.NewReader(e.cat, tables.ReaderConfig{PrefetchRowGroups: -1}).Partition(ctx, cloudStream, 0)
			if err != nil {
				t.Fatal(err)
			}
			ref, ok, err := v.RowGroupAt(ctx, 0)
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			if _, err := buildDirect(ctx, v, ref); (err == nil) != c.direct || err != nil && !errors.Is(err, pqkafka.ErrUnsupported) {
				t.Fatalf("direct encoding: %v, want it to work: %v", err, c.direct)
			}
			g, err := build(ctx, v, ref)
			if err != nil {
				t.Fatal(err)
			}
			if want := encodeGroup(0, recs[:ref.Count]); !bytes.Equal(g.buf, want.buf) {
				t.Fatalf("%d bytes of batches, want the committed records' %d", len(g.buf), len(want.buf))
			}
		})
	}
}

// rewriteWithArrow rewrites the data file at url with pqarrow (dictionary
// encoding on, its defaults) and codec, keeping its schema and field ids.
func rewriteWithArrow(t *testing.T, e *cloudEnv, url string, codec compress.Compression) {
	t.Helper()
	key, err := e.cat.KeyOf(url)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(strings.TrimPrefix(e.cat.Warehouse(), "file://"), key)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := file.NewParquetReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var out bytes.Buffer
	if err := pqarrow.WriteTable(tbl, &out, 1<<20, parquet.NewWriterProperties(parquet.WithCompression(codec)),
		pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
