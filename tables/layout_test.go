package tables

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tributary-io/tributary"
)

func micros(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMicro()
}

// TestCutRuns: runs of records are cut exactly where the bucket of the
// granularity changes, and nowhere else.
func TestCutRuns(t *testing.T) {
	ts := []string{
		"2026-11-30T22:59:59Z", "2026-11-30T23:00:00Z", "2026-11-30T23:59:59.999999Z",
		"2026-12-01T00:00:00Z", "2026-12-01T00:30:00Z",
		"2026-11-30T23:10:00Z", // a copied record whose accept time is earlier
	}
	for _, tc := range []struct {
		g    Granularity
		want string // run lengths
	}{
		{GranularityDay, "[3 2 1]"},
		{GranularityHour, "[1 2 2 1]"},
	} {
		t.Run(tc.g.String(), func(t *testing.T) {
			var recs []*tributary.Record
			for i, s := range ts {
				recs = append(recs, &tributary.Record{Offset: int64(i), Timestamp: micros(s)})
			}
			runs := CutRuns(tc.g, recs)
			var lens []int
			var all []*tributary.Record
			for _, r := range runs {
				lens = append(lens, len(r))
				all = append(all, r...)
				for _, x := range r {
					if tc.g.Bucket(x.Timestamp) != tc.g.Bucket(r[0].Timestamp) {
						t.Fatalf("run %v spans buckets", r)
					}
				}
			}
			if got := fmt.Sprint(lens); got != tc.want {
				t.Fatalf("run lengths %s, want %s", got, tc.want)
			}
			if !slices.Equal(all, recs) {
				t.Fatal("runs are not the records in order")
			}
		})
	}
	if CutRuns(GranularityHour, nil) != nil {
		t.Fatal("runs of nothing")
	}
}

func TestGranularityBucket(t *testing.T) {
	for _, tc := range []struct {
		g    Granularity
		ts   string
		want int32
	}{
		{GranularityDay, "1970-01-01T00:00:00Z", 0},
		{GranularityDay, "1970-01-01T23:59:59.999999Z", 0},
		{GranularityDay, "1970-01-02T00:00:00Z", 1},
		{GranularityDay, "1969-12-31T23:59:59.999999Z", -1},
		{GranularityHour, "1970-01-01T01:00:00Z", 1},
		{GranularityHour, "1969-12-31T23:30:00Z", -1},
		{GranularityHour, "2026-11-30T23:00:00Z", int32(time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC).Unix() / 3600)},
	} {
		if got := tc.g.Bucket(micros(tc.ts)); got != tc.want {
			t.Errorf("%s bucket of %s: %d, want %d", tc.g, tc.ts, got, tc.want)
		}
	}
	for _, s := range []string{"", "day", "hour", "minute"} {
		g, err := ParseGranularity(s)
		spec, serr := PartitionSpec(s)
		if (err == nil) != (serr == nil) {
			t.Fatalf("%q: ParseGranularity %v, PartitionSpec %v", s, err, serr)
		}
		if err != nil {
			if !errors.Is(err, ErrUnsupportedSpec) {
				t.Fatalf("%q: %v", s, err)
			}
			continue
		}
		if gs, err := GranularityOf(spec); err != nil || gs != g {
			t.Fatalf("%q: spec granularity %v %v, want %v", s, gs, err, g)
		}
	}
}

// TestHourGranularity: on an hour-partitioned table, a file spanning an
// hour is refused; the runs CutRuns makes of the same records commit; and
// compaction merges small files within each hour, never across one.
func TestHourGranularity(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Open(ctx, Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse"), Granularity: "hour"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const stream = "hour.s"
	if g, err := c.Granularity(ctx, stream); err != nil || g != GranularityHour {
		t.Fatalf("granularity %v, %v", g, err)
	}
	// 40 records, one a minute from 22:40: hours 22 and 23.
	start := micros("2026-11-30T22:40:00Z")
	recs := testRecords(0, 0, 40, 0)
	for i, r := range recs {
		r.Timestamp = start + int64(i)*int64(time.Minute/time.Microsecond)
	}
	whole := putFile(t, c, stream, recs)
	_, err = c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: 0, To: 40, Files: []FileMeta{whole}}}, nil)
	if !errors.Is(err, ErrSpansBuckets) {
		t.Fatalf("a file spanning an hour: %v, want ErrSpansBuckets", err)
	}
	// Small appends of the cut runs: 5 records each.
	for _, run := range CutRuns(GranularityHour, recs) {
		for i := 0; i < len(run); i += 5 {
			appendRecs(t, c, stream, run[i:min(i+5, len(run))])
		}
	}
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 2 {
		t.Fatalf("%d compaction groups, want 2 (one per hour): %+v", res.CompactGroups, res)
	}
	live := loadLive(t, c, stream)
	hours := map[string]int64{}
	for _, f := range live {
		hours[f.key] += f.df.Count()
	}
	if len(live) != 2 || len(hours) != 2 {
		t.Fatalf("%d files in %d hours after compaction, want 2 in 2: %v", len(live), len(hours), hours)
	}
	// The hour files are each in their own bucket: nothing left to merge.
	if res, err = c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "t"}}); err != nil || res.CompactGroups != 0 {
		t.Fatalf("second pass: %v, compaction %+v, want none", err, res)
	}
	checkTable(t, c, stream, recs)
}

