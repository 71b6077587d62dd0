package subscription

import (
	"context"
	"errors"
	"testing"
)

// TestAckedRangesCap: out-of-order individual acks cannot grow a
// subscription's acknowledged ranges past maxAckedRanges — the ack that
// would open one more is refused (ErrTooMany, counted), the others of the
// same ACK are taken, and acks that extend or join ranges always are.
func TestAckedRangesCap(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a")
	c := &fakeConsumer{name: "c"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, c)
	var odd []int64
	for i := range maxAckedRanges + 2 {
		odd = append(odd, int64(2*i+1)) // 1, 3, 5, …: every one a range of its own
	}
	if err := s.Ack(context.Background(), c, odd, false); !errors.Is(err, ErrTooMany) {
		t.Fatalf("ack of %d separate offsets: %v, want ErrTooMany", len(odd), err)
	}
	s.mu.Lock()
	n, acked := len(s.cur.ranges), s.cur.acked(odd[maxAckedRanges])
	s.mu.Unlock()
	if n != maxAckedRanges || acked {
		t.Fatalf("%d ranges (max %d), offset beyond the cap acked: %v", n, maxAckedRanges, acked)
	}
	if got := m.CapStats().AcksRefused; got != 2 {
		t.Fatalf("refused %d acks, want 2", got)
	}
	// At the cap: an ack next to a range, or joining two, is taken.
	if err := s.Ack(context.Background(), c, []int64{2, 2*maxAckedRanges - 1 + 1}, false); err != nil {
		t.Fatalf("acks joining ranges at the cap: %v", err)
	}
	if err := s.Ack(context.Background(), c, []int64{0}, false); err != nil {
		t.Fatalf("ack folding into the mark-delete: %v", err)
	}
	s.mu.Lock()
	md, n := s.cur.markDelete, len(s.cur.ranges)
	s.mu.Unlock()
	if md != 3 || n != maxAckedRanges-2 {
		t.Fatalf("mark-delete %d, %d ranges", md, n)
	}
}

// TestUnackedPerConsumer: a consumer that grants any number of permits
// and never acknowledges holds at most MaxUnackedPerConsumer messages;
// acknowledging lets the rest flow.
func TestUnackedPerConsumer(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	keys := make([]string, MaxUnackedPerConsumer+100)
	src.add(keys...)
	c := &fakeConsumer{name: "c"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Exclusive, Initial: Earliest}, c)
	s.Flow(c, 1<<30)
	waitCount(t, c, MaxUnackedPerConsumer)
	settle(t, s)
	if got := len(c.offsets()); got != MaxUnackedPerConsumer {
		t.Fatalf("delivered %d unacknowledged, max %d", got, MaxUnackedPerConsumer)
	}
	if m.CapStats().ConsumerBlocked == 0 {
		t.Fatal("blocked consumer not counted")
	}
	if err := s.Ack(context.Background(), c, seq(0, 100), false); err != nil {
		t.Fatal(err)
	}
	waitCount(t, c, MaxUnackedPerConsumer+100)
}
