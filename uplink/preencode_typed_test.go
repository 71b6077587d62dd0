package uplink

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
	"github.com/tributary-io/tributary/wal"
)

// typedJSON is the i-th payload of the typed tests: scalars, a struct
// holding a list, an event time on most.
func typedJSON(i int) []byte {
	ts := fmt.Sprintf(`,"ts":"2025-01-02T03:%02d:%02dZ"`, i/60%60, i%60)
	if i%13 == 0 {
		ts = ""
	}
	return []byte(fmt.Sprintf(`{"device":"d%d","temp":%d.5,"n":%d,"pos":{"xs":[%d,%d]}%s}`, i%7, i%40, i, i, -i, ts))
}

// appendPayloads appends the payloads to partition p in groups of 500
// (some with a key and headers) and returns them.
func appendPayloads(t testing.TB, e *env, stream string, p int32, ps [][]byte) [][]byte {
	t.Helper()
	for lo := 0; lo < len(ps); lo += 500 {
		var recs []*tributary.Record
		for i := lo; i < min(lo+500, len(ps)); i++ {
			r := &tributary.Record{Stream: stream, Partition: p, Value: ps[i], Topic: fmt.Sprintf("t/%d", i%5), Source: "mqtt", ClientID: "c"}
			if i%3 == 0 {
				r.Key, r.Headers = []byte{byte(i)}, []tributary.Header{{Key: "h", Value: []byte("x")}}
			}
			recs = append(recs, r)
		}
		if err := e.wal.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil {
			t.Fatal(err)
		}
	}
	return ps
}

func payloads(from, n int, f func(i int) []byte) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = f(from + i)
	}
	return out
}

// typedPolicies are an infer stream with event times and a schema stream
// declaring the payloads' fields.
var typedPolicies = map[string]typed.Policy{
	"infer": {Mode: typed.Infer, Timestamps: true, EventTime: "ts"},
	"schema": {Mode: typed.Declared, Columns: &typed.Type{Kind: typed.Struct, Fields: []*typed.Field{
		{Name: "device", Type: &typed.Type{Kind: typed.String}},
		{Name: "temp", Type: &typed.Type{Kind: typed.Double}},
		{Name: "n", Type: &typed.Type{Kind: typed.Long}},
		{Name: "pos", Type: &typed.Type{Kind: typed.Struct, Fields: []*typed.Field{
			{Name: "xs", Type: &typed.Type{Kind: typed.List, Elem: &typed.Type{Kind: typed.Long}}}}}},
	}}},
}

// typedEnv is an uplink with continuous encoding on one typed stream
// whose table already has its columns (a first batch committed).
func typedEnv(t *testing.T, stream string, pol typed.Policy) (*env, *Uplink, *keepBucket, [][]byte) {
	t.Helper()
	e := newEnv(t, 0)
	kb := &keepBucket{Bucket: e.bucket}
	u := New(Config{Node: "n1", ContinuousEncoding: true, Logger: quietLogger(), QuarantineDir: t.TempDir(),
		Payloads: map[string]typed.Policy{stream: pol}}, e.wal, e.cat, kb)
	vals := appendPayloads(t, e, stream, 0, payloads(0, 5, typedJSON))
	if err := u.SyncAll(context.Background()); err != nil { // the columns
		t.Fatal(err)
	}
	kb.objs = nil
	return e, u, kb, vals
}

