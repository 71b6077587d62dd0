package uplink

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// stepClock is the injected accept clock of these tests: each Now is the
// previous one plus step, so a run of records straddles whatever boundary
// the clock starts just before.
type stepClock struct {
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// TestPartitionGranularity: records whose accept timestamps straddle an
// hour boundary and a day boundary are committed in one pass, each offset
// exactly once, in files that each lie inside one partition bucket of the
// table's granularity, with no upload left behind as an orphan and no
// commit failing (a file spanning a bucket is refused by the catalog, and
// the uplink would retry it forever).
func TestPartitionGranularity(t *testing.T) {
	for _, tc := range []struct {
		granularity string
		bucket      func(micros int64) int32
		files       int // data files in the end: one per bucket of each pass
	}{
		// Pass 1: 22:59, 23:00 … 23:59 | 00:00; pass 2: 00:59 | 01:00.
		{"day", tables.DayOf, 2 + 1},
		{"hour", tables.HourOf, 3 + 2},
	} {
		t.Run(tc.granularity, func(t *testing.T) {
			e := newEnvGranularity(t, tc.granularity)
			ctx := context.Background()
			const stream = "g.s"
			clock := &stepClock{now: time.Date(2026, 11, 30, 22, 59, 55, 0, time.UTC), step: time.Second}
			var vals [][]byte
			appendAt := func(n int) {
				for range n {
					v := []byte(fmt.Sprintf("v-%d", len(vals)))
					if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: stream, Timestamp: clock.Now().UnixMicro(), Value: v, Topic: "t", Source: "mqtt"}}}).Err; err != nil {
						t.Fatal(err)
					}
					vals = append(vals, v)
				}
			}
			appendAt(10) // 22:59:55 … 23:00:04: crosses an hour
			clock.now = time.Date(2026, 11, 30, 23, 59, 55, 0, time.UTC)
			appendAt(10) // 23:59:55 … 00:00:04 the next day: crosses an hour and a day
			u := New(Config{Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
			if err := u.SyncAll(ctx); err != nil {
				t.Fatalf("first pass: %v", err)
			}
			if n := unreleased(e.wal); n != 0 {
				t.Fatalf("%d records still in the WAL after a pass", n)
			}
			// A second batch crossing the next hour, committed on its own pass.
			clock.now = time.Date(2026, 12, 1, 0, 59, 58, 0, time.UTC)
			appendAt(4)
			if err := u.SyncAll(ctx); err != nil {
				t.Fatalf("second pass: %v", err)
			}
			checkTable(t, e.cat, stream, map[int32][][]byte{0: vals})
			if n := unreleased(e.wal); n != 0 {
				t.Fatalf("%d records still in the WAL", n)
			}
			st := u.Stats()
			if st.CommitFailures != 0 || st.Commits != 2 || st.RecordsCommitted != int64(len(vals)) {
				t.Fatalf("stats %+v", st)
			}
			checkFilesInBuckets(t, e, stream, tc.bucket, tc.files)
		})
	}
}

// checkFilesInBuckets asserts that every data file of the table lies in one
// bucket (its timestamp bounds map to one partition value), that there are
// want of them, and that the warehouse holds no other data file (an upload
// whose commit failed).
func checkFilesInBuckets(t *testing.T, e *env, stream string, bucket func(int64) int32, want int) {
	t.Helper()
	tbl, err := e.cat.LoadTable(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, task := range tasks {
		df := task.File
		lo, hi := df.LowerBoundValues()[tables.FieldTimestamp], df.UpperBoundValues()[tables.FieldTimestamp]
		if len(lo) != 8 || len(hi) != 8 {
			t.Fatalf("%s: no timestamp bounds", df.FilePath())
		}
		if a, b := bucket(int64(binary.LittleEndian.Uint64(lo))), bucket(int64(binary.LittleEndian.Uint64(hi))); a != b {
			t.Fatalf("%s spans partition buckets %d and %d", df.FilePath(), a, b)
		}
		inTable[df.FilePath()] = true
	}
	if len(inTable) != want {
		t.Fatalf("%d data files in the table, want %d", len(inTable), want)
	}
	dir := strings.TrimPrefix(e.cat.TableLocation(stream), "file://")
	onDisk, err := filepath.Glob(filepath.Join(dir, "data", "*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range onDisk {
		if !inTable["file://"+f] {
			t.Errorf("orphan data file %s (uploaded, never committed)", f)
		}
	}
}

// newEnvGranularity is newEnv with tables created at a partition granularity.
func newEnvGranularity(t *testing.T, granularity string) *env {
	t.Helper()
	return openEnv(t, wal.Options{NoSync: true}, granularity)
}
