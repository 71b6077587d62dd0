package tables

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestReader reads offset ranges across files, stops at the mark, finds
// offsets by time and tells missing streams and partitions apart.
func TestReader(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "read.s"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(0, 0, 30, ts)
	for i := 0; i < 30; i += 10 {
		appendRecs(t, c, stream, recs[i:i+10])
	}
	r := NewReader(c, ReaderConfig{MetadataMaxAge: time.Millisecond})

	parts, err := r.Partitions(ctx, stream)
	if err != nil || len(parts) != 1 || parts[0] != 0 {
		t.Fatalf("partitions %v, %v", parts, err)
	}
	v, err := r.Partition(ctx, stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.End != 30 || v.Earliest != 0 {
		t.Fatalf("end %d earliest %d, want 30 0", v.End, v.Earliest)
	}
	var got []*tributary.Record
	if err := v.Read(ctx, 5, func(r *tributary.Record) bool { got = append(got, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 25 {
		t.Fatalf("read %d records from 5, want 25", len(got))
	}
	for i, g := range got {
		if err := sameRecord(g, recs[5+i]); err != nil {
			t.Fatalf("offset %d: %v", 5+i, err)
		}
	}
	n := 0
	if err := v.Read(ctx, 8, func(*tributary.Record) bool { n++; return n < 4 }); err != nil || n != 4 {
		t.Fatalf("stopped read: %d records, %v", n, err)
	}
	if rec, err := v.OffsetForTime(ctx, ts+17); err != nil || rec == nil || rec.Offset != 17 {
		t.Fatalf("offset for time: %v, %v", rec, err)
	}
	if rec, err := v.OffsetForTime(ctx, ts+1000); err != nil || rec != nil {
		t.Fatalf("offset for a future time: %v, %v", rec, err)
	}
	if _, err := r.Partition(ctx, stream, 3); !errors.Is(err, ErrNoSuchPartition) {
		t.Fatalf("missing partition: %v", err)
	}
	if _, err := r.Partition(ctx, "read.none", 0); !errors.Is(err, ErrNoSuchStream) {
		t.Fatalf("missing stream: %v", err)
	}
	if l, err := r.ListStreams(ctx); err != nil || len(l) != 1 || l[0] != stream {
		t.Fatalf("streams %v, %v", l, err)
	}
}

// TestReaderAfterCompaction: a compaction replaces the files a reader has
// indexed with one file of the same offsets, then the old files are
// deleted; the next appends keep the offsets contiguous, so only the
// snapshot history tells the index is stale. Reads must still succeed.
func TestReaderAfterCompaction(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "read.compact"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(0, 0, 40, ts)
	for i := 0; i < 30; i += 10 {
		appendRecs(t, c, stream, recs[i:i+10])
	}
	r := NewReader(c, ReaderConfig{MetadataMaxAge: time.Nanosecond})
	readAll := func(want int) {
		t.Helper()
		v, err := r.Partition(ctx, stream, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []*tributary.Record
		if err := v.Read(ctx, 0, func(r *tributary.Record) bool { got = append(got, r); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Fatalf("read %d records, want %d", len(got), want)
		}
		for i, g := range got {
			if err := sameRecord(g, recs[i]); err != nil {
				t.Fatalf("offset %d: %v", i, err)
			}
		}
	}
	// Index the files without reading them (nothing in the row cache).
	if _, err := r.Partition(ctx, stream, 0); err != nil {
		t.Fatal(err)
	}
	tbl, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	before, err := liveDataFiles(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Maintain(ctx, stream, MaintainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactInputs != 3 {
		t.Fatalf("compaction took %d files, want 3: %+v", res.CompactInputs, res)
	}
	for _, f := range before {
		if err := os.Remove(localPath(t, c, f.df.FilePath())); err != nil {
			t.Fatal(err)
		}
	}
	appendRecs(t, c, stream, recs[30:40])
	readAll(40)
}

// TestReaderRowGroups: RowGroupAt locates row groups from the footer
// (across files, nothing at or past the mark), Rows decodes them, Next
// walks them in order, and a reader's first touch has the next row
// groups decoded ahead on the bounded workers.
func TestReaderRowGroups(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "read.rg"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
	n := 2*RowGroupRows + 5 // a file of three row groups, then a small one
	recs := testRecords(0, 0, n+7, ts)
	appendRecs(t, c, stream, recs[:n])
	appendRecs(t, c, stream, recs[n:])
	r := NewReader(c, ReaderConfig{MetadataMaxAge: time.Millisecond, DecodeWorkers: 1})
	v, err := r.Partition(ctx, stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	var refs []RowGroupRef
	ref, ok, err := v.RowGroupAt(ctx, RowGroupRows+3)
	if err != nil || !ok || ref.First != RowGroupRows || ref.Count != RowGroupRows || ref.Key.Index != 1 {
		t.Fatalf("row group of %d: %+v %v %v", RowGroupRows+3, ref, ok, err)
	}
	for ref, ok, err = v.RowGroupAt(ctx, 0); ok; ref, ok, err = v.Next(ctx, ref) {
		refs = append(refs, ref)
	}
	if err != nil || len(refs) != 4 || refs[3].First != int64(n) || refs[3].End() != v.End {
		t.Fatalf("row groups %+v, %v", refs, err)
	}
	if _, ok, _ := v.RowGroupAt(ctx, v.End); ok {
		t.Fatal("a row group at the mark")
	}
	rows, err := v.Rows(ctx, refs[1])
	if err != nil || int64(len(rows)) != refs[1].Count || rows[0].Offset != refs[1].First {
		t.Fatalf("rows of %+v: %d, %v", refs[1], len(rows), err)
	}
	// The first touch of row group 0 has the next ones decoded ahead:
	// row group 1 is cached already, so 2; the one worker is then busy,
	// so 3 waits for the next touch.
	v.Prefetch(refs[0])
	testkit.Eventually(t, time.Minute, "row group 2 prefetched", func() bool {
		_, ok := r.rows.Get(refs[2].Key)
		return ok && len(r.workers) == 0
	})
	if _, ok := r.rows.Get(refs[3].Key); ok {
		t.Fatal("row group 3 decoded although the only worker was busy")
	}
	v.Prefetch(refs[1])
	testkit.Eventually(t, time.Minute, "row group 3 prefetched", func() bool {
		_, ok := r.rows.Get(refs[3].Key)
		return ok
	})
}
