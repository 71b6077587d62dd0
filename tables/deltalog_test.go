package tables

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
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
	root, _ := c.DeltaRoot(stream)
	var ice []string
	for _, f := range loadLive(t, c, stream) {
		r, ok := c.deltaRel(root, f.df.FilePath())
		if !ok {
			t.Fatalf("%s not below %s", f.df.FilePath(), root)
		}
		ice = append(ice, r)
	}
	slices.Sort(ice)
	if !slices.Equal(ice, s.Paths()) {
		t.Fatalf("Iceberg lists %v, Delta %v", ice, s.Paths())
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

// deltaStream commits n appends of 10 records to an [iceberg, delta]
// stream, each synced to the Delta log, and ages every file of the table
// by 48 hours (past the orphan grace); it returns the records and the
// data files' local paths.
func deltaStream(t *testing.T, c *Catalog, stream string, n int64) ([]*tributary.Record, []string) {
	t.Helper()
	ctx := context.Background()
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	dt, st := deltaOf(t, c, stream)
	recs := testRecords(p, 0, int(10*n), time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
	var files []string
	for from := int64(0); from < 10*n; from += 10 {
		a := PartitionAppend{Partition: p, From: from, To: from + 10, Files: []FileMeta{writeFile(t, c, stream, recs[from:from+10])}}
		if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{a}, DeltaOptions{CheckpointInterval: 2}); err != nil {
			t.Fatal(err)
		}
		files = append(files, localPath(t, c, a.Files[0].URL))
	}
	ageAll(t, filepath.Join(c.Warehouse()[len("file://"):], filepath.FromSlash(dt.Key(""))), 48*time.Hour)
	return recs, files
}

// deltaFixture is a catalog whose factory.telemetry stream deltaStream
// wrote, with its Delta log.
type deltaFixture struct {
	c      *Catalog
	recs   []*tributary.Record
	inputs []string // the data files' local paths
	dt     *delta.Table
	st     delta.Store
}

func newDeltaFixture(t *testing.T, appends int64) deltaFixture {
	t.Helper()
	c, _ := openTestCatalog(t)
	recs, inputs := deltaStream(t, c, "factory.telemetry", appends)
	dt, st := deltaOf(t, c, "factory.telemetry")
	return deltaFixture{c: c, recs: recs, inputs: inputs, dt: dt, st: st}
}

func ageAll(t *testing.T, root string, by time.Duration) {
	t.Helper()
	old := time.Now().Add(-by)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(p, old, old)
		}
		return err
	})
}

func mustExist(t *testing.T, paths []string, want bool) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Fatalf("%s exists=%v, want %v", p, err == nil, want)
		}
	}
}

// TestMaintainBothLogs: compaction commits remove+add in the Delta log
// in step with the Iceberg rewrite; snapshot expiry and orphan cleanup
// leave every file the Delta log still references (its removes within
// the file retention), orphan cleanup stays out of _delta_log/ and
// deletes a true orphan as ever; once the retention is over the inputs
// go; log cleanup keeps the replay equal. Rows are the same in both logs
// after every pass.
func TestMaintainBothLogs(t *testing.T) {
	ctx := context.Background()
	const stream = "factory.telemetry"
	f := newDeltaFixture(t, 4)
	c, recs, inputs, dt := f.c, f.recs, f.inputs, f.dt
	logDir := filepath.Join(c.Warehouse()[len("file://"):], filepath.FromSlash(dt.Key("_delta_log")))
	logFiles, _ := filepath.Glob(filepath.Join(logDir, "*"))
	orphan := localPath(t, c, putFile(t, c, stream, testRecords(0, 90, 5, 0)).URL)
	os.Chtimes(orphan, time.Now().Add(-48*time.Hour), time.Now().Add(-48*time.Hour))
	pol := Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 1, Holder: "t"}
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactGroups != 1 || res.CompactInputs != 4 || res.DeltaCommits != 1 || res.SnapshotsExpired == 0 || res.DeltaSkipped != "" {
		t.Fatalf("pass: %+v", res)
	}
	if res.OrphansDeleted != 1 || res.DeltaKept < 4 {
		t.Fatalf("orphans deleted %d, files kept for the Delta log %d: %+v", res.OrphansDeleted, res.DeltaKept, res)
	}
	mustExist(t, []string{orphan}, false)
	mustExist(t, inputs, true) // expired in Iceberg, removed in Delta within its retention
	mustExist(t, logFiles, true)
	s := checkDeltaAgrees(t, c, stream)
	if len(s.Files) != 1 || len(s.Tombstones) != 4 {
		t.Fatalf("Delta: %d live files, %d removes", len(s.Files), len(s.Tombstones))
	}
	for _, a := range s.Files {
		if a.DataChange {
			t.Fatalf("the compacted add has dataChange true: %+v", a)
		}
	}
	checkTable(t, c, stream, recs)

	// The retention over (the table says 0 seconds): the inputs are
	// orphans of both logs and go; old log files below the checkpoint go
	// and the replay stays equal.
	if _, err := dt.Rewrite(ctx, delta.Rewrite{}, delta.RewriteOptions{Configuration: map[string]string{
		"delta.deletedFileRetentionDuration": "interval 0 seconds", "delta.logRetentionDuration": "interval 0 seconds"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // a newer checkpoint, to clean up below
		r, err := dt.Rewrite(ctx, delta.Rewrite{}, delta.RewriteOptions{Configuration: map[string]string{"x.pad": fmt.Sprint(i)}, CheckpointInterval: 2})
		if err != nil {
			t.Fatal(err)
		}
		if r.Checkpoint {
			break
		}
	}
	before, err := dt.Snapshot(ctx)
	if err != nil || before.Checkpoint < 4 {
		t.Fatalf("checkpoint %d: %v", before.Checkpoint, err)
	}
	ageAll(t, logDir, 48*time.Hour)
	pol.DeltaFileRetention, pol.DeltaLogRetention = time.Nanosecond, time.Hour
	for attempt := 0; ; attempt++ { // the removes' millisecond must have passed
		if res, err = c.Maintain(ctx, stream, MaintainOptions{Policy: pol}); err != nil {
			t.Fatal(err)
		}
		if res.OrphansDeleted == 4 || attempt == 20 {
			break
		}
	}
	if res.OrphansDeleted != 4 || res.DeltaLogsDeleted == 0 {
		t.Fatalf("after the retention: %+v", res)
	}
	mustExist(t, inputs, false)
	after, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after.Paths(), before.Paths()) || !maps.Equal(txnVersions(after), txnVersions(before)) {
		t.Fatalf("log cleanup changed the replay: %v %v, was %v %v", after.Paths(), after.Txns, before.Paths(), before.Txns)
	}
	checkDeltaAgrees(t, c, stream)
	checkTable(t, c, stream, recs)
}

