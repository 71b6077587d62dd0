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

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// putFile writes recs as a data file named like the uplink's.
func putFile(tb testing.TB, c *Catalog, stream string, recs []*tributary.Record) FileMeta {
	tb.Helper()
	var buf bytes.Buffer
	st, err := WriteParquet(&buf, recs)
	if err != nil {
		tb.Fatal(err)
	}
	return storeFile(tb, c, stream, buf.Bytes(), st)
}

// storeFile stores an encoded data file of stream's table under the name
// the uplink would give it.
func storeFile(tb testing.TB, c *Catalog, stream string, data []byte, st FileStats) FileMeta {
	tb.Helper()
	return storeFileAs(tb, c, stream, data, st, Origin{})
}

// storeFileAs is storeFile naming the file with origin o.
func storeFileAs(tb testing.TB, c *Catalog, stream string, data []byte, st FileStats, o Origin) FileMeta {
	tb.Helper()
	url := DataFileURL(c.TableLocation(stream), st, o)
	path := localPath(tb, c, url)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return FileMeta{URL: url, Size: int64(len(data)), Stats: st}
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
func appendRecs(tb testing.TB, c *Catalog, stream string, recs []*tributary.Record) {
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
func checkTable(tb testing.TB, c *Catalog, stream string, want []*tributary.Record) {
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

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// soakParams: commits (env TRIBUTARY_SOAK_COMMITS overrides), a pass every
// `every` commits, snapshots retained by count only (the soak runs in
// seconds, not hours). The race detector makes iceberg-go ~15x slower, so
// -race runs a shorter soak with a shorter cycle.
func soakParams() (n, every int, pol Policy) {
	n, every = 1000, 100
	if raceEnabled {
		n, every = 200, 25
	}
	n = envInt("TRIBUTARY_SOAK_COMMITS", n)
	return n, every, Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: every, MaxManifests: 10, Holder: "soak"}
}

// soakBounds are the bounds the soak asserts just before each pass (the
// high point of the cycle), for a pass every `every` commits.
func soakBounds(every int) TableStats {
	return TableStats{
		Snapshots:     every + every + 10,   // retained + since the last pass + the pass's own
		DataManifests: 10 + every + 2,       // MaxManifests + one per commit since the pass
		DataFiles:     int64(1 + every + 1), // one compacted file per (partition, day) + since the pass
		MetadataBytes: 256 << 10,
	}
}

// TestMaintenanceSoak drives many one-row commits through CommitAppend with
// a maintenance pass every few commits and checks that metadata stays
// bounded and the rows stay exactly what was written. The full soak:
// TRIBUTARY_SOAK_COMMITS=5000 go test -run TestMaintenanceSoak ./tables/
func TestMaintenanceSoak(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "soak.s"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	n, soakEvery, soakPolicy := soakParams()
	bound := soakBounds(soakEvery)
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
	if worst.Snapshots > bound.Snapshots || worst.DataManifests > bound.DataManifests ||
		worst.DataFiles > bound.DataFiles || worst.MetadataBytes > bound.MetadataBytes {
		t.Fatalf("bounds exceeded: worst %+v; bounds %+v", worst, bound)
	}
	checkTable(t, c, stream, all)
}

// TestCompactionRacesAppends delays each kind of maintenance commit until
// appends have landed on the same partition (and another one): the
// maintenance commit conflicts, re-plans and commits, and the table still
// holds every row once with the marks intact.
func TestCompactionRacesAppends(t *testing.T) {
	for _, step := range []string{"lease", "compact", "manifests", "expire"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			c, _ := openTestCatalog(t)
			const stream = "race.s"
			if _, err := c.EnsureTable(ctx, stream); err != nil {
				t.Fatal(err)
			}
			ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
			const total = 240
			p0, p1 := testRecords(0, 0, total, ts), testRecords(1, 0, total, ts)
			const pre = 40 // committed before the pass, 2 rows a commit
			for i := 0; i < pre; i += 2 {
				appendRecs(t, c, stream, p0[i:i+2])
			}
			var landed atomic.Int64 // partition 0's committed mark
			landed.Store(pre)
			stop := make(chan struct{})
			appendErr := make(chan error, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the uplink: appends to partition 0 (the one compacted) and 1
				defer wg.Done()
				defer close(appendErr)
				// As fast as the catalog allows with the table idle half
				// the time: far above one commit per second per node, yet
				// with gaps a maintenance commit can land in.
				var took time.Duration
				for i := pre; i < total; i += 2 {
					select {
					case <-stop:
						return
					case <-time.After(max(took, 10*time.Millisecond)):
					}
					began := time.Now()
					a0 := PartitionAppend{Partition: 0, From: int64(i), To: int64(i + 2), Files: []FileMeta{putFile(t, c, stream, p0[i:i+2])}}
					a1 := PartitionAppend{Partition: 1, From: int64(i - pre), To: int64(i - pre + 2), Files: []FileMeta{putFile(t, c, stream, p1[i-pre:i-pre+2])}}
					if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{a0, a1}, nil); err != nil {
						appendErr <- err
						return
					}
					took = time.Since(began)
					landed.Store(int64(i + 2))
				}
			}()
			delayed := 0
			opts := MaintainOptions{
				Policy: Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 5, MaxManifests: 2, Holder: "m"},
				beforeCommit: func(ctx context.Context, s string) {
					if s != step || delayed > 0 {
						return
					}
					delayed++
					from := landed.Load()
					testkit.Eventually(t, 30*time.Second, "appends to land during the "+step+" commit", func() bool {
						return landed.Load() >= from+6 || landed.Load() >= total
					})

				},
			}
			res, err := c.Maintain(ctx, stream, opts)
			close(stop)
			wg.Wait()
			if err := <-appendErr; err != nil {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if delayed == 0 {
				t.Fatalf("step %s never committed: %+v", step, res)
			}
			if res.Conflicts == 0 {
				t.Fatalf("the delayed %s commit did not conflict: %+v", step, res)
			}
			if step == "compact" && res.CompactGroups == 0 {
				t.Fatalf("nothing compacted: %+v", res)
			}
			n := landed.Load()
			want := append(append([]*tributary.Record{}, p0[:n]...), p1[:n-pre]...)
			checkTable(t, c, stream, want)
			// A second pass compacts what landed meanwhile; still exact.
			if _, err := c.Maintain(ctx, stream, MaintainOptions{Policy: opts.Policy}); err != nil {
				t.Fatal(err)
			}
			checkTable(t, c, stream, want)
			t.Logf("%s: %d conflicts retried, %d commits, compacted %d files into %d; %d appends landed",
				step, res.Conflicts, res.Commits, res.CompactInputs, res.CompactGroups, (n-pre)/2)
		})
	}
}

