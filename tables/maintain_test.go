package tables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tributary-io/tributary/wal"
)

// putFile writes recs as a data file named like the uplink's.
func putFile(tb testing.TB, c *Catalog, stream string, recs []*wal.Record) FileMeta {
	tb.Helper()
	var buf bytes.Buffer
	st, err := WriteParquet(&buf, recs)
	if err != nil {
		tb.Fatal(err)
	}
	url := fmt.Sprintf("%s/data/p%d/%020d-%020d-%s.parquet", c.TableLocation(stream), st.Partition, st.FirstOffset, st.LastOffset, uuid.NewString()[:8])
	path := localPath(tb, c, url)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return FileMeta{URL: url, Size: int64(buf.Len()), Stats: st}
}

func localPath(tb testing.TB, c *Catalog, url string) string {
	tb.Helper()
	key, err := c.KeyOf(url)
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(c.Warehouse()[len("file://"):], key)
}

// appendRecs commits recs (consecutive offsets from the partition's mark)
// as one file.
func appendRecs(tb testing.TB, c *Catalog, stream string, recs []*wal.Record) {
	tb.Helper()
	f := putFile(tb, c, stream, recs)
	a := PartitionAppend{Partition: recs[0].Partition, From: recs[0].Offset, To: recs[len(recs)-1].Offset + 1, Files: []FileMeta{f}}
	res, err := c.CommitAppend(context.Background(), stream, []PartitionAppend{a}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.Committed) != 1 {
		tb.Fatalf("append [%d,%d) not committed: %+v", a.From, a.To, res)
	}
}

// checkTable reads the whole table back and compares it with want, which
// is sorted by (partition, offset) and dense per partition.
func checkTable(tb testing.TB, c *Catalog, stream string, want []*wal.Record) {
	tb.Helper()
	got, err := c.ScanSorted(context.Background(), stream, ScanOptions{Partition: -1})
	if err != nil {
		tb.Fatal(err)
	}
	if len(got) != len(want) {
		tb.Fatalf("table has %d rows, want %d", len(got), len(want))
	}
	next := map[int32]int64{}
	for i := range got {
		if err := sameRecord(got[i], want[i]); err != nil {
			tb.Fatalf("row %d: %v", i, err)
		}
		if got[i].Offset != next[got[i].Partition] {
			tb.Fatalf("partition %d: offset %d where %d was due", got[i].Partition, got[i].Offset, next[got[i].Partition])
		}
		next[got[i].Partition]++
	}
	t, err := c.LoadTable(context.Background(), stream)
	if err != nil {
		tb.Fatal(err)
	}
	for p, n := range next {
		if hw := HighWater(t, p); hw != n {
			tb.Fatalf("partition %d: high-water mark %d, table holds %d offsets", p, hw, n)
		}
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// soakPolicy expires by count only (the soak runs in seconds, not hours).
var soakPolicy = Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 100, MaxManifests: 10, Holder: "soak"}

// Bounds asserted by the soak with a pass every soakEvery commits.
const (
	soakEvery            = 100
	soakMaxSnapshots     = 100 + soakEvery + 10 // retained + since the pass + the pass's own
	soakMaxManifests     = 10 + soakEvery + 2
	soakMaxDataFiles     = 1 + soakEvery + 1 // one compacted file per (partition, day) + since the pass
	soakMaxMetadataBytes = 256 << 10
)

// TestMaintenanceSoak drives many one-row commits through CommitAppend with
// a maintenance pass every soakEvery commits and checks that metadata stays
// bounded and the rows stay exactly what was written. Commits: env
// TRIBUTARY_SOAK_COMMITS (default 1,000; 5,000 is the full soak).
func TestMaintenanceSoak(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "soak.s"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	n := envInt("TRIBUTARY_SOAK_COMMITS", 1000)
	ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
	all := testRecords(0, 0, n, ts)
	start := time.Now()
	var worst TableStats
	for i := 0; i < n; i++ {
		appendRecs(t, c, stream, all[i:i+1])
		if (i+1)%soakEvery != 0 {
			continue
		}
		// Measured just before the pass: the high point of the cycle.
		before, err := c.Stats(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		worst.Snapshots = max(worst.Snapshots, before.Snapshots)
		worst.DataManifests = max(worst.DataManifests, before.DataManifests)
		worst.DataFiles = max(worst.DataFiles, before.DataFiles)
		worst.MetadataBytes = max(worst.MetadataBytes, before.MetadataBytes)
		res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: soakPolicy})
		if err != nil {
			t.Fatalf("pass after %d commits: %v", i+1, err)
		}
		if res.Stats.Records != int64(i+1) {
			t.Fatalf("after %d commits the table reports %d rows", i+1, res.Stats.Records)
		}
	}
	final, err := c.Stats(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits with a pass every %d in %s; worst before a pass: %d snapshots, %d data manifests, %d data files, %d metadata bytes; final %+v",
		n, soakEvery, time.Since(start).Round(time.Millisecond), worst.Snapshots, worst.DataManifests, worst.DataFiles, worst.MetadataBytes, final)
	if worst.Snapshots > soakMaxSnapshots || worst.DataManifests > soakMaxManifests ||
		worst.DataFiles > soakMaxDataFiles || worst.MetadataBytes > soakMaxMetadataBytes {
		t.Fatalf("bounds exceeded: worst %+v; want snapshots ≤ %d, manifests ≤ %d, files ≤ %d, metadata ≤ %d bytes",
			worst, soakMaxSnapshots, soakMaxManifests, soakMaxDataFiles, soakMaxMetadataBytes)
	}
	checkTable(t, c, stream, all)
}

var _ = errors.Is
var _ sync.Mutex
var _ atomic.Int64
