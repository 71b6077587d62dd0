package subscription

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tributary-io/tributary/subscription/wire"

	"github.com/tributary-io/tributary/internal/testkit"
)

func TestAckState(t *testing.T) {
	type op struct {
		off int64
		cum bool
	}
	for _, tc := range []struct {
		name  string
		start Cursor
		ops   []op
		want  Cursor
	}{
		{"prefix", Cursor{MarkDelete: -1}, []op{{0, false}, {1, false}, {2, false}}, Cursor{MarkDelete: 2}},
		{"hole", Cursor{MarkDelete: -1}, []op{{0, false}, {2, false}, {3, false}, {5, false}},
			Cursor{MarkDelete: 0, Acked: [][2]int64{{2, 4}, {5, 6}}}},
		{"hole filled", Cursor{MarkDelete: -1}, []op{{2, false}, {3, false}, {5, false}, {0, false}, {1, false}},
			Cursor{MarkDelete: 3, Acked: [][2]int64{{5, 6}}}},
		{"bridge two ranges", Cursor{MarkDelete: 9}, []op{{12, false}, {14, false}, {13, false}},
			Cursor{MarkDelete: 9, Acked: [][2]int64{{12, 15}}}},
		{"duplicate and old", Cursor{MarkDelete: 9}, []op{{5, false}, {12, false}, {12, false}, {-3, false}},
			Cursor{MarkDelete: 9, Acked: [][2]int64{{12, 13}}}},
		{"cumulative over ranges", Cursor{MarkDelete: -1}, []op{{3, false}, {7, false}, {8, false}, {20, false}, {7, true}},
			Cursor{MarkDelete: 8, Acked: [][2]int64{{20, 21}}}},
		{"cumulative backwards", Cursor{MarkDelete: 10}, []op{{4, true}}, Cursor{MarkDelete: 10}},
		{"loaded cursor normalised", Cursor{MarkDelete: 4, Acked: [][2]int64{{2, 6}, {8, 9}, {9, 11}}}, nil,
			Cursor{MarkDelete: 5, Acked: [][2]int64{{8, 11}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAckState(tc.start)
			for _, o := range tc.ops {
				if o.cum {
					a.ackUpTo(o.off)
				} else {
					a.ack(o.off)
				}
			}
			got := a.cursor()
			if got.MarkDelete != tc.want.MarkDelete || !slices.Equal(got.Acked, tc.want.Acked) {
				t.Fatalf("cursor %+v, want %+v", got, tc.want)
			}
			// What the store will write must read back (normalised cursors only).
			if back, err := wire.DecodeAckedRanges(got.MarkDelete, wire.EncodeAckedRanges(got.MarkDelete, got.Acked)); err != nil || !slices.Equal(back, got.Acked) {
				t.Fatalf("stored cursor %+v reads back as %v, %v", got, back, err)
			}
			for off := int64(-1); off < 25; off++ {
				want := off <= got.MarkDelete
				for _, r := range got.Acked {
					want = want || (r[0] <= off && off < r[1])
				}
				if a.acked(off) != want {
					t.Fatalf("acked(%d) = %v", off, !want)
				}
			}
		})
	}
}

func openTestStore(t *testing.T, path string) CursorStore {
	t.Helper()
	st, err := OpenCursorStore("sqlite://" + path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCursorStore runs the cursor store's conformance suite over SQLite
// and PostgreSQL: both must behave the same.
func TestCursorStore(t *testing.T) { testkit.StateDBs(t, runCursorStoreTests) }

// runCursorStoreTests saves, replaces, loads and deletes cursors, and
// finds them again through a second store on the same database (another
// cloud server).
func runCursorStoreTests(t *testing.T, uri string) {
	st, err := OpenCursorStore(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer st.(interface{ Close() error }).Close()
	ctx := context.Background()
	if _, ok, err := st.Load(ctx, "t", "s"); ok || err != nil {
		t.Fatalf("load of nothing: %v %v", ok, err)
	}
	c := Cursor{MarkDelete: 41, Acked: [][2]int64{{43, 45}, {50, 51}}}
	if err := st.Save(ctx, "t", "s", c); err != nil {
		t.Fatal(err)
	}
	c2 := Cursor{MarkDelete: 44, Acked: [][2]int64{{50, 51}}}
	if err := st.Save(ctx, "t", "s", c2); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.Load(ctx, "t", "s")
	if err != nil || !ok || !reflect.DeepEqual(got, c2) {
		t.Fatalf("load: %+v %v %v, want %+v", got, ok, err, c2)
	}
	// Another subscription of the same topic is its own row.
	c3 := Cursor{MarkDelete: 1 << 40}
	if err := st.Save(ctx, "t", "other", c3); err != nil {
		t.Fatal(err)
	}
	st2, err := OpenCursorStore(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.(interface{ Close() error }).Close()
	if got, ok, err := st2.Load(ctx, "t", "other"); err != nil || !ok || got.MarkDelete != c3.MarkDelete || len(got.Acked) != 0 {
		t.Fatalf("load through a second store: %+v %v %v, want %+v", got, ok, err, c3)
	}
	if err := st.Delete(ctx, "t", "s"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.Load(ctx, "t", "s"); ok {
		t.Fatal("deleted cursor still there")
	}
	if _, ok, _ := st2.Load(ctx, "t", "other"); !ok {
		t.Fatal("deleting one subscription's cursor deleted another's")
	}
}

// TestDurableResume: a durable subscription reopened by another manager on
// the same database (a restarted or other cloud server) redelivers exactly
// the unacknowledged offsets.
func TestDurableResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	src := &fakeSource{}
	for i := 0; i < 20; i++ {
		src.add("k")
	}
	opts := SubscribeOptions{Type: Shared, Durable: true, Initial: Earliest}

	m1 := NewManager(openTestStore(t, path), nil)
	a := &fakeConsumer{name: "a"}
	s := subscribe(t, m1, src, opts, a)
	s.Flow(a, 12)
	waitCount(t, a, 12)
	acked := []int64{0, 1, 2, 3, 5, 8, 9, 11}
	if err := s.Ack(context.Background(), a, acked, false); err != nil {
		t.Fatal(err)
	}
	s.Remove(a) // last consumer: the cursor is saved before a new Subscribe can load it
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	m2 := newTestManager(t, openTestStore(t, path))
	b := &fakeConsumer{name: "b"}
	s = subscribe(t, m2, src, opts, b)
	s.Flow(b, 100)
	want := []int64{4, 6, 7, 10, 12, 13, 14, 15, 16, 17, 18, 19}
	if got := waitCount(t, b, len(want)); !slices.Equal(got, want) {
		t.Fatalf("resumed delivery %v, want %v", got, want)
	}

	// Unsubscribe deletes the cursor: a new subscription starts afresh.
	if err := m2.Unsubscribe(context.Background(), "persistent://tributary/factory/telemetry", "sub"); err != nil {
		t.Fatal(err)
	}
	if err := m2.Unsubscribe(context.Background(), "persistent://tributary/factory/telemetry", "sub"); !errors.Is(err, ErrSubscriptionNotFound) {
		t.Fatalf("second unsubscribe: %v, want ErrSubscriptionNotFound", err)
	}
	c := &fakeConsumer{name: "c"}
	s = subscribe(t, m2, src, opts, c)
	s.Flow(c, 100)
	waitCount(t, c, 20)
}

// TestCursorFlushedWhileConsuming: the flusher saves a live subscription's
// cursor without any consumer leaving.
func TestCursorFlushedWhileConsuming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	st := openTestStore(t, path)
	m := newTestManager(t, st)
	src := &fakeSource{}
	src.add("a", "b", "c")
	a := &fakeConsumer{name: "a"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Failover, Durable: true, Initial: Earliest}, a)
	s.Flow(a, 10)
	waitCount(t, a, 3)
	s.Ack(context.Background(), a, []int64{1}, true)
	testkit.Eventually(t, 5*time.Second, "cursor saved", func() bool {
		c, ok, err := st.Load(context.Background(), "persistent://tributary/factory/telemetry", "sub")
		return err == nil && ok && c.MarkDelete == 1
	})

}

// Random individual acks against a set: the in-place range splicing keeps
// the invariants (sorted, disjoint, non-adjacent, above markDelete+1) and
// acked() agrees with the set.
func TestAckStateRandomAgainstSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for round := range 50 {
		a := newAckState(Cursor{MarkDelete: -1})
		set := map[int64]bool{}
		n := int64(50 + round*10)
		for range n * 2 {
			off := rng.Int64N(n)
			if a.ack(off) == set[off] {
				t.Fatalf("round %d: ack(%d) changed=%v, already acked=%v", round, off, !set[off], set[off])
			}
			set[off] = true
			prev := a.markDelete + 1
			for i, r := range a.ranges {
				if r[0] <= prev || r[1] <= r[0] {
					t.Fatalf("round %d: range %d %v after %d (markDelete %d): %v", round, i, r, prev, a.markDelete, a.ranges)
				}
				prev = r[1]
			}
			for o := range n {
				if a.acked(o) != set[o] {
					t.Fatalf("round %d: acked(%d) = %v, set says %v", round, o, a.acked(o), set[o])
				}
			}
		}
	}
}
