package produce

import (
	"testing"

	"github.com/tributary-io/tributary"
)

// TestProducerIDsUnguessable: ids are positive, distinct, and not a
// sequence a client could extrapolate from its own (the old allocator
// handed out consecutive ids in blocks).
func TestProducerIDsUnguessable(t *testing.T) {
	s, err := OpenProducerStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	var prev int64
	close := 0
	for i := range 1000 {
		id, err := s.AllocateProducerID()
		if err != nil {
			t.Fatal(err)
		}
		if id <= 0 || seen[id] {
			t.Fatalf("id %d (%d-th) non-positive or repeated", id, i)
		}
		seen[id] = true
		if d := id - prev; i > 0 && d > -1<<20 && d < 1<<20 {
			close++
		}
		prev = id
	}
	if close > 2 {
		t.Fatalf("%d of 1000 consecutive ids within 2^20 of each other: predictable", close)
	}
}

// TestProducerStatePersists: runs folded in before a release survive a
// reopen.
func TestProducerStatePersists(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenProducerStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs := []*tributary.Record{
		{Stream: "a.b", Partition: 1, Offset: 10, ProducerID: 77, ProducerEpoch: 2, Sequence: 5, Source: "kafka"},
		{Stream: "a.b", Partition: 1, Offset: 11, ProducerID: 77, ProducerEpoch: 2, Sequence: 6, Source: "kafka"},
	}
	if err := s.Releasing("a.b", 1, recs); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenProducerStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	runs := s2.SavedRuns()
	if len(runs) != 1 || runs[0].ProducerID != 77 || runs[0].FirstSeq != 5 || runs[0].LastSeq != 6 || runs[0].FirstOffset != 10 {
		t.Fatalf("runs after reopen: %+v", runs)
	}
}
