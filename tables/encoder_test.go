package tables

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/typed"
)

// TestEncoderMatchesWriteParquet: a file appended a few records at a time
// (slices of every awkward size: 1, a chunk less one, across a row group)
// has exactly the bytes and stats WriteParquet writes for the same
// records, and an Encoder refuses a record that does not continue it.
func TestEncoderMatchesWriteParquet(t *testing.T) {
	for _, n := range []int{1, pqChunkRows - 1, pqChunkRows, RowGroupRows, RowGroupRows + 1500, 2*RowGroupRows + 7} {
		recs := testRecords(3, 100, n, 1_700_000_000_000_000)
		var want bytes.Buffer
		wst, err := WriteParquet(&want, recs)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []int{1, 7, pqChunkRows - 1, pqChunkRows + 1, 5000, n} {
			e, err := ParquetOptions{}.NewEncoder()
			if err != nil {
				t.Fatal(err)
			}
			for lo := 0; lo < n; lo += step {
				if err := e.Append(recs[lo:min(lo+step, n)]); err != nil {
					t.Fatal(err)
				}
			}
			if e.Records() != int64(n) || e.Next() != recs[n-1].Offset+1 {
				t.Fatalf("n=%d step=%d: records %d next %d", n, step, e.Records(), e.Next())
			}
			got, st, err := e.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("n=%d step=%d: %d bytes, WriteParquet wrote %d different ones", n, step, len(got), want.Len())
			}
			if st != wst {
				t.Fatalf("n=%d step=%d: stats %+v, want %+v", n, step, st, wst)
			}
		}
	}
	e, _ := ParquetOptions{}.NewEncoder()
	recs := testRecords(0, 0, 3, 1)
	if err := e.Append(recs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := e.Append(recs[2:]); err == nil {
		t.Fatal("a gap was accepted")
	}
	if _, _, err := e.Close(); err == nil {
		t.Fatal("closed after an error")
	}
	if _, err := (ParquetOptions{ZstdLevel: 23}).NewEncoder(); err == nil {
		t.Fatal("zstd level 23 accepted")
	}
}

// typedPayload is the i-th payload of a typed test batch: scalars, a
// struct holding a list, a list with nulls, an event time (none on some).
func typedPayload(i int) string {
	ts := fmt.Sprintf(`,"ts":"2025-01-02T03:%02d:%02dZ"`, i/60%60, i%60)
	if i%11 == 0 {
		ts = ""
	}
	return fmt.Sprintf(`{"device":"d%d","temp":%d.5,"n":%d,"ok":%t,"pos":{"xs":[%d,%d]},"tags":["a",null,"t%d"]%s}`,
		i%7, i%40, i, i%2 == 0, i, -i, i%3, ts)
}

// TestShapedEncoderMatchesWriteParquetShaped: a typed stream's file
// appended a few records at a time, each slice shaped on its own against
// the table as it is (Preshape, as the uplink's pre-encoder does) or taken
// from the whole batch's Shape (the pass's tail), has exactly the bytes
// and stats WriteParquetShaped writes for the batch; dead letters inside
// the batch (null typed columns) included.
func TestShapedEncoderMatchesWriteParquetShaped(t *testing.T) {
	c, _ := openTestCatalog(t)
	ctx := context.Background()
	const stream = "enc.typed"
	pol := typed.Policy{Mode: typed.Infer, Timestamps: true, EventTime: "ts"}
	mk := func(from int64, n int, bad func(i int) bool) []*tributary.Record {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = typedPayload(int(from) + i)
			if bad != nil && bad(i) {
				ps[i] = "not json"
			}
		}
		recs := payloadRecords(0, from, ps...)
		for _, r := range recs {
			r.Stream = stream
		}
		return recs
	}
	commitShapedWith(t, c, stream, pol, mk(0, 10, nil)) // the columns exist
	n := RowGroupRows + 1500
	recs := mk(10, n, func(i int) bool { return i > n-300 && i%97 == 0 })
	sh, err := c.Shape(ctx, stream, pol, recs)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Added != 0 || len(sh.DeadLetters(recs)) == 0 {
		t.Fatalf("added %d columns, %d dead letters: want 0 and some", sh.Added, len(sh.DeadLetters(recs)))
	}
	var want bytes.Buffer
	wst, err := WriteParquetShaped(&want, recs, sh)
	if err != nil {
		t.Fatal(err)
	}
	if !wst.EventTimes || wst.NullEventTimes == 0 {
		t.Fatalf("stats %+v: want event times, some null", wst)
	}
	for _, step := range []int{1, pqChunkRows - 1, pqChunkRows + 1, 5000} {
		var e *Encoder
		pre := 0 // records appended from Preshape's Shapeds
		for pre < n {
			slice := recs[pre:min(pre+step, n)]
			psh, k, err := c.Preshape(ctx, stream, pol, slice)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				break
			}
			if !SameSchema(psh.Schema, sh.Schema) {
				t.Fatalf("Preshape's schema %v, Shape's %v", psh.Schema, sh.Schema)
			}
			if e == nil {
				if e, err = (ParquetOptions{}).NewShapedEncoder(psh); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.AppendShaped(slice[:k], psh); err != nil {
				t.Fatal(err)
			}
			pre += k
			if k < len(slice) {
				break // a dead letter ends what Preshape takes
			}
		}
		if pre == 0 || pre >= n {
			t.Fatalf("step %d: Preshape took %d of %d records (dead letters at the end)", step, pre, n)
		}
		if ok, _ := sh.Typed(recs[pre].Offset); ok {
			t.Fatalf("step %d: Preshape stopped at a typed record (offset %d)", step, recs[pre].Offset)
		}
		if err := e.AppendShaped(recs[pre:], sh); err != nil {
			t.Fatal(err)
		}
		got, st, err := e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("step %d: %d bytes, WriteParquetShaped wrote %d different ones", step, len(got), want.Len())
		}
		if st != wst {
			t.Fatalf("step %d: stats %+v, want %+v", step, st, wst)
		}
	}
	// A typed file takes only shaped records of its schema.
	e, _ := (ParquetOptions{}).NewShapedEncoder(sh)
	if err := e.Append(recs[:1]); err == nil {
		t.Fatal("unshaped records appended to a typed file")
	}
	e, _ = (ParquetOptions{}).NewShapedEncoder(sh)
	other := *sh
	other.Schema = EnvelopeSchema()
	if err := e.AppendShaped(recs[:1], &other); err == nil {
		t.Fatal("records of another schema appended")
	}
}

