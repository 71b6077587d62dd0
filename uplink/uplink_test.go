package uplink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

var errInjected = errors.New("injected fault")

// faultyBucket fails or stalls a fraction of writes while enabled.
type faultyBucket struct {
	Bucket
	on       atomic.Bool
	failRate float64
	stall    time.Duration
	failed   atomic.Int64
	mu       sync.Mutex
	rnd      *rand.Rand
}

func (b *faultyBucket) roll() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rnd.Float64()
}

func (b *faultyBucket) WriteAll(ctx context.Context, key string, data []byte) error {
	if b.on.Load() {
		r := b.roll()
		if r < b.failRate {
			b.failed.Add(1)
			return errInjected
		}
		if r < 2*b.failRate {
			time.Sleep(b.stall)
		}
	}
	return b.Bucket.WriteAll(ctx, key, data)
}

// faultyCommitter fails commits before they reach the catalog, or after
// the catalog accepted them (the caller sees an error but the commit
// happened: the case exactly-once must survive).
type faultyCommitter struct {
	Committer
	on                    atomic.Bool
	failBefore, failAfter float64
	before, after         atomic.Int64
	mu                    sync.Mutex
	rnd                   *rand.Rand
}

func (c *faultyCommitter) roll() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64()
}

func (c *faultyCommitter) CommitAppend(ctx context.Context, stream string, a []tables.PartitionAppend, s map[string]string) (tables.CommitResult, error) {
	if c.on.Load() {
		r := c.roll()
		if r < c.failBefore {
			c.before.Add(1)
			return tables.CommitResult{}, errInjected
		}
		if r < c.failBefore+c.failAfter {
			res, err := c.Committer.CommitAppend(ctx, stream, a, s)
			if err == nil {
				c.after.Add(1)
				return res, fmt.Errorf("lost reply: %w", errInjected)
			}
			return res, err
		}
	}
	return c.Committer.CommitAppend(ctx, stream, a, s)
}

func (c *faultyCommitter) Marks(ctx context.Context, stream string) (map[int32]int64, map[int32]tables.Ownership, error) {
	if c.on.Load() && c.roll() < c.failBefore/2 {
		return nil, nil, errInjected
	}
	return c.Committer.Marks(ctx, stream)
}

type env struct {
	wal    *wal.WAL
	cat    *tables.Catalog
	bucket *BlobBucket
}

func newEnv(t *testing.T, budget int64) *env {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	w, err := wal.Open(wal.Options{Path: filepath.Join(dir, "wal.db"), MaxBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	b, err := OpenBucket(ctx, cat.Warehouse())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &env{wal: w, cat: cat, bucket: b}
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
	got := map[int32][]*wal.Record{}
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
		if err := e.wal.Append(ctx, &wal.Record{Stream: "a.b", Partition: p, Value: v, Topic: "t", Source: "mqtt"}); err != nil {
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
// and a catalog whose commits fail before or after applying, no row is
// lost or duplicated, and the WAL drains once faults stop.
func TestStoreFaults(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fb := &faultyBucket{Bucket: e.bucket, failRate: 0.25, stall: 30 * time.Millisecond, rnd: testkit.Rand(t, 1, 2)}
	fc := &faultyCommitter{Committer: e.cat, failBefore: 0.2, failAfter: 0.2, rnd: testkit.Rand(t, 3, 4)}
	fb.on.Store(true)
	fc.on.Store(true)
	u := New(Config{Interval: 20 * time.Millisecond, MaxBatchBytes: 16 << 10, MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Node: "n1", Logger: quietLogger()}, e.wal, fc, fb)
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
				r := &wal.Record{Stream: stream, Partition: p, Value: v, Topic: "t", Source: "mqtt"}
				if err := e.wal.Append(ctx, r); err != nil {
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
		return fb.failed.Load() > 0 && fc.before.Load() > 0 && fc.after.Load() > 0
	})

	fb.on.Store(false)
	fc.on.Store(false)
	testkit.Eventually(t, 60*time.Second, "WAL drained after faults stopped", func() bool { return unreleased(e.wal) == 0 })
	for stream, w := range want {
		checkTable(t, e.cat, stream, w)
	}
	t.Logf("faults: %d uploads failed, %d commits failed before, %d after applying; stats %+v",
		fb.failed.Load(), fc.before.Load(), fc.after.Load(), u.Stats())
}

// TestRestartReleasesCommitted: a commit that landed but whose WAL range was
// never released (a crash in between) is released, not committed again.
func TestRestartReleasesCommitted(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	for i := range 100 {
		if err := e.wal.Append(ctx, &wal.Record{Stream: "a.b", Value: []byte(fmt.Sprint(i)), Topic: "t", Source: "mqtt"}); err != nil {
			t.Fatal(err)
		}
	}
	// Commit as a crashed run would have, without releasing.
	recs, err := e.wal.Read("a.b", 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1"}, e.wal, e.cat, e.bucket)
	files, err := u.upload(ctx, "a.b", recs)
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
		if err := e.wal.Append(ctx, &wal.Record{Stream: "a.b", Value: []byte(fmt.Sprint(i)), Topic: "t", Source: "mqtt"}); err != nil {
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
