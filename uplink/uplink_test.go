package uplink

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/fault"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

type env struct {
	wal    *wal.WAL
	cfg    tables.Config
	cat    *tables.Catalog
	bucket *BlobBucket
}

// faulty puts fault injection in front of e's store and catalog: the
// uplink under test commits through the returned catalog.
func (e *env) faulty() (*fault.Store, *fault.Catalog, *tables.Catalog) {
	fc := &fault.Catalog{Catalog: e.cat.Iceberg()}
	return &fault.Store{Bucket: e.bucket}, fc, tables.Wrap(e.cfg, fc)
}

func newEnv(t *testing.T, budget int64) *env {
	t.Helper()
	return openEnv(t, wal.Options{MaxBytes: budget}, "")
}

// openEnv opens a WAL (wo with its path set here), a SQLite catalog whose
// tables are created at granularity ("" = the default) and the file
// warehouse, all in a fresh folder.
func openEnv(t testing.TB, wo wal.Options, granularity string) *env {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	wo.Path = filepath.Join(dir, "wal.db")
	w, err := wal.Open(wo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cfg := tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse"), Granularity: granularity}
	cat, err := tables.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	b, err := OpenBucket(ctx, cat.Warehouse())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &env{wal: w, cfg: cfg, cat: cat, bucket: b}
}

func unreleased(w *wal.WAL) int64 {
	var n int64
	for _, p := range w.Partitions() {
		n += p.Next - p.Released
	}
	return n
}

// checkTable asserts that each (stream, partition) holds exactly the
// offsets 0..n-1 once, with the values that were appended.
func checkTable(t *testing.T, cat *tables.Catalog, stream string, want map[int32][][]byte) {
	t.Helper()
	rows, err := cat.ScanSorted(context.Background(), stream, tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32][]*tributary.Record{}
	for _, r := range rows {
		got[r.Partition] = append(got[r.Partition], r)
	}
	for p, vals := range want {
		if len(got[p]) != len(vals) {
			t.Fatalf("%s partition %d: %d rows, want %d", stream, p, len(got[p]), len(vals))
		}
		for i, r := range got[p] {
			if r.Offset != int64(i) {
				t.Fatalf("%s partition %d: row %d has offset %d (duplicate or gap)", stream, p, i, r.Offset)
			}
			if !bytes.Equal(r.Value, vals[i]) {
				t.Fatalf("%s partition %d offset %d: value %q, want %q", stream, p, i, r.Value, vals[i])
			}
		}
	}
}

func TestUplinkDrainsInOrder(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := New(Config{Interval: 50 * time.Millisecond, MaxBatchBytes: 64 << 10, Node: "n1"}, e.wal, e.cat, e.bucket)
	go u.Run(ctx)
	want := map[int32][][]byte{}
	for i := range 3000 {
		p := int32(i % 2)
		v := []byte(fmt.Sprintf("v-%d-%d", p, len(want[p])))
		want[p] = append(want[p], v)
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.b", Partition: p, Value: v, Topic: "t", Source: "mqtt"}}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "WAL drained", func() bool { return unreleased(e.wal) == 0 })
	checkTable(t, e.cat, "a.b", want)
	if s := u.Stats(); s.Commits == 0 || s.RecordsCommitted != 3000 {
		t.Fatalf("stats %+v", s)
	}
}

// TestStoreFaults: with a store that fails or stalls a fraction of uploads
// and a catalog whose table loads fail and whose commits fail before or
// after applying, no row is lost or duplicated, and the WAL drains once
// faults stop.
func TestStoreFaults(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fb, fc, cat := e.faulty()
	fb.Writes.FailRandomly(testkit.Rand(t, 1, 2), 0.25, 0)
	fb.Writes.DelayRandomly(testkit.Rand(t, 1, 3), 0.25, 30*time.Millisecond)
	fc.Commits.FailRandomly(testkit.Rand(t, 3, 4), 0.2, 0.2)
	fc.Loads.FailRandomly(testkit.Rand(t, 3, 5), 0.1, 0)
	u := New(Config{Interval: 20 * time.Millisecond, MaxBatchBytes: 16 << 10, MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Node: "n1", Logger: quietLogger()}, e.wal, cat, fb)
	go u.Run(ctx)

	want := map[string]map[int32][][]byte{"s.one": {}, "s.two": {}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := []string{"s.one", "s.two"}[g%2]
			for i := range 600 {
				p := int32(g / 2)
				v := []byte(fmt.Sprintf("g%d-%d", g, i))
				r := &tributary.Record{Stream: stream, Partition: p, Value: v, Topic: "t", Source: "mqtt"}
				if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				vals := want[stream][p]
				for int64(len(vals)) <= r.Offset {
					vals = append(vals, nil)
				}
				vals[r.Offset] = v
				want[stream][p] = vals
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Let faults hit a while, then heal.
	testkit.Eventually(t, 30*time.Second, "faults injected", func() bool {
		_, uploads, _ := fb.Writes.Counts()
		_, before, after := fc.Commits.Counts()
		return uploads > 0 && before > 0 && after > 0
	})
	fb.Writes.Heal()
	fc.Commits.Heal()
	fc.Loads.Heal()
	testkit.Eventually(t, 60*time.Second, "WAL drained after faults stopped", func() bool { return unreleased(e.wal) == 0 })
	for stream, w := range want {
		checkTable(t, e.cat, stream, w)
	}
	_, uploads, _ := fb.Writes.Counts()
	_, before, after := fc.Commits.Counts()
	_, loads, _ := fc.Loads.Counts()
	t.Logf("faults: %d uploads failed, %d table loads, %d commits failed before, %d after applying; stats %+v",
		uploads, loads, before, after, u.Stats())
}

// TestRestartReleasesCommitted: a commit that landed but whose WAL range was
// never released (a crash in between) is released, not committed again.
func TestRestartReleasesCommitted(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	for i := range 100 {
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.b", Value: []byte(fmt.Sprint(i)), Topic: "t", Source: "mqtt"}}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	// Commit as a crashed run would have, without releasing.
	recs, err := e.wal.Read("a.b", 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1"}, e.wal, e.cat, e.bucket)
	files, err := u.upload(ctx, "a.b", recs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.EnsureTable(ctx, "a.b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.CommitAppend(ctx, "a.b", []tables.PartitionAppend{{Partition: 0, From: 0, To: 100, Files: files}}, nil); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 150; i++ {
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.b", Value: []byte(fmt.Sprint(i)), Topic: "t", Source: "mqtt"}}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[int32][][]byte{}
	for i := range 150 {
		want[0] = append(want[0], []byte(fmt.Sprint(i)))
	}
	checkTable(t, e.cat, "a.b", want)
	if n := unreleased(e.wal); n != 0 {
		t.Fatalf("%d records unreleased", n)
	}
}

// TestUplinkZstdLevel: Config.Parquet's zstd level is the one the
// uploaded files are written with (node: uplink.zstd_level): the same
// records cost fewer bytes at level 19 than at the default, and read back
// the same.
func TestUplinkZstdLevel(t *testing.T) {
	bytesAt := func(level int) int64 {
		e := newEnv(t, 0)
		ctx := context.Background()
		u := New(Config{Node: "n1", Logger: quietLogger(), Parquet: tables.ParquetOptions{ZstdLevel: level}}, e.wal, e.cat, e.bucket)
		want := map[int32][][]byte{}
		var recs []*tributary.Record
		rng := testkit.Rand(t, 7, 8)
		for i := range 5000 {
			v := []byte(fmt.Sprintf(`{"device":"d%d","temp":%.3f,"hum":%.2f,"status":"ok"}`, i%50, 20+rng.NormFloat64(), 40+5*rng.NormFloat64()))
			want[0] = append(want[0], v)
			recs = append(recs, &tributary.Record{Stream: "z.s", Partition: 0, Value: v, Topic: "t", Source: "mqtt"})
		}
		if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil { // one group commit
			t.Fatal(err)
		}
		if err := u.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		checkTable(t, e.cat, "z.s", want)
		return u.Stats().BytesUploaded
	}
	def, best := bytesAt(0), bytesAt(19)
	if def == 0 || best >= def {
		t.Fatalf("uploaded %d bytes at the default level, %d at level 19: want fewer at 19", def, best)
	}
}
