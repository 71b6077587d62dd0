package uplink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
	"github.com/tributary-io/tributary/tables/typed"
	"github.com/tributary-io/tributary/wal"
)

func typedInfer(stream string) map[string]typed.Policy {
	return map[string]typed.Policy{stream: {Mode: typed.Infer}}
}

// checkDeltaLog: the stream's Delta log holds every committed Iceberg
// row once, its txn per partition is the Iceberg mark, and it lists
// exactly the Iceberg files.
func checkDeltaLog(t *testing.T, e *env, stream string) (*delta.Snapshot, []delta.Row) {
	t.Helper()
	ctx := context.Background()
	root, err := e.cat.DeltaRoot(stream)
	if err != nil {
		t.Fatal(err)
	}
	dt := delta.NewTable(e.bucket.DeltaStore(), root)
	s, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	marks, _, err := e.cat.Marks(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range marks {
		if v, _ := s.TxnVersion(tables.DeltaAppID(stream, p)); v != h {
			t.Fatalf("partition %d: Delta txn %d, Iceberg mark %d", p, v, h)
		}
	}
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := e.cat.ScanSorted(ctx, stream, tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprint(r[tables.ColPartition], "@", r[tables.ColOffset])
		if seen[k] {
			t.Fatalf("Delta has %s twice", k)
		}
		seen[k] = true
	}
	if len(rows) != len(recs) {
		t.Fatalf("Delta has %d rows, Iceberg %d", len(rows), len(recs))
	}
	for _, r := range recs {
		if !seen[fmt.Sprint(int64(r.Partition), "@", r.Offset)] {
			t.Fatalf("Delta lacks %d@%d", r.Offset, r.Partition)
		}
	}
	return s, rows
}

// TestUplinkDeltaCrashBetweenCommits: a typed stream with formats
// [iceberg, delta] whose payloads gain a field mid-run, and whose Delta
// commit is lost after every other Iceberg commit (a crash between the
// two); a restarted uplink with nothing new to commit brings the Delta
// log up from the marks — every row once, the new column in the Delta
// schema, checkpoints written and used.
func TestUplinkDeltaCrashBetweenCommits(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "a.b"
	n := 0
	crash := errors.New("crash between the commits")
	calls := 0
	u := New(Config{Node: "n1", Payloads: typedInfer(stream), Delta: map[string]bool{stream: true}, DeltaStore: e.bucket.DeltaStore(),
		DeltaCheckpointInterval: 3, deltaHook: func(string) error {
			calls++
			if calls%2 == 0 {
				return crash
			}
			return nil
		}}, e.wal, e.cat, e.bucket)
	for round := 0; round < 8; round++ {
		for i := 0; i < 25; i++ {
			v := fmt.Sprintf(`{"temp":%d}`, n)
			if round >= 4 {
				v = fmt.Sprintf(`{"temp":%d,"site":"s%d"}`, n, round) // a schema change mid-run
			}
			n++
			if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: stream, Partition: int32(i % 2), Value: []byte(v), Topic: "t", Source: "mqtt"}}}).Err; err != nil {
				t.Fatal(err)
			}
		}
		if err := u.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := u.Stats(); s.DeltaFailures != 4 {
		t.Fatalf("stats %+v: want 4 lost Delta commits", s)
	}
	// Restart: nothing new in the WAL; the Delta log catches up.
	u2 := New(Config{Node: "n1", Interval: 20 * time.Millisecond, Payloads: typedInfer(stream), Delta: map[string]bool{stream: true},
		DeltaStore: e.bucket.DeltaStore(), DeltaCheckpointInterval: 3}, e.wal, e.cat, e.bucket)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go u2.Run(rctx)
	testkit.Eventually(t, 30*time.Second, "the Delta log caught up", func() bool {
		return u2.Stats().DeltaCommits > 0
	})
	cancel()
	s, rows := checkDeltaLog(t, e, stream)
	if len(rows) != n {
		t.Fatalf("%d Delta rows, %d appended", len(rows), n)
	}
	if _, ok := s.Schema.Field("site"); !ok {
		t.Fatalf("Delta schema %s lacks the column added mid-run", s.Schema)
	}
	withSite := 0
	for _, r := range rows {
		if r["site"] != nil {
			withSite++
		}
	}
	if withSite != n/2 {
		t.Fatalf("%d rows with site, want %d", withSite, n/2)
	}
	if s.Checkpoint < 0 {
		t.Fatalf("no checkpoint used at version %d", s.Version)
	}
}

// TestUplinkDeltaDeadLetters: the dead-letter table of an [iceberg,
// delta] stream gets its Delta log too, by its own marks: every dead
// letter once, txn = the dead-letter table's mark, none for a stream
// without dead letters in a partition.
func TestUplinkDeltaDeadLetters(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "a.b"
	u := New(Config{Node: "n1", Payloads: typedInfer(stream), Delta: map[string]bool{stream: true}, DeltaStore: e.bucket.DeltaStore()}, e.wal, e.cat, e.bucket)
	dead := 0
	for round := 0; round < 3; round++ {
		for i := 0; i < 20; i++ {
			v := fmt.Sprintf(`{"temp":%d}`, i)
			if i%5 == 0 {
				v, dead = "not json", dead+1
			}
			if err := e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: stream, Partition: int32(i % 2), Value: []byte(v), Topic: "t", Source: "mqtt"}}}).Err; err != nil {
				t.Fatal(err)
			}
		}
		if err := u.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkDeltaLog(t, e, stream)
	dlq := tables.DLQStream(stream)
	rows, s, err := e.cat.ScanDelta(ctx, e.bucket.DeltaStore(), dlq, tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != dead {
		t.Fatalf("%d dead letters in the Delta log, %d sent", len(rows), dead)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprint(r.Record.Partition, "@", r.Record.Offset)
		if seen[k] || string(r.Record.Value) != "not json" || r.Error == "" {
			t.Fatalf("dead letter %s twice or wrong: %+v", k, r)
		}
		seen[k] = true
	}
	marks, _, err := e.cat.Marks(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range marks {
		if v, _ := s.TxnVersion(tables.DeltaAppID(dlq, p)); v != h {
			t.Fatalf("partition %d: Delta txn %d, dead-letter mark %d", p, v, h)
		}
	}
}
