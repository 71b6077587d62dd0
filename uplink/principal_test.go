package uplink

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/uplink/quarantine"
	"github.com/tributary-io/tributary/wal"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// TestPrincipalLandsInTable: records with a Principal go through the WAL
// and the real uplink into the table's principal column (null for
// anonymous records), both into a table an older node created without the
// column (evolved by this node's first commit) and into a new one.
func TestPrincipalLandsInTable(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const old, fresh = "plant.old", "plant.fresh"
	// The table as a node before the principal column created it.
	spec, err := tables.PartitionSpec("day")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cat.Iceberg().CreateNamespace(ctx, table.Identifier{"plant"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.Iceberg().CreateTable(ctx, table.Identifier{"plant", "old"}, tables.InitialSchema(),
		catalog.WithPartitionSpec(&spec), catalog.WithLocation(e.cat.TableLocation(old)),
		catalog.WithProperties(iceberg.Properties{tables.PropNextPartition: "0", tables.PropGranularity: "day", table.CommitNumRetriesKey: "0"})); err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	want := map[string]map[int64]string{}
	for _, stream := range []string{old, fresh} {
		p, err := e.cat.AllocatePartition(ctx, stream, "n1")
		if err != nil {
			t.Fatal(err)
		}
		want[stream] = map[int64]string{}
		for i := range 6 {
			r := &tributary.Record{Stream: stream, Partition: p, Topic: "t", Value: []byte{byte(i)}, Source: "mqtt", ClientID: "c"}
			if i%3 != 0 {
				r.Principal = fmt.Sprintf("CN=device-%d", i)
				want[stream][int64(i)] = r.Principal
			}
			if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := unreleased(e.wal); n != 0 {
		t.Fatalf("%d records left in the WAL", n)
	}
	for _, stream := range []string{old, fresh} {
		tb, err := e.cat.LoadTable(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := tb.Schema().FindFieldByName(tables.ColPrincipal); !ok || f.ID != tables.FieldPrincipal {
			t.Fatalf("%s: principal column %+v (present %v)", stream, f, ok)
		}
		// iceberg-go's own scan sees the column: null for anonymous rows.
		_, batches, err := tb.Scan().ToArrowRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, rows := map[int64]string{}, 0
		for b, err := range batches {
			if err != nil {
				t.Fatal(err)
			}
			pc := b.Column(b.Schema().FieldIndices(tables.ColPrincipal)[0]).(*array.String)
			oc := b.Column(b.Schema().FieldIndices(tables.ColOffset)[0]).(*array.Int64)
			for i := 0; i < int(b.NumRows()); i++ {
				if pc.IsValid(i) {
					got[oc.Value(i)] = pc.Value(i)
				}
			}
			rows += int(b.NumRows())
			b.Release()
		}
		if rows != 6 || !reflect.DeepEqual(got, want[stream]) {
			t.Fatalf("%s: %d rows, principals %v, want %v", stream, rows, got, want[stream])
		}
	}
}

// TestQuarantinePrincipal: quarantine files carry the principal, and a
// file written before the field existed (quarantine/testdata/v1.quarantine.jsonl,
// by the previous version's Record) still reads, with Principal "".
func TestQuarantinePrincipal(t *testing.T) {
	old, err := quarantine.Read(filepath.Join("quarantine", "testdata", "v1.quarantine.jsonl"))
	if err != nil || len(old) != 2 {
		t.Fatalf("old quarantine: %d records, %v", len(old), err)
	}
	for _, r := range old {
		if r.Principal != "" || r.Stream != "plant.telemetry" || r.ClientID == "" {
			t.Fatalf("old quarantined record %+v", r)
		}
	}
	if string(old[1].Key) != "k" || old[1].ProducerTimestamp != 1764590400000 || old[1].Headers[0].Key != "trace" {
		t.Fatalf("old kafka record %+v", old[1])
	}

	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "q.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	in := []*tributary.Record{
		{Stream: stream, Partition: p, Topic: "t", Value: []byte("a"), Source: "mqtt", Principal: "alice"},
		{Stream: stream, Partition: p, Topic: "t", Value: []byte("b"), Source: "mqtt"},
	}
	if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: in}).Err; err != nil {
		t.Fatal(err)
	}
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir()}, e.wal, e.cat, e.bucket)
	path, n, err := u.quarantine(stream, p, 0, 2, "test")
	if err != nil || n != 2 {
		t.Fatalf("quarantine: %d, %v", n, err)
	}
	raw, _ := os.ReadFile(path)
	if strings.Count(string(raw), `"Principal":"alice"`) != 1 {
		t.Fatalf("quarantine file:\n%s", raw)
	}
	got, err := quarantine.Read(path)
	if err != nil || len(got) != 2 || got[0].Principal != "alice" || got[1].Principal != "" {
		t.Fatalf("read back %+v, %v", got, err)
	}
}
