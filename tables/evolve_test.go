package tables

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
)

// openOldTable opens a test catalog with stream's table as a node that
// predates the principal column created it: the initial envelope, no
// evolution (createTable is what EnsureTable did then).
func openOldTable(tb testing.TB, stream string) (*Catalog, string) {
	tb.Helper()
	c, dir := openTestCatalog(tb)
	createOldTable(tb, c, stream)
	return c, dir
}

func createOldTable(tb testing.TB, c *Catalog, stream string) {
	tb.Helper()
	t, err := c.createTable(context.Background(), stream)
	if err != nil {
		tb.Fatal(err)
	}
	if _, ok := t.Schema().FindFieldByName(ColPrincipal); ok || t.Metadata().LastColumnID() != 14 {
		tb.Fatalf("old table already has the principal column: %s", t.Schema())
	}
}

// writeOldParquet writes recs as a node before the principal column did:
// the initial envelope's columns (principal is the last column, dropped).
func writeOldParquet(w io.Writer, recs []*tributary.Record) (FileStats, error) {
	return ParquetOptions{}.write(w, mustPlan(InitialSchema()), pqRows{recs: recs}, true)
}

// commitOld commits recs as a node before the principal column did: an
// old-format file and its mark, in a transaction that does not evolve.
func commitOld(tb testing.TB, c *Catalog, stream string, recs []*tributary.Record) {
	tb.Helper()
	ctx := context.Background()
	var buf bytes.Buffer
	st, err := writeOldParquet(&buf, recs)
	if err != nil {
		tb.Fatal(err)
	}
	f := storeFile(tb, c, stream, buf.Bytes(), st)
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		tb.Fatal(err)
	}
	df, err := c.dataFile(t, f)
	if err != nil {
		tb.Fatal(err)
	}
	tx := t.NewTransaction()
	if err := tx.AddDataFiles(ctx, []iceberg.DataFile{df}, iceberg.Properties{"tributary.operation": "append"}, table.WithoutDuplicateCheck()); err != nil {
		tb.Fatal(err)
	}
	mark := strconv.FormatInt(st.LastOffset+1, 10)
	if err := tx.SetProperties(iceberg.Properties{PropHighWater + strconv.Itoa(int(st.Partition)): mark}); err != nil {
		tb.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		tb.Fatal(err)
	}
}

func anonymous(recs []*tributary.Record) []*tributary.Record {
	for _, r := range recs {
		r.Principal = ""
	}
	return recs
}