// TestPreshapeStops: Preshape takes records only while the table need not
// change and nothing is a dead letter: it stops before a payload with a new
// field, before one that is not JSON, before one whose field conflicts with
// its column's type; takes nothing while the event_time column or a
// declared column is missing; and changes no table.
func TestPreshapeStops(t *testing.T) {
	c, _ := openTestCatalog(t)
	ctx := context.Background()
	const stream = "pre.shape"
	pol := typed.Policy{Mode: typed.Infer, Timestamps: true}
	recsOf := func(from int64, ps ...string) []*tributary.Record {
		recs := payloadRecords(0, from, ps...)
		for _, r := range recs {
			r.Stream = stream
		}
		return recs
	}
	commitShapedWith(t, c, stream, pol, recsOf(0, `{"a":1,"s":{"b":"x"}}`))
	before, _ := c.LoadTable(ctx, stream)
	cases := []struct {
		name string
		ps   []string
		want int
	}{
		{"all known", []string{`{"a":2}`, `{"s":{"b":"y"}}`, `{"a":3,"s":null}`}, 3},
		{"new field", []string{`{"a":2}`, `{"a":3,"c":true}`, `{"a":4}`}, 1},
		{"new nested field", []string{`{"a":2}`, `{"a":2}`, `{"s":{"z":1}}`}, 2},
		{"not json", []string{`{"a":2}`, `nope`, `{"a":4}`}, 1},
		{"type conflict", []string{`{"a":"text"}`, `{"a":4}`}, 0},
		{"not an object", []string{`[1,2]`}, 0},
	}
	for _, tc := range cases {
		sh, n, err := c.Preshape(ctx, stream, pol, recsOf(1, tc.ps...))
		if err != nil {
			t.Fatal(err)
		}
		if n != tc.want || (n == 0) != (sh == nil) {
			t.Errorf("%s: took %d (shaped %v), want %d", tc.name, n, sh != nil, tc.want)
		}
	}
	et := typed.Policy{Mode: typed.Infer, Timestamps: true, EventTime: "ts"}
	if _, n, _ := c.Preshape(ctx, stream, et, recsOf(1, `{"a":2}`)); n != 0 {
		t.Errorf("no event_time column yet: took %d", n)
	}
	decl := typed.Policy{Mode: typed.Declared, Columns: &typed.Type{Kind: typed.Struct, Fields: []*typed.Field{
		{Name: "a", Type: &typed.Type{Kind: typed.Long}}, {Name: "q", Type: &typed.Type{Kind: typed.String}}}}}
	if _, n, _ := c.Preshape(ctx, stream, decl, recsOf(1, `{"a":2}`)); n != 0 {
		t.Errorf("declared column q missing: took %d", n)
	}
	after, _ := c.LoadTable(ctx, stream)
	if after.MetadataLocation() != before.MetadataLocation() {
		t.Fatal("Preshape changed the table")
	}
}
