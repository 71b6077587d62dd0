package uplink

import (
	"context"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tributary-io/tributary/tables"
)

// TestForgedMarkReleasesNothing: a high-water mark raised by somebody other
// than a commit of the data (a table property written past the uplink's
// position) does not make the uplink release WAL records the table does
// not hold: they stay, the pass says so, and once the mark is repaired
// they are committed exactly once.
func TestForgedMarkReleasesNothing(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, err := e.cat.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	appendVals(t, e.wal, stream, p, 0, "committed", 5)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	appendVals(t, e.wal, stream, p, 0, "acked", 7)
	setProps := func(props iceberg.Properties) {
		t.Helper()
		tb, err := e.cat.LoadTable(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		tx := tb.NewTransaction()
		if err := tx.SetProperties(props); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	key := tables.PropHighWater + strconv.Itoa(int(p))
	setProps(iceberg.Properties{key: "1000"})

	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := e.wal.Partition(stream, p)
	if st.Released != 5 || st.Next != 12 {
		t.Fatalf("wal partition after a forged mark: released %d next %d, want 5 and 12", st.Released, st.Next)
	}
	if n := u.Stats().UnprovenMarks; n < 1 {
		t.Fatalf("unproven marks %d", n)
	}
	recs, err := e.wal.Read(stream, p, 5, 0, 0)
	if err != nil || len(recs) != 7 {
		t.Fatalf("acknowledged records in the wal: %d, %v", len(recs), err)
	}

	// The operator repairs the mark: the records land, once.
	setProps(iceberg.Properties{key: "5"})
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := e.cat.ScanSorted(ctx, stream, tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows, want 12", len(rows))
	}
	for i, r := range rows {
		if r.Offset != int64(i) {
			t.Fatalf("row %d has offset %d", i, r.Offset)
		}
	}
}
