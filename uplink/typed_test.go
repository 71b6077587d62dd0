package uplink

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
)

// failAfterDLQ fails the first n CommitAppends, after the dead letters of
// the batch were committed: the crash between the two commits.
type failAfterDLQ struct {
	Committer
	fail atomic.Int32
}

var errInjected = errors.New("injected: catalog gone after the dead letters")

func (c *failAfterDLQ) CommitAppend(ctx context.Context, stream string, a []tables.PartitionAppend, s map[string]string) (tables.CommitResult, error) {
	if c.fail.Add(-1) >= 0 {
		return tables.CommitResult{}, errInjected
	}
	return c.Committer.CommitAppend(ctx, stream, a, s)
}

// TestTypedDeadLettersOnce: a typed stream's batch whose dead letters are
// committed but whose own commit fails is redone by the next pass (with
// more records by then): the stream table has every record once, the
// dead-letter table every dead letter once, and the counters count each
// once.
func TestTypedDeadLettersOnce(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	fc := &failAfterDLQ{Committer: e.cat}
	fc.fail.Store(2)
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir(),
		Payloads: map[string]typed.Policy{stream: {Mode: typed.Infer}}}, e.wal, fc, e.bucket)
	want := appendVals(t, e.wal, stream, p, 0, "bad", 3) // not JSON: dead letters
	for range 2 {
		if err := u.SyncAll(ctx); !errors.Is(err, errInjected) {
			t.Fatalf("pass: %v", err)
		}
		want = append(want, appendVals(t, e.wal, stream, p, 0, "worse", 2)...)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: want})
	dl, err := e.cat.ScanSorted(ctx, tables.DLQStream(stream), tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dl), len(want))
	}
	for i, r := range dl {
		if r.Offset != int64(i) || string(r.Value) != string(want[i]) {
			t.Fatalf("dead letter %d: offset %d value %q", i, r.Offset, r.Value)
		}
	}
	if st := u.Stats(); st.DeadLetters[stream] != int64(len(want)) {
		t.Errorf("Stats.DeadLetters = %v, want %d", st.DeadLetters, len(want))
	}
}
