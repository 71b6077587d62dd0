package batch

import (
	"slices"
	"testing"
)

// TestRuns: queued items join up to the caps, a different key or an
// alone item starts a new run, order is kept.
func TestRuns(t *testing.T) {
	type it struct {
		key  int
		size int64
		err  bool
	}
	ch := make(chan it, 16)
	for _, x := range []it{{1, 1, false}, {1, 1, false}, {1, 1, false}, {2, 1, false}, {2, 1, true}, {2, 1, false}, {2, 5, false}, {2, 1, false}} {
		ch <- x
	}
	close(ch)
	var got [][]int
	i := 0
	for run := range Runs(ch, Caps{Items: 2, Bytes: 4}, func(x it) int64 { return x.size },
		func(a, b it) bool { return a.key == b.key }, func(x it) bool { return x.err }) {
		var ids []int
		for range run {
			ids = append(ids, i)
			i++
		}
		got = append(got, ids)
	}
	want := [][]int{{0, 1}, {2}, {3}, {4}, {5, 6}, {7}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}
