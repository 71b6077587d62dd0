package wal

import (
	"context"
	"errors"
	"testing"

	"github.com/tributary-io/tributary"
)

// TestAppendAsyncAfter: an append that follows a refused one is refused
// too, whether they share a group commit or not, and writes nothing; one
// that follows a successful one (or none) is stored; a chain starts again
// after a refusal.
func TestAppendAsyncAfter(t *testing.T) {
	w := openTest(t, Options{NoSync: true, MaxBytes: 4 * recSize})
	ctx := context.Background()
	if err := w.Apply(ctx, Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}}).Err; err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 8)
	release := make(chan struct{})
	// Hold the committer in a done callback while the chain queues up, so
	// that all of it lands in one group.
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 1, "vvvv")}, Done: func(wr Result) {
		<-release
		results <- wr.Err
	}})
	ok := w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}, Done: func(wr Result) { results <- wr.Err }})
	big := w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv"), rec("s", 0, "vvvv"), rec("s", 0, "vvvv")}, After: ok, Done: func(wr Result) { results <- wr.Err }})
	small := w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}, After: big, Done: func(wr Result) { results <- wr.Err }})
	close(release)
	var got []error
	for range 4 {
		got = append(got, <-results)
	}
	if got[0] != nil || got[1] != nil || !errors.Is(got[2], ErrBudgetExceeded) || !errors.Is(got[3], ErrPredecessorFailed) {
		t.Fatalf("results %v; want nil, nil, budget exceeded, predecessor failed (the small append would fit)", got)
	}
	// In a later group: still refused, nothing written.
	done := make(chan error, 1)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}, After: small, Done: func(wr Result) { done <- wr.Err }})
	if err := <-done; !errors.Is(err, ErrPredecessorFailed) {
		t.Fatalf("append after a refused chain: %v", err)
	}
	if ps := findPartition(w, "s", 0); ps.Next != 2 {
		t.Fatalf("partition next %d, want 2 (the refused appends left no trace)", ps.Next)
	}
	// A new chain (zero ticket) is stored.
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "vvvv")}, Done: func(wr Result) { done <- wr.Err }})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// An append after a closed WAL's refusal is refused as well.
	w.Close()
	var first, second error
	tk := w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "v")}, Done: func(wr Result) { first = wr.Err }})
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{rec("s", 0, "v")}, After: tk, Done: func(wr Result) { second = wr.Err }})
	if !errors.Is(first, ErrClosed) || !errors.Is(second, ErrClosed) {
		t.Fatalf("after close: %v, %v", first, second)
	}
}