// TestOrphanCleanup: an unreferenced file past the grace period is deleted;
// a young unreferenced one (an upload in progress) and every referenced
// file are kept, however old. A dry run deletes nothing.
func TestOrphanCleanup(t *testing.T) {
	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprintf("dry-run=%v", dry), func(t *testing.T) {
			ctx := context.Background()
			c, _ := openTestCatalog(t)
			const stream = "orphan.s"
			if _, err := c.EnsureTable(ctx, stream); err != nil {
				t.Fatal(err)
			}
			recs := testRecords(0, 0, 30, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
			for i := 0; i < 30; i += 10 {
				appendRecs(t, c, stream, recs[i:i+10])
			}
			old := time.Now().Add(-48 * time.Hour)
			live := loadLive(t, c, stream)
			var referenced []string
			for _, f := range live {
				p := localPath(t, c, f.df.FilePath())
				referenced = append(referenced, p)
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
			orphanOld := localPath(t, c, putFile(t, c, stream, testRecords(0, 30, 5, 0)).URL)
			orphanYoung := localPath(t, c, putFile(t, c, stream, testRecords(0, 35, 5, 0)).URL)
			if err := os.Chtimes(orphanOld, old, old); err != nil {
				t.Fatal(err)
			}
			// Compaction is kept out of this test (target of 1 byte).
			res, err := c.Maintain(ctx, stream, MaintainOptions{DryRun: dry, Policy: Policy{TargetFileSize: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if res.OrphansFound != 1 {
				t.Fatalf("found %d orphans, want 1: %+v", res.OrphansFound, res)
			}
			exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
			if exists(orphanOld) == !dry {
				t.Fatalf("old orphan exists=%v with dry-run=%v", exists(orphanOld), dry)
			}
			if !exists(orphanYoung) {
				t.Fatal("young unreferenced file deleted")
			}
			for _, p := range referenced {
				if !exists(p) {
					t.Fatalf("referenced file %s deleted", p)
				}
			}
			checkTable(t, c, stream, recs)
		})
	}
}

// TestMaintenanceLease: two catalogs on one database (as two processes)
// never maintain a table at once; a lapsed lease is taken over; marks and
// rows survive.
func TestMaintenanceLease(t *testing.T) {
	ctx := context.Background()
	a, dir := openTestCatalog(t)
	b, err := Open(ctx, Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const stream = "lease.s"
	if _, err := a.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	recs := testRecords(0, 0, 20, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
	for i := 0; i < 20; i += 4 {
		appendRecs(t, a, stream, recs[i:i+4])
	}
	inA, release := make(chan struct{}), make(chan struct{})
	var resA PassResult
	var errA error
	done := make(chan struct{})
	go func() {
		defer close(done)
		resA, errA = a.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "A"}, beforeCommit: func(_ context.Context, s string) {
			if s == "compact" {
				close(inA)
				<-release
			}
		}})
	}()
	<-inA
	if _, err := b.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "B"}}); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("second maintainer while A holds the lease: %v, want ErrLeaseHeld", err)
	}
	close(release)
	<-done
	if errA != nil || resA.CompactGroups != 1 {
		t.Fatalf("A: %v %+v", errA, resA)
	}
	tbl, _ := b.LoadTable(ctx, stream)
	if h, _ := LeaseHolder(tbl); h != "" {
		t.Fatalf("lease still held by %q after A's pass", h)
	}
	// A lease abandoned by a crashed maintainer is taken over once lapsed.
	p := &pass{c: a, stream: stream, pol: Policy{Holder: "crashed", LeaseTTL: time.Second}.withDefaults(nil), res: &PassResult{}}
	if err := p.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "B"}}); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("B during the crashed holder's lease: %v", err)
	}
	testkit.Eventually(t, 5*time.Second, "the abandoned lease to lapse", func() bool {
		_, err := b.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "B"}})
		return err == nil
	})

	checkTable(t, b, stream, recs)

	// Fencing: A checks its lease and plans a compaction, then stalls past
	// its TTL; B takes the lapsed lease. A's commit must not land.
	more := testRecords(0, 20, 20, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
	for i := 0; i < 20; i += 4 {
		appendRecs(t, a, stream, more[i:i+4])
	}
	bp := &pass{c: b, stream: stream, pol: Policy{Holder: "B2"}.withDefaults(nil), res: &PassResult{}}
	resA, errA = a.Maintain(ctx, stream, MaintainOptions{Policy: Policy{Holder: "A2", LeaseTTL: 1500 * time.Millisecond},
		beforeCommit: func(_ context.Context, s string) {
			if s == "compact" {
				testkit.Eventually(t, 5*time.Second, "B to take A's lapsed lease", func() bool { return bp.acquire(ctx) == nil })
			}
		}})
	if !errors.Is(errA, ErrLeaseLost) || resA.CompactGroups != 0 || resA.CompactAborted != 1 {
		t.Fatalf("stale maintainer: %v %+v, want ErrLeaseLost and its compaction abandoned", errA, resA)
	}
	tbl, _ = b.LoadTable(ctx, stream)
	if h, _ := LeaseHolder(tbl); h != "B2" {
		t.Fatalf("lease holder %q after the stale maintainer's pass, want B2", h)
	}
	checkTable(t, b, stream, append(append([]*tributary.Record{}, recs...), more...))
}

