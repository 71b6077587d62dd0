package uplink

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
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

// otherNode is a second node's uplink over its own WAL, committing to e's
// catalog and bucket.
func otherNode(t *testing.T, e *env, node string) (*wal.WAL, *Uplink) {
	t.Helper()
	w, err := wal.Open(wal.Options{Path: filepath.Join(t.TempDir(), "wal.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, New(Config{Node: node, Logger: quietLogger(), QuarantineDir: t.TempDir()}, w, e.cat, e.bucket)
}

// n1Partition is a fresh env whose node n1 owns partition p of stream at
// epoch 0.
func n1Partition(t *testing.T, stream string) (*env, int32) {
	t.Helper()
	e := newEnv(t, 0)
	p, err := e.cat.AllocatePartition(context.Background(), stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return e, p
}

// keptUnproven asserts that (stream, p) of w still holds its acknowledged
// records [0, n) unreleased, and that u counted an unproven mark.
func keptUnproven(t *testing.T, w *wal.WAL, u *Uplink, stream string, p int32, n int64) {
	t.Helper()
	st, _ := w.Partition(stream, p)
	if st.Released != 0 || st.Next != n {
		t.Fatalf("wal partition %d: released %d next %d, want 0 and %d: records released on another node's files", p, st.Released, st.Next, n)
	}
	if got := u.Stats().UnprovenMarks; got < 1 {
		t.Fatalf("unproven marks %d", got)
	}
}

// TestForeignFilesReleaseNothing: the table's mark and data files cover
// this node's acknowledged offsets, but the files were committed by
// another node (at the same epoch: ownership properties do not stop a
// node that writes a partition it was never given). They are not this
// node's records, so it must not release them.
func TestForeignFilesReleaseNothing(t *testing.T) {
	e, p := n1Partition(t, "f.foreign")
	ctx, stream := context.Background(), "f.foreign"
	appendVals(t, e.wal, stream, p, 0, "ours", 5)
	w2, u2 := otherNode(t, e, "n2")
	appendVals(t, w2, stream, p, 0, "theirs", 5)
	if err := u2.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, e.cat, e.bucket)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	keptUnproven(t, e.wal, u, stream, p, 5)
}

// TestPreviousOwnersFilesReleaseNothing: node n2 took partition p over at
// epoch 1 and holds copies of p's records at epoch 1; the files covering
// those offsets were committed by the previous owner n1 at epoch 0. Those
// files were not committed under n2's epoch, so n2 keeps its records.
func TestPreviousOwnersFilesReleaseNothing(t *testing.T) {
	e, p := n1Partition(t, "f.previous")
	ctx, stream := context.Background(), "f.previous"
	appendVals(t, e.wal, stream, p, 0, "v", 5)
	u1 := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, e.cat, e.bucket)
	if err := u1.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	epoch, err := e.cat.TakeOver(ctx, stream, p, "n1", "n2")
	if err != nil || epoch != 1 {
		t.Fatalf("take over: epoch %d, %v", epoch, err)
	}
	w2, u2 := otherNode(t, e, "n2")
	appendVals(t, w2, stream, p, epoch, "v", 5)
	if err := u2.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	keptUnproven(t, w2, u2, stream, p, 5)
}
