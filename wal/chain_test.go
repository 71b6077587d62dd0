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
	if err := w.Append(ctx, rec("s", 0, "vvvv")); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 8)
	release := make(chan struct{})
	// Hold the committer in a done callback while the chain queues up, so
	// that all of it lands in one group.
	w.AppendAsync([]*tributary.Record{rec("s", 1, "vvvv")}, func(err error) {
		<-release
		results <- err
	})
	ok := w.AppendAsyncAfter(Ticket{}, []*tributary.Record{rec("s", 0, "vvvv")}, func(err error) { results <- err })
	big := w.AppendAsyncAfter(ok, []*tributary.Record{rec("s", 0, "vvvv"), rec("s", 0, "vvvv"), rec("s", 0, "vvvv")},
		func(err error) { results <- err })
	small := w.AppendAsyncAfter(big, []*tributary.Record{rec("s", 0, "vvvv")}, func(err error) { results <- err })
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
	w.AppendAsyncAfter(small, []*tributary.Record{rec("s", 0, "vvvv")}, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrPredecessorFailed) {
		t.Fatalf("append after a refused chain: %v", err)
	}
	if ps := findPartition(w, "s", 0); ps.Next != 2 {
		t.Fatalf("partition next %d, want 2 (the refused appends left no trace)", ps.Next)
	}
	// A new chain (zero ticket) is stored.
	w.AppendAsyncAfter(Ticket{}, []*tributary.Record{rec("s", 0, "vvvv")}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// An append after a closed WAL's refusal is refused as well.
	w.Close()
	var first, second error
	tk := w.AppendAsyncAfter(Ticket{}, []*tributary.Record{rec("s", 0, "v")}, func(err error) { first = err })
	w.AppendAsyncAfter(tk, []*tributary.Record{rec("s", 0, "v")}, func(err error) { second = err })
	if !errors.Is(first, ErrClosed) || !errors.Is(second, ErrClosed) {
		t.Fatalf("after close: %v, %v", first, second)
	}
}