// burstFile is the file the burst path writes for the WAL's unreleased
// records of partition 0 (shaped as the pass shapes them; the table's
// columns are all there, so Shape changes nothing).
func burstFile(t *testing.T, e *env, stream string, pol typed.Policy) ([]byte, *tables.Shaped) {
	t.Helper()
	ctx := context.Background()
	st := e.wal.Partitions()[0]
	recs, err := e.wal.Read(stream, 0, st.Released, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := e.cat.Shape(ctx, stream, pol, recs)
	if err != nil || sh.Added != 0 {
		t.Fatalf("shape: %v, %d columns added", err, sh.Added)
	}
	var want bytes.Buffer
	if _, err := tables.WriteParquetShaped(&want, recs, sh); err != nil {
		t.Fatal(err)
	}
	return want.Bytes(), sh
}

// syncUsedOne makes a pass that must use one pre-encoded file, discard
// none and upload one file: want, the burst path's bytes.
func syncUsedOne(t *testing.T, u *Uplink, kb *keepBucket, want []byte) {
	t.Helper()
	if err := u.SyncAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 1 || preCount(u, "discarded") != 0 {
		t.Fatalf("pre-encoded files used %d, discarded %d; want 1, 0", preCount(u, "used"), preCount(u, "discarded"))
	}
	if got := onlyFile(t, kb); !bytes.Equal(got, want) {
		t.Fatalf("%d bytes differ from the burst path's %d", len(got), len(want))
	}
}

// onlyFile returns the one file uploaded since kb.objs was reset.
func onlyFile(t *testing.T, kb *keepBucket) []byte {
	t.Helper()
	if len(kb.objs) != 1 {
		t.Fatalf("%d files uploaded, want 1", len(kb.objs))
	}
	for _, b := range kb.objs {
		return b
	}
	return nil
}

// TestPreEncodedTypedIsTheBurstFile: for an infer stream (with event
// times) and a schema stream, records pre-encoded as they landed (across
// a row group), then a tail that landed after: the pass uses the file and
// it has exactly the bytes the burst path writes (WriteParquetShaped of
// the batch's Shape); the table holds every record once.
func TestPreEncodedTypedIsTheBurstFile(t *testing.T) {
	for name, pol := range typedPolicies {
		t.Run(name, func(t *testing.T) {
			stream := "pre." + name
			e, u, kb, vals := typedEnv(t, stream, pol)
			ctx := context.Background()
			n := tables.RowGroupRows + 3000
			vals = append(vals, appendPayloads(t, e, stream, 0, payloads(5, n, typedJSON))...)
			preencodeAll(ctx, u)
			if got := u.pre.records.Load(); got != int64(n) {
				t.Fatalf("%d records pre-encoded, want %d", got, n)
			}
			vals = append(vals, appendPayloads(t, e, stream, 0, payloads(5+n, 777, typedJSON))...)
			want, _ := burstFile(t, e, stream, pol)
			syncUsedOne(t, u, kb, want)
			checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
			if unreleased(e.wal) != 0 || u.pre.records.Load() != 0 || u.pre.bytes.Load() != 0 {
				t.Fatalf("WAL not released, or %d records (%d bytes) still pre-encoded", u.pre.records.Load(), u.pre.bytes.Load())
			}
		})
	}
}

// TestPreEncodedTypedEvolution: a payload with a new field lands after
// 2,000 pre-encoded ones. The file ends before it (the pre-encoder never
// encodes what needs the schema to change); the pass adds the column, so
// the batch's schema is not the file's: discarded, the batch encoded
// anew, the new column right in the table. The next file is encoded with
// the evolved schema and used.
func TestPreEncodedTypedEvolution(t *testing.T) {
	const stream = "pre.evolve"
	pol := typedPolicies["infer"]
	e, u, kb, vals := typedEnv(t, stream, pol)
	ctx := context.Background()
	vals = append(vals, appendPayloads(t, e, stream, 0, payloads(5, 2000, typedJSON))...)
	vals = append(vals, appendPayloads(t, e, stream, 0, [][]byte{[]byte(`{"device":"new","extra":42}`)})...)
	vals = append(vals, appendPayloads(t, e, stream, 0, payloads(2006, 1000, typedJSON))...)
	preencodeAll(ctx, u)
	if got := u.pre.records.Load(); got != 2000 {
		t.Fatalf("%d records pre-encoded, want the 2000 before the new field", got)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 0 || preCount(u, "discarded") != 1 {
		t.Fatalf("evolved: used %d, discarded %d; want 0, 1", preCount(u, "used"), preCount(u, "discarded"))
	}
	tb, err := e.cat.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Schema().FindFieldByName("extra"); !ok {
		t.Fatal("no extra column")
	}
	rows := scanTyped(t, e, stream, "extra")
	if got := rows[2005]; got != "42" {
		t.Fatalf("extra at offset 2005 = %q, want 42", got)
	}
	if got := rows[2004]; got != "" {
		t.Fatalf("extra at offset 2004 = %q, want null", got)
	}
	// The next file has the evolved schema and is used.
	kb.objs = nil
	vals = append(vals, appendPayloads(t, e, stream, 0, payloads(3006, 1500, typedJSON))...)
	preencodeAll(ctx, u)
	want, _ := burstFile(t, e, stream, pol)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if preCount(u, "used") != 1 {
		t.Fatalf("after the evolution: used %d, want 1", preCount(u, "used"))
	}
	if got := onlyFile(t, kb); !bytes.Equal(got, want) {
		t.Fatalf("%d bytes differ from the burst path's %d", len(got), len(want))
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
}

// TestPreEncodedTypedDeadLetter: a payload that is not JSON in the middle
// of what landed ends the file before it; the pass's batch holds it as a
// dead letter (null typed columns) and the file is still a prefix of the
// batch's run under the same schema: used, completed with the tail, and
// byte for byte the burst file. The dead letter is in the dead-letter
// table once.
func TestPreEncodedTypedDeadLetter(t *testing.T) {
	for name, pol := range typedPolicies {
		t.Run(name, func(t *testing.T) {
			stream := "pre.dlq" + name
			e, u, kb, vals := typedEnv(t, stream, pol)
			ctx := context.Background()
			vals = append(vals, appendPayloads(t, e, stream, 0, payloads(5, 1500, typedJSON))...)
			vals = append(vals, appendPayloads(t, e, stream, 0, [][]byte{[]byte(`not json`)})...)
			vals = append(vals, appendPayloads(t, e, stream, 0, payloads(1506, 1000, typedJSON))...)
			preencodeAll(ctx, u)
			if got := u.pre.records.Load(); got != 1500 {
				t.Fatalf("%d records pre-encoded, want the 1500 before the dead letter", got)
			}
			want, sh := burstFile(t, e, stream, pol)
			if ok, _ := sh.Typed(1505); ok {
				t.Fatal("the bad payload is typed")
			}
			syncUsedOne(t, u, kb, want)
			checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
			dl, err := e.cat.ScanSorted(ctx, tables.DLQStream(stream), tables.ScanOptions{Partition: -1})
			if err != nil {
				t.Fatal(err)
			}
			if len(dl) != 1 || dl[0].Offset != 1505 {
				t.Fatalf("dead letters %d (first at %d), want 1 at 1505", len(dl), dl[0].Offset)
			}
		})
	}
}

// TestPreFinishTypedChecks: a typed file is completed only by a batch
// shaped with its schema that has each of its records typed with the same
// event time; never by a raw batch, nor a raw file by a typed batch.
func TestPreFinishTypedChecks(t *testing.T) {
	const stream = "pre.checks"
	pol := typedPolicies["infer"]
	e, u, _, _ := typedEnv(t, stream, pol)
	ctx := context.Background()
	appendPayloads(t, e, stream, 0, payloads(5, 300, typedJSON))
	st := e.wal.Partitions()[0]
	run, err := e.wal.Read(stream, 0, st.Released, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := func() *pre {
		u.pre.m = map[preKey]*pre{}
		preencodeAll(ctx, u)
		pr := u.pre.take(stream, 0)
		if pr == nil || len(pr.recs) != 300 {
			t.Fatal("nothing pre-encoded")
		}
		return pr
	}
	sh, err := e.cat.Shape(ctx, stream, pol, run)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := start().finish(run, sh); !ok || err != nil {
		t.Fatalf("a prefix was not used: %v", err)
	}
	if _, _, ok, _ := start().finish(run, nil); ok {
		t.Error("a typed file completed as a raw one")
	}
	other := *sh
	other.Schema = tables.EnvelopeSchema()
	if _, _, ok, _ := start().finish(run, &other); ok {
		t.Error("a file completed with another schema")
	}
	pr := start()
	pr.ets[7]++
	if _, _, ok, _ := pr.finish(run, sh); ok {
		t.Error("a file completed with another event time")
	}
	bad := append([]*tributary.Record(nil), run...)
	c := *bad[3]
	c.Value = []byte("not json")
	bad[3] = &c
	shBad, err := e.cat.Shape(ctx, stream, pol, bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := start().finish(bad, shBad); ok {
		t.Error("a file completed by a batch where its record is another")
	}
	pr = start()
	shBad2 := *sh
	if _, _, ok, _ := pr.finish(run[:10], &shBad2); ok {
		t.Error("a file completed by a shorter run")
	}
}

// scanTyped reads the stream's table with iceberg-go and returns, by
// offset, column col's value as a string ("" for null).
func scanTyped(t *testing.T, e *env, stream, col string) map[int64]string {
	t.Helper()
	ctx := context.Background()
	tb, err := e.cat.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := tb.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		offs := b.Column(b.Schema().FieldIndices(tables.ColOffset)[0]).(*array.Int64)
		c := b.Column(b.Schema().FieldIndices(col)[0])
		for i := range int(b.NumRows()) {
			if !c.IsNull(i) {
				out[offs.Value(i)] = c.ValueStr(i)
			} else {
				out[offs.Value(i)] = ""
			}
		}
		b.Release()
	}
	return out
}
