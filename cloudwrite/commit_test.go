package cloudwrite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

func (e *env) catalog() *tables.Catalog {
	e.t.Helper()
	c, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(e.dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(e.dir, "warehouse")})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) committer(cat *tables.Catalog, server string) *Committer {
	return NewCommitter(CommitConfig{Server: server, Grace: time.Nanosecond, Lease: time.Minute, Put: e.store.Put},
		cat, e.st, NewTail(e.st, e.store, 0), e.store)
}

// The job commits the sequenced records beyond the mark exactly once,
// however many servers run it at once, then collects the WAL objects.
func TestCommitterExactlyOnce(t *testing.T) {
	e := newEnv(t, "")
	cat := e.catalog()
	ctx := context.Background()
	p, err := cat.AllocatePartition(ctx, "f.t", DefaultCloudPartitions)
	if err != nil {
		t.Fatal(err)
	}
	w := e.writer("s1", nil)
	for i := 0; i < 5; i++ {
		if r := submit(w, testSegment("f.t", p, 3, int32(i*4), 4)); r.err != nil || r.o.First != int64(i*4) {
			t.Fatalf("%+v", r)
		}
	}
	// A duplicate: sequenced as such, never visible, its object collected.
	if r := submit(w, testSegment("f.t", p, 3, 16, 4)); !r.o.Duplicate {
		t.Fatalf("%+v", r)
	}
	// Two servers' jobs at once; each commit decides by the mark.
	cs := []*Committer{e.committer(cat, "a"), e.committer(cat, "b")}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts, err := e.st.Partitions(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if err := c.CommitStream(ctx, "f.t", parts); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	rd := tables.NewReader(cat, tables.ReaderConfig{})
	v, err := rd.Partition(ctx, "f.t", p)
	if err != nil {
		t.Fatal(err)
	}
	if v.End != 20 {
		t.Fatalf("mark %d, want 20", v.End)
	}
	n := 0
	if err := v.Read(ctx, 0, func(r *tributary.Record) bool {
		if r.Offset != int64(n) || r.Node != "s1" || r.Principal != "alice" {
			t.Errorf("row %d: %+v", n, r)
		}
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d rows, want 20", n)
	}
	// Collected: ranges forgotten, then (after the grace) objects deleted.
	testkit.Eventually(t, time.Minute, "WAL objects collected", func() bool {
		if err := cs[0].Round(ctx); err != nil {
			t.Fatal(err)
		}
		return len(e.objects()) == 0
	})
	// Records after the collection continue the partition.
	if r := submit(w, testSegment("f.t", p, -1, 0, 2)); r.err != nil || r.o.First != 20 {
		t.Fatalf("%+v", r)
	}
	if err := cs[0].Round(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Round(ctx); err != nil { // no lease: does nothing
		t.Fatal(err)
	}
	if v, err := tables.NewReader(cat, tables.ReaderConfig{}).Partition(ctx, "f.t", p); err != nil || v.End != 22 {
		t.Fatalf("mark after the second commit: %v", err)
	}
}