func txnVersions(s *delta.Snapshot) map[string]int64 {
	out := map[string]int64{}
	for a, t := range s.Txns {
		out[a] = t.Version
	}
	return out
}

// TestCompactionCrashBetweenLogs: a compaction whose Delta commit never
// happens (a crash after the Iceberg rewrite) leaves the Delta log
// listing the inputs, none of which is deleted; the uplink's next sync,
// or the next maintenance pass, commits the rewrite it missed, once:
// both logs list the same files and rows.
func TestCompactionCrashBetweenLogs(t *testing.T) {
	for _, repair := range []string{"sync", "sync-append", "maintain"} {
		t.Run(repair, func(t *testing.T) {
			ctx := context.Background()
			const stream = "factory.telemetry"
			f := newDeltaFixture(t, 3)
			c, recs, inputs, dt, st := f.c, f.recs, f.inputs, f.dt, f.st
			crash := errors.New("crash between the commits")
			pol := Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 1, Holder: "t"}
			res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: pol, beforeDeltaRewrite: func() error { return crash }})
			if !errors.Is(err, crash) || res.CompactGroups != 1 {
				t.Fatalf("pass: %+v %v", res, err)
			}
			s, err := dt.Snapshot(ctx)
			if err != nil || len(s.Files) != 3 {
				t.Fatalf("Delta after the crash: %v %v", s.Paths(), err)
			}
			mustExist(t, inputs, true)
			switch repair {
			case "sync":
				sr, err := c.SyncDelta(ctx, st, stream, nil, DeltaOptions{})
				if err != nil || !sr.Committed || sr.Files != 0 {
					t.Fatalf("sync: %+v %v", sr, err)
				}
			case "sync-append": // the uplink's next commit, with its hint
				more := testRecords(recs[0].Partition, len(recs), 10, recs[len(recs)-1].Timestamp)
				a := PartitionAppend{Partition: recs[0].Partition, From: int64(len(recs)), To: int64(len(recs)) + 10, Files: []FileMeta{writeFile(t, c, stream, more)}}
				if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
					t.Fatal(err)
				}
				if sr, err := c.SyncDelta(ctx, st, stream, []PartitionAppend{a}, DeltaOptions{}); err != nil || sr.Files != 1 {
					t.Fatalf("sync: %+v %v", sr, err)
				}
				recs = append(recs, more...)
			case "maintain":
				res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: pol})
				if err != nil || res.DeltaCommits != 1 || res.CompactGroups != 0 {
					t.Fatalf("pass: %+v %v", res, err)
				}
				mustExist(t, inputs, true) // removed in Delta now, within its retention
			}
			checkDeltaAgrees(t, c, stream)
			checkTable(t, c, stream, recs)
			// Again: nothing more to catch up, never a file twice.
			if sr, err := c.SyncDelta(ctx, st, stream, nil, DeltaOptions{}); err != nil || sr.Committed {
				t.Fatalf("second sync: %+v %v", sr, err)
			}
			after, _ := dt.Snapshot(ctx)
			if len(after.Files) != 1+len(recs)/10-3 || len(after.Tombstones) != 3 {
				t.Fatalf("Delta: %v, %d removes", after.Paths(), len(after.Tombstones))
			}
		})
	}
}

// TestMaintainUnreadableDeltaLog: a Delta log that cannot be read stops
// compaction, expiry and cleanup of the table (nothing it might list is
// deleted), without failing the pass; manifests are still merged.
func TestMaintainUnreadableDeltaLog(t *testing.T) {
	ctx := context.Background()
	const stream = "factory.telemetry"
	f := newDeltaFixture(t, 3)
	c, recs, inputs, dt, st := f.c, f.recs, f.inputs, f.dt, f.st
	s, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, dt.Key("_delta_log/"+delta.CommitName(s.Version+1)), []byte("{not json\n")); err != nil {
		t.Fatal(err)
	}
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 1, Holder: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeltaSkipped == "" || res.CompactGroups != 0 || res.SnapshotsExpired != 0 || res.OrphansFound != 0 || res.DeltaLogsDeleted != 0 {
		t.Fatalf("pass over an unreadable Delta log: %+v", res)
	}
	mustExist(t, inputs, true)
	checkTable(t, c, stream, recs)
}
