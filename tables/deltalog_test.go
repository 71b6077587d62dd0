package tables

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables/delta"
)

func deltaOf(t *testing.T, c *Catalog, stream string) (*delta.Table, delta.Store) {
	t.Helper()
	root, err := c.DeltaRoot(stream)
	if err != nil {
		t.Fatal(err)
	}
	st := delta.DirStore{Root: c.Warehouse()[len("file://"):]}
	return delta.NewTable(st, root), st
}

// checkDeltaAgrees: the Delta log lists exactly the Iceberg table's files,
// its rows are the Iceberg scan's row for row, and its txn per partition
// is the Iceberg mark.
func checkDeltaAgrees(t *testing.T, c *Catalog, stream string) *delta.Snapshot {
	t.Helper()
	ctx := context.Background()
	dt, _ := deltaOf(t, c, stream)
	s, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range HighWaters(tbl) {
		if v, _ := s.TxnVersion(DeltaAppID(stream, p)); v != h {
			t.Fatalf("partition %d: Delta txn %d, Iceberg mark %d", p, v, h)
		}
	}
	recs, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(recs) {
		t.Fatalf("Delta has %d rows, Iceberg %d", len(rows), len(recs))
	}
	type pos struct {
		p int32
		o int64
	}
	byPos := map[pos]Row{}
	for _, r := range rows {
		k := pos{int32(r[ColPartition].(int64)), r[ColOffset].(int64)}
		if _, dup := byPos[k]; dup {
			t.Fatalf("Delta has %v twice", k)
		}
		byPos[k] = r
	}
	for _, rec := range recs {
		r, ok := byPos[pos{rec.Partition, rec.Offset}]
		if !ok {
			t.Fatalf("Delta lacks %d@%d", rec.Offset, rec.Partition)
		}
		if string(r[ColValue].([]byte)) != string(rec.Value) || r[ColTopic] != rec.Topic || r[ColTimestamp].(time.Time).UnixMicro() != rec.Timestamp {
			t.Fatalf("offset %d: Delta row %v, Iceberg record %+v", rec.Offset, r, rec)
		}
	}
	return s
}

// Row aliases delta.Row for the test.
type Row = delta.Row

func TestSyncDeltaFollowsIceberg(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	_, st := deltaOf(t, c, stream)
	o := DeltaOptions{CheckpointInterval: 2, Node: "n1"}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(p, 0, 500, ts)
	var from int64
	for i, n := range []int64{100, 50, 120, 80, 150} {
		a := PartitionAppend{Partition: p, From: from, To: from + n, Files: []FileMeta{writeFile(t, c, stream, recs[from:from+n])}}
		if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
			t.Fatal(err)
		}
		from += n
		if i == 1 || i == 2 {
			continue // a crash between the two commits: the Delta log is left behind
		}
		res, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{a}, o)
		if err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if !res.Committed {
			t.Fatalf("sync %d committed nothing", i)
		}
	}
	s := checkDeltaAgrees(t, c, stream)
	if s.Version != 2 || s.Checkpoint != 2 || len(s.Files) != 5 {
		t.Fatalf("Delta at version %d (checkpoint %d) with %d files; want 3 commits, the last a checkpoint, 5 files", s.Version, s.Checkpoint, len(s.Files))
	}
	// Syncing again adds nothing: never a file twice.
	if res, err := c.SyncDelta(ctx, st, stream, nil, o); err != nil || res.Committed {
		t.Fatalf("idle sync: %+v %v", res, err)
	}
	dt, _ := deltaOf(t, c, stream)
	j, err := dt.ReplayCommits(ctx)
	if err != nil || len(j.Files) != len(s.Files) {
		t.Fatalf("checkpoint and commits disagree: %v", err)
	}
}

func TestSyncDeltaBadLogKeepsIcebergGoing(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	dt, st := deltaOf(t, c, stream)
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(p, 0, 300, ts)
	commit := func(from, to int64) PartitionAppend {
		a := PartitionAppend{Partition: p, From: from, To: to, Files: []FileMeta{writeFile(t, c, stream, recs[from:to])}}
		if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := commit(0, 100)
	if _, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{a}, DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	logKey := func(v int64) string {
		root, _ := c.DeltaRoot(stream)
		return filepath.ToSlash(filepath.Join(root, "_delta_log", delta.CommitName(v)))
	}
	cases := []struct {
		name string
		body string
		want error
	}{
		{"corrupt entry", `{"add":{"path":"x.parquet"`, delta.ErrCorrupt},
		{"foreign action", `{"sidecar":{"path":"x.parquet","sizeInBytes":1,"modificationTime":1}}`, delta.ErrUnsupported},
		{"protocol we do not implement", `{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}`, delta.ErrUnsupported},
		{"schema that disagrees", `{"metaData":{"id":"x","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"offset\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}}]}","partitionColumns":[],"configuration":{}}}`, delta.ErrSchema},
	}
	next := int64(100)
	for _, tc := range cases {
		if err := st.PutIfAbsent(ctx, logKey(1), []byte(tc.body+"\n")); err != nil {
			t.Fatal(err)
		}
		b := commit(next, next+50) // Iceberg keeps committing
		next += 50
		if _, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{b}, DeltaOptions{}); !errors.Is(err, tc.want) {
			t.Fatalf("%s: SyncDelta: %v, want %v", tc.name, err, tc.want)
		}
		if err := st.Delete(ctx, logKey(1)); err != nil { // the operator repairs the log
			t.Fatal(err)
		}
	}
	// Repaired, the log catches up from the marks: nothing lost.
	if _, err := c.SyncDelta(ctx, st, stream, nil, DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	checkDeltaAgrees(t, c, stream)
	_ = dt
}

// TestMaintainKeepsTheDeltaLog: maintenance of a table with a Delta log
// beside it neither compacts (the log would go on listing the inputs,
// which expiry then deletes) nor takes the log's entries, old as they
// may be, for Iceberg orphans; every file the Delta log lists stays.
func TestMaintainKeepsTheDeltaLog(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	dt, st := deltaOf(t, c, stream)
	recs := testRecords(p, 0, 40, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
	for from := int64(0); from < 40; from += 10 {
		a := PartitionAppend{Partition: p, From: from, To: from + 10, Files: []FileMeta{writeFile(t, c, stream, recs[from:from+10])}}
		if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{a}, DeltaOptions{CheckpointInterval: 2}); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(c.Warehouse()[len("file://"):], filepath.FromSlash(dt.Key("")))
	old := time.Now().Add(-48 * time.Hour)
	var logFiles []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(p, old, old)
			if strings.Contains(p, "_delta_log") {
				logFiles = append(logFiles, p)
			}
		}
		return err
	})
	res, err := c.Maintain(ctx, stream, MaintainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 0 || res.OrphansFound != 0 {
		t.Fatalf("maintenance compacted %d groups, found %d orphans in a table with a Delta log", res.CompactGroups, res.OrphansFound)
	}
	for _, f := range logFiles {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the Delta log lost %s: %v", f, err)
		}
	}
	checkDeltaAgrees(t, c, stream)
}
