package subscription

import (
	"context"
	"errors"
	"testing"
)

// TestAckedRangesCap: out-of-order individual acks cannot grow a
// subscription's acknowledged ranges past DefaultMaxAckedRanges — the ack that
// would open one more is refused (ErrTooMany, counted), the others of the
// same ACK are taken, and acks that extend or join ranges always are.
func TestAckedRangesCap(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a")
	c := &fakeConsumer{name: "c"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, c)
	var odd []int64
	for i := range DefaultMaxAckedRanges + 2 {
		odd = append(odd, int64(2*i+1)) // 1, 3, 5, …: every one a range of its own
	}
	if err := s.Ack(context.Background(), c, odd, false); !errors.Is(err, ErrTooMany) {
		t.Fatalf("ack of %d separate offsets: %v, want ErrTooMany", len(odd), err)
	}
	s.mu.Lock()
	n, acked := len(s.cur.ranges), s.cur.acked(odd[DefaultMaxAckedRanges])
	s.mu.Unlock()
	if n != DefaultMaxAckedRanges || acked {
		t.Fatalf("%d ranges (max %d), offset beyond the cap acked: %v", n, DefaultMaxAckedRanges, acked)
	}
	if got := m.CapStats().AcksRefused; got != 2 {
		t.Fatalf("refused %d acks, want 2", got)
	}
	// At the cap: an ack next to a range, or joining two, is taken.
	if err := s.Ack(context.Background(), c, []int64{2, 2*DefaultMaxAckedRanges - 1 + 1}, false); err != nil {
		t.Fatalf("acks joining ranges at the cap: %v", err)
	}
	if err := s.Ack(context.Background(), c, []int64{0}, false); err != nil {
		t.Fatalf("ack folding into the mark-delete: %v", err)
	}
	s.mu.Lock()
	md, n := s.cur.markDelete, len(s.cur.ranges)
	s.mu.Unlock()
	if md != 3 || n != DefaultMaxAckedRanges-2 {
		t.Fatalf("mark-delete %d, %d ranges", md, n)
	}
}

// TestUnackedPerConsumer: a consumer that grants any number of permits
// and never acknowledges holds at most DefaultMaxUnackedPerConsumer messages;
// acknowledging lets the rest flow.
func TestUnackedPerConsumer(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	keys := make([]string, DefaultMaxUnackedPerConsumer+100)
	src.add(keys...)
	c := &fakeConsumer{name: "c"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Exclusive, Initial: Earliest}, c)
	s.Flow(c, 1<<30)
	waitCount(t, c, DefaultMaxUnackedPerConsumer)
	settle(t, s)
	if got := len(c.offsets()); got != DefaultMaxUnackedPerConsumer {
		t.Fatalf("delivered %d unacknowledged, max %d", got, DefaultMaxUnackedPerConsumer)
	}
	if m.CapStats().ConsumerBlocked == 0 {
		t.Fatal("blocked consumer not counted")
	}
	if err := s.Ack(context.Background(), c, seq(0, 100), false); err != nil {
		t.Fatal(err)
	}
	waitCount(t, c, DefaultMaxUnackedPerConsumer+100)
}

// TestConfiguredCaps: the cloud's pulsar.max_unacked_per_consumer and
// pulsar.max_acked_ranges (Caps) replace the defaults, and the stored
// cursor keeps at most the configured ranges.
func TestConfiguredCaps(t *testing.T) {
	m := newTestManager(t, nil)
	m.SetCaps(Caps{MaxUnackedPerConsumer: 7, MaxAckedRanges: 3})
	src := &fakeSource{}
	src.add(make([]string, 50)...)
	c := &fakeConsumer{name: "c"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, c)
	s.Flow(c, 1000)
	waitCount(t, c, 7)
	settle(t, s)
	if got := len(c.offsets()); got != 7 {
		t.Fatalf("delivered %d unacknowledged, cap 7", got)
	}
	if err := s.Ack(context.Background(), c, []int64{1, 3, 5}, false); err != nil {
		t.Fatal(err)
	}
	waitCount(t, c, 10) // three acknowledged: three more
	if err := s.Ack(context.Background(), c, []int64{8}, false); !errors.Is(err, ErrTooMany) {
		t.Fatalf("fourth range: %v, want ErrTooMany", err)
	}
	s.mu.Lock()
	cur := s.cur.cursor()
	s.mu.Unlock()
	if len(cur.Acked) != 3 {
		t.Fatalf("stored cursor %+v, want 3 ranges", cur)
	}
}