// TestMaintainerLoop: the background loop visits every stream, records
// per-table figures, and stops with its context.
func TestMaintainerLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := openTestCatalog(t)
	ts := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro()
	for _, s := range []string{"a.one", "a.two"} {
		if _, err := c.EnsureTable(ctx, s); err != nil {
			t.Fatal(err)
		}
		recs := testRecords(0, 0, 6, ts)
		for i := 0; i < 6; i += 2 {
			appendRecs(t, c, s, recs[i:i+2])
		}
	}
	m := NewMaintainer(c, MaintainerConfig{Interval: 20 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	testkit.Eventually(t, 30*time.Second, "two passes over both streams", func() bool {
		st := m.Stats()
		return len(st) == 2 && st[0].Passes >= 2 && st[1].Passes >= 2
	})

	cancel()
	<-done
	for _, st := range m.Stats() {
		if st.Failures != 0 || st.DataFiles != 1 || st.Records != 6 || st.MetadataBytes == 0 || st.LastPass.IsZero() {
			t.Errorf("%s: %+v", st.Stream, st)
		}
	}
}

// loadLive lists the live data files of stream's current snapshot.
func loadLive(tb testing.TB, c *Catalog, stream string) []liveFile {
	tb.Helper()
	ctx := context.Background()
	tbl, err := c.LoadTable(ctx, stream)
	if err != nil {
		tb.Fatal(err)
	}
	live, err := liveDataFiles(ctx, tbl)
	if err != nil {
		tb.Fatal(err)
	}
	return live
}
