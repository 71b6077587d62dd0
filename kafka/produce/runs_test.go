package produce

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/wal"
)

// TestRunsFromEntriesMatchRecords: the producer runs folded from WAL
// entries (a batch's run read from its header) are those folded from the
// records Read decodes, for reads starting inside a batch and cut inside
// one, with two producers interleaved, a producer epoch bump, a
// non-idempotent batch, an MQTT record and sequences wrapping past
// MaxInt32.
func TestRunsFromEntriesMatchRecords(t *testing.T) {
	w, err := wal.Open(wal.Options{Path: filepath.Join(t.TempDir(), "wal.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	batch := func(pid int64, epoch int16, seq int32, n int) {
		rs := make([]kafkatest.Rec, n)
		for i := range rs {
			rs[i] = kafkatest.Rec{Value: []byte("v")}
		}
		done := make(chan error, 1)
		w.Submit(wal.Op{Kind: wal.OpAppend, Batch: &wal.Batch{Stream: "a.b", Partition: 1, Topic: "a.b", Source: "kafka", Principal: "p",
			Records: kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: epoch, Seq: seq}, rs...)}, Done: func(wr wal.Result) { done <- wr.Err }})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	batch(5, 0, 0, 10)
	batch(6, 0, 100, 4)
	batch(5, 0, 10, 10)
	batch(-1, -1, -1, 3)
	if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.b", Partition: 1, Source: "mqtt", Value: []byte("m")}}}).Err; err != nil {
		t.Fatal(err)
	}
	batch(5, 0, 20, 5)
	batch(5, 1, 0, 5) // epoch bump: a new run
	batch(6, 0, 2147483645, 6)
	batch(6, 0, 3, 2) // wrapped: continues the run
	for _, c := range []struct {
		from int64
		max  int
	}{{0, 0}, {3, 0}, {12, 9}, {25, 0}, {35, 13}, {44, 0}} {
		recs, err := w.Read("a.b", 1, c.from, c.max, 0)
		if err != nil {
			t.Fatal(err)
		}
		ents, _, err := w.ReadEntriesInto(nil, "a.b", 1, c.from, c.max, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, keep := range []int{0, 1, KeepRuns} {
			want, got := RunsFromRecords(recs, keep), RunsFromEntries(ents, keep)
			if len(want) == 0 || !reflect.DeepEqual(got, want) {
				t.Fatalf("from %d max %d keep %d:\n got %+v\nwant %+v", c.from, c.max, keep, got, want)
			}
		}
	}
}