// scanPrincipals reads the principal column with iceberg-go's own table
// scan: offset → value, absent for null; hasColumn is false if the scan
// has no principal column.
func scanPrincipals(tb testing.TB, t *table.Table) (principals map[int64]string, rows int, hasColumn bool) {
	tb.Helper()
	_, batches, err := t.Scan().ToArrowRecords(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	principals, hasColumn = map[int64]string{}, true
	for b, err := range batches {
		if err != nil {
			tb.Fatal(err)
		}
		rows += int(b.NumRows())
		pi, oi := b.Schema().FieldIndices(ColPrincipal), b.Schema().FieldIndices(ColOffset)
		if len(pi) != 1 {
			hasColumn = false
			b.Release()
			continue
		}
		pc, ok := b.Column(pi[0]).(*array.String)
		if !ok {
			tb.Fatalf("principal column is %s", b.Column(pi[0]).DataType())
		}
		oc := b.Column(oi[0]).(*array.Int64)
		for i := 0; i < int(b.NumRows()); i++ {
			if pc.IsValid(i) {
				principals[oc.Value(i)] = pc.Value(i)
			}
		}
		b.Release()
	}
	return principals, rows, hasColumn
}

// checkEvolved checks that stream's table has the principal column with
// its ID, the other columns kept theirs, and it was added once.
func checkEvolved(tb testing.TB, c *Catalog, stream string) *table.Table {
	tb.Helper()
	t, err := c.LoadTable(context.Background(), stream)
	if err != nil {
		tb.Fatal(err)
	}
	f, ok := t.Schema().FindFieldByName(ColPrincipal)
	if !ok || f.ID != FieldPrincipal || f.Required || !f.Type.Equals(iceberg.PrimitiveTypes.String) {
		tb.Fatalf("principal column %+v (present %v), want optional string id %d", f, ok, FieldPrincipal)
	}
	for name, id := range map[string]int{"headers": FieldHeaders, "headers.element": fieldHeaderElement,
		"headers.element.key": fieldHeaderKey, "headers.element.value": fieldHeaderValue, ColProducerTimestamp: FieldProducerTimestamp} {
		if g, ok := t.Schema().FindFieldByName(name); !ok || g.ID != id {
			tb.Fatalf("%s: id %d, want %d", name, g.ID, id)
		}
	}
	if got := t.Metadata().LastColumnID(); got != FieldPrincipal {
		tb.Fatalf("last column id %d, want %d", got, FieldPrincipal)
	}
	if n := len(t.Metadata().Schemas()); n != 2 {
		tb.Fatalf("%d schemas, want the initial one and one evolution", n)
	}
	return t
}

// TestEvolveOldTable: a table created and written with the initial
// envelope gets the principal column in the first commit of a node that
// knows it; both generations read back (iceberg-go scan, Scan, Reader):
// null for the old rows, the principal for the new ones.
func TestEvolveOldTable(t *testing.T) {
	ctx := context.Background()
	const stream = "old.telemetry"
	c, _ := openOldTable(t, stream)
	ts := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(0, 0, 40, ts)
	old, fresh := anonymous(recs[:20]), recs[20:]
	commitOld(t, c, stream, old[:10])
	commitOld(t, c, stream, old[10:])
	before, _ := c.LoadTable(ctx, stream)
	if _, n, has := scanPrincipals(t, before); n != 20 || has {
		t.Fatalf("old table scan: %d rows, principal column %v", n, has)
	}

	appendRecs(t, c, stream, fresh[:10]) // CommitAppend: evolves in the same commit
	tb := checkEvolved(t, c, stream)
	if nm := tb.Metadata().NameMapping(); nm == nil || len(nm) != len(EnvelopeSchema().Fields()) {
		t.Fatalf("name mapping not updated: %v", nm)
	}
	appendRecs(t, c, stream, fresh[10:])

	want := map[int64]string{}
	for _, r := range recs {
		if r.Principal != "" {
			want[r.Offset] = r.Principal
		}
	}
	if len(want) == 0 {
		t.Fatal("test records carry no principal")
	}
	tb, _ = c.LoadTable(ctx, stream)
	got, rows, _ := scanPrincipals(t, tb)
	if rows != 40 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("iceberg-go scan: %d rows, principals %v, want %v", rows, got, want)
	}
	checkTable(t, c, stream, recs) // Scan: old rows Principal ""

	r := NewReader(c, ReaderConfig{MetadataMaxAge: time.Millisecond})
	v, err := r.Partition(ctx, stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	var read []*tributary.Record
	if err := v.Read(ctx, 0, func(r *tributary.Record) bool { read = append(read, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(read) != 40 {
		t.Fatalf("reader: %d records", len(read))
	}
	for i := range read {
		if err := sameRecord(read[i], recs[i]); err != nil {
			t.Fatalf("reader: %v", err)
		}
	}

	// Compaction keeps both generations' principals.
	if res, err := c.Maintain(ctx, stream, MaintainOptions{}); err != nil || res.CompactInputs != 4 {
		t.Fatalf("maintain: %+v, %v", res, err)
	}
	tb, _ = c.LoadTable(ctx, stream)
	if got, rows, _ := scanPrincipals(t, tb); rows != 40 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after compaction: %d rows, principals %v", rows, got)
	}
}

// TestNewTableHasPrincipal: a new table is created with the initial
// envelope and evolved at once, so it has every column with its fixed ID.
func TestNewTableHasPrincipal(t *testing.T) {
	c, _ := openTestCatalog(t)
	if _, err := c.EnsureTable(context.Background(), "new.s"); err != nil {
		t.Fatal(err)
	}
	tb := checkEvolved(t, c, "new.s")
	if !tb.Schema().Equals(EnvelopeSchema()) {
		t.Fatalf("schema\n%s\nwant\n%s", tb.Schema(), EnvelopeSchema())
	}
	// Ensuring again changes nothing.
	again, err := c.EnsureTable(context.Background(), "new.s")
	if err != nil || again.MetadataLocation() != tb.MetadataLocation() {
		t.Fatalf("second EnsureTable committed: %v, %s vs %s", err, again.MetadataLocation(), tb.MetadataLocation())
	}
}

// TestEvolveConcurrentNodes: several nodes (catalogs of their own on one
// catalog database) find an old table and commit to it at once, some
// through EnsureTable, all through CommitAppend: the column is added
// exactly once and every batch lands exactly once.
func TestEvolveConcurrentNodes(t *testing.T) {
	ctx := context.Background()
	const stream = "race.s"
	c0, dir := openOldTable(t, stream)
	ts := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).UnixMicro()
	want := anonymous(testRecords(0, 0, 10, ts))
	commitOld(t, c0, stream, want)

	const nodes, batches, per = 4, 3, 7
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n := 1; n <= nodes; n++ {
		c, err := Open(ctx, Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		recs := testRecords(int32(n), 0, batches*per, ts)
		for _, r := range recs {
			r.Principal = fmt.Sprintf("node-%d-user", n)
		}
		mu.Lock()
		want = append(want, recs...)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n%2 == 0 {
				if _, err := c.EnsureTable(ctx, stream); err != nil {
					t.Error(err)
					return
				}
			}
			for b := 0; b < batches; b++ {
				batch := recs[b*per : (b+1)*per]
				mu.Lock()
				f := putFile(t, c, stream, batch)
				mu.Unlock()
				res, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: int32(n), From: int64(b * per), To: int64((b + 1) * per), Files: []FileMeta{f}}}, nil)
				if err != nil || len(res.Committed) != 1 {
					t.Errorf("node %d batch %d: %+v, %v", n, b, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkEvolved(t, c0, stream)
	slices.SortFunc(want, func(a, b *tributary.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	checkTable(t, c0, stream, want)
}

// TestEvolveRefusesForeignColumns: a table whose columns were changed
// outside Tributary so that principal cannot have its ID is refused, not
// written with IDs that mean something else there.
func TestEvolveRefusesForeignColumns(t *testing.T) {
	ctx := context.Background()
	for name, change := range map[string]func(*table.UpdateSchema){
		"column added first": func(u *table.UpdateSchema) {
			u.AddColumn([]string{"site"}, iceberg.PrimitiveTypes.String, "", false, nil)
		},
		"principal of another type": func(u *table.UpdateSchema) {
			u.AddColumn([]string{ColPrincipal}, iceberg.PrimitiveTypes.Int64, "", false, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := openOldTable(t, "f.s")
			tb, _ := c.LoadTable(ctx, "f.s")
			tx := tb.NewTransaction()
			u := tx.UpdateSchema(true, false)
			change(u)
			if err := u.Commit(); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.EnsureTable(ctx, "f.s"); !errors.Is(err, ErrSchema) {
				t.Fatalf("EnsureTable: %v, want ErrSchema", err)
			}
			recs := testRecords(0, 0, 3, time.Now().UnixMicro())
			f := putFile(t, c, "f.s", recs)
			if _, err := c.CommitAppend(ctx, "f.s", []PartitionAppend{{Partition: 0, From: 0, To: 3, Files: []FileMeta{f}}}, nil); !errors.Is(err, ErrSchema) {
				t.Fatalf("CommitAppend: %v, want ErrSchema", err)
			}
		})
	}
}