// TestCompactionAfterFinerGranularity: a day-partitioned table whose spec
// is evolved to hour compacts its old day files into one file per hour
// (the current spec's buckets), never one file spanning hours.
func TestCompactionAfterFinerGranularity(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "evolve.s"
	start := micros("2026-11-30T22:40:00Z")
	recs := testRecords(0, 0, 40, 0)
	for i, r := range recs {
		r.Timestamp = start + int64(i)*int64(time.Minute/time.Microsecond)
	}
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(recs); i += 8 { // day files; two of them span 23:00
		appendRecs(t, c, stream, recs[i:i+8])
	}
	tbl, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).RemoveField("timestamp_day").AddField(ColTimestamp, iceberg.HourTransform{}, "timestamp_hour").Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LoadTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Granularity(ctx, stream); err != nil || g != GranularityHour {
		t.Fatalf("granularity after evolution: %v %v", g, err)
	}
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 1 || res.CompactInputs != 5 {
		t.Fatalf("compaction %+v, want the 5 day files in one group", res)
	}
	if tbl, err = c.LoadTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	live, err := liveDataFiles(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 2 {
		t.Fatalf("%d files after compaction, want one per hour (2)", len(live))
	}
	for _, f := range live {
		lo, hi := f.df.LowerBoundValues()[FieldTimestamp], f.df.UpperBoundValues()[FieldTimestamp]
		if HourOf(int64(binary.LittleEndian.Uint64(lo))) != HourOf(int64(binary.LittleEndian.Uint64(hi))) {
			t.Fatalf("%s spans hours", f.df.FilePath())
		}
	}
	// The hour files are each in their own bucket: nothing left to merge.
	if res, err = c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "t"}}); err != nil || res.CompactGroups != 0 {
		t.Fatalf("second pass: %v, compaction %+v, want none", err, res)
	}
	checkTable(t, c, stream, recs)
}

// TestFileOrigins: a data file's name records who committed it under
// which epoch (invariant 4): read back from the name, refused by a commit
// at another epoch, listed by Committed, and kept by compaction, which
// never merges files of two origins.
func TestFileOrigins(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "origin.s"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	o1, o2 := OriginOf("n1", 0), OriginOf("node-2.site:a", 1)
	st := FileStats{Partition: 0, FirstOffset: 3, LastOffset: 9}
	if got := FileOrigin(DataFileURL(c.TableLocation(stream), st, o2)); got != o2 || !got.By("node-2.site:a") || got.By("n1") || got.Epoch() != 1 {
		t.Fatalf("origin from the name: %v", got)
	}
	if got := FileOrigin(DataFileURL(c.TableLocation(stream), st, Origin{})); !got.IsZero() || got.By("n1") {
		t.Fatalf("a name without origin reads as %v", got)
	}

	recs := testRecords(0, 0, 16, micros("2026-11-30T10:00:00Z"))
	commit := func(recs []*tributary.Record, o Origin, epoch int64) error {
		var buf bytes.Buffer
		st, err := WriteParquet(&buf, recs)
		if err != nil {
			t.Fatal(err)
		}
		f := storeFileAs(t, c, stream, buf.Bytes(), st, o)
		_, err = c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: recs[0].Offset,
			To: recs[len(recs)-1].Offset + 1, Epoch: epoch, Files: []FileMeta{f}}}, nil)
		return err
	}
	if err := commit(recs[:4], o2, 0); err == nil {
		t.Fatal("a file named for epoch 1 was committed in an append at epoch 0")
	}
	for i, o := range []Origin{o1, o1, o2, o2} {
		if err := commit(recs[i*4:i*4+4], o, o.Epoch()); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 2 || res.CompactInputs != 4 {
		t.Fatalf("compaction %+v, want two groups of two (one per origin)", res)
	}
	files, err := c.Committed(ctx, stream, 0, 2, 12)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].First != 0 || files[0].Last != 7 || files[0].Origin != o1 ||
		files[1].First != 8 || files[1].Last != 15 || files[1].Origin != o2 {
		t.Fatalf("committed files after compaction: %+v", files)
	}
	checkTable(t, c, stream, recs)
}
