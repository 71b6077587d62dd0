package subscription

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// checkInvariants verifies the subscription state invariants.
func checkInvariants(t *testing.T, s *Subscription) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for off, cs := range s.owner.All() {
		if !cs.pending.Has(off) {
			t.Errorf("offset %d owned by %s but not pending on it", off, cs.c.Name())
		}
		if s.cur.acked(off) {
			t.Errorf("offset %d pending and acked", off)
		}
		if s.replay.Has(off) {
			t.Errorf("offset %d pending and in replay", off)
		}
	}
	n := 0
	for _, cs := range s.consumers {
		n += cs.pending.Len()
	}
	if n != s.owner.Len() {
		t.Errorf("%d pending, %d owned", n, s.owner.Len())
	}
	for off := range s.replay.All() {
		if s.cur.acked(off) {
			t.Errorf("offset %d in replay and acked", off)
		}
	}
	size := 0
	for off, e := range s.held.All() {
		if !s.replay.Has(off) {
			t.Errorf("offset %d cached but not in replay", off)
		}
		size += entrySize(e)
	}
	if size != s.heldBytes || size > maxHeldBytes {
		t.Errorf("held bytes %d, counted %d", s.heldBytes, size)
	}
	if s.typ == KeyShared {
		held := map[int32]map[*consumerState]int{}
		for off, cs := range s.owner.All() {
			slot, _ := cs.pending.Get(off)
			if held[slot] == nil {
				held[slot] = map[*consumerState]int{}
			}
			held[slot][cs]++
		}
		for slot, by := range held {
			if len(by) > 1 {
				t.Errorf("slot %d pending on %d consumers", slot, len(by))
			}
			for cs, k := range by {
				if h := s.slotHolder[slot]; h == nil || h.cs != cs || h.n != k {
					t.Errorf("slot %d holder %+v, want %s×%d", slot, h, cs.c.Name(), k)
				}
			}
		}
		if len(held) != len(s.slotHolder) {
			t.Errorf("%d held slots, %d holders", len(held), len(s.slotHolder))
		}
	}
}

func TestExclusive(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a", "b", "c", "d", "e")
	a := &fakeConsumer{name: "a"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Exclusive, Initial: Earliest}, a)

	_, err := m.Subscribe(context.Background(), src, SubscribeOptions{Topic: "persistent://tributary/factory/telemetry", Subscription: "sub", Type: Exclusive}, &fakeConsumer{name: "b"})
	if !errors.Is(err, ErrConsumerBusy) {
		t.Fatalf("second exclusive consumer: %v, want ErrConsumerBusy", err)
	}
	_, err = m.Subscribe(context.Background(), src, SubscribeOptions{Topic: "persistent://tributary/factory/telemetry", Subscription: "sub", Type: Shared}, &fakeConsumer{name: "c"})
	if !errors.Is(err, ErrConsumerBusy) {
		t.Fatalf("other type: %v, want ErrConsumerBusy", err)
	}

	s.Flow(a, 3)
	if got := waitCount(t, a, 3); !slices.Equal(got, seq(0, 3)) {
		t.Fatalf("first flow: %v", got)
	}
	settle(t, s)
	s.Flow(a, 10)
	if got := waitCount(t, a, 5); !slices.Equal(got, seq(0, 5)) {
		t.Fatalf("second flow: %v", got)
	}
	// Cumulative ack of 2, then redeliver: 3 and 4 again, counted.
	if err := s.Ack(context.Background(), a, []int64{2}, true); err != nil {
		t.Fatal(err)
	}
	a.take()
	s.Redeliver(a, []int64{4}) // Exclusive: everything unacked is rewound
	got := waitCount(t, a, 2)
	if !slices.Equal(got, []int64{3, 4}) {
		t.Fatalf("redelivered %v, want [3 4]", got)
	}
	for _, d := range a.deliveries() {
		if d.RedeliveryCount != 1 {
			t.Fatalf("offset %d redelivery count %d, want 1", d.Offset, d.RedeliveryCount)
		}
	}
	if s.Ack(context.Background(), a, []int64{4}, true) != nil {
		t.Fatal("cumulative ack")
	}
	checkInvariants(t, s)
	if c := s.cur.cursor(); c.MarkDelete != 4 || len(c.Acked) != 0 {
		t.Fatalf("cursor %+v", c)
	}
	// Tailing: new rows reach the consumer without any call.
	a.take()
	src.add("f", "g")
	if got := waitCount(t, a, 2); !slices.Equal(got, []int64{5, 6}) {
		t.Fatalf("tailed %v", got)
	}
	if st := a.states(); len(st) != 0 {
		t.Fatalf("exclusive consumer got ActiveChanged %v (the broker sends it to Failover consumers only)", st)
	}
}

func TestFailoverActiveChoice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		topic  string
		joins  []*fakeConsumer // in subscribe order
		active string
	}{
		{"non-partitioned: first subscribed", "persistent://t/n/s", []*fakeConsumer{{name: "z"}, {name: "a"}, {name: "m"}}, "z"},
		{"non-partitioned: priority ignored", "persistent://t/n/s", []*fakeConsumer{{name: "z", prio: 1}, {name: "a", prio: 1}, {name: "m"}}, "z"},
		{"partition 0: name order", "persistent://t/n/s-partition-0", []*fakeConsumer{{name: "z"}, {name: "a"}, {name: "m"}}, "a"},
		{"partition 1: name order", "persistent://t/n/s-partition-1", []*fakeConsumer{{name: "z"}, {name: "a"}, {name: "m"}}, "m"},
		{"partition 5: modulo", "persistent://t/n/s-partition-5", []*fakeConsumer{{name: "z"}, {name: "a"}, {name: "m"}}, "z"},
		{"partition 1: best priority only", "persistent://t/n/s-partition-1", []*fakeConsumer{{name: "z", prio: 2}, {name: "a"}, {name: "m"}}, "m"},
		{"partition 3: best priority only", "persistent://t/n/s-partition-3", []*fakeConsumer{{name: "z", prio: 2}, {name: "a"}, {name: "m"}}, "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, nil)
			src := &fakeSource{}
			var s *Subscription
			for _, c := range tc.joins {
				s = subscribe(t, m, src, SubscribeOptions{Topic: tc.topic, Type: Failover}, c)
			}
			settle(t, s)
			for _, c := range tc.joins {
				if st := c.states(); len(st) != 0 {
					t.Fatalf("%s notified %v before its first FLOW", c.name, st)
				}
				s.Flow(c, 1)
			}
			settle(t, s)
			for _, c := range tc.joins {
				st := c.states()
				if len(st) == 0 {
					t.Fatalf("%s got no ActiveChanged", c.name)
				}
				if want := c.name == tc.active; st[len(st)-1] != want {
					t.Fatalf("%s active=%v, want %v (notifications %v)", c.name, st[len(st)-1], want, st)
				}
			}
		})
	}
}

func TestFailoverHandover(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a", "b", "c", "d", "e", "f")
	a, b := &fakeConsumer{name: "a"}, &fakeConsumer{name: "b"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Failover, Initial: Earliest}, a)
	subscribe(t, m, src, SubscribeOptions{Type: Failover, Initial: Earliest}, b)
	s.Flow(a, 4)
	s.Flow(b, 100)
	waitCount(t, a, 4)
	s.Ack(context.Background(), a, []int64{0}, false)
	s.Ack(context.Background(), a, []int64{2}, false)
	settle(t, s)
	if len(b.offsets()) != 0 {
		t.Fatalf("standby got %v", b.offsets())
	}
	s.Remove(a)
	got := waitCount(t, b, 4)
	if !slices.Equal(got, []int64{1, 3, 4, 5}) {
		t.Fatalf("after handover b got %v, want [1 3 4 5]", got)
	}
	for _, d := range b.deliveries() {
		want := uint32(0)
		if d.Offset < 4 {
			want = 1
		}
		if d.RedeliveryCount != want {
			t.Fatalf("offset %d redelivery count %d, want %d", d.Offset, d.RedeliveryCount, want)
		}
	}
	if st := b.states(); !slices.Equal(st, []bool{false, true}) {
		t.Fatalf("b notifications %v, want [false true]", st)
	}
	if st := a.states(); !slices.Equal(st, []bool{true}) {
		t.Fatalf("a notifications %v, want [true]", st)
	}
	checkInvariants(t, s)
}

func TestShared(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	for i := 0; i < 90; i++ {
		src.add(fmt.Sprint(i))
	}
	cs := []*fakeConsumer{{name: "a"}, {name: "b"}, {name: "c"}}
	var s *Subscription
	for _, c := range cs {
		s = subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, c)
	}
	for _, c := range cs {
		s.Flow(c, 20)
	}
	seen := map[int64]string{}
	testkit.Eventually(t, 5*time.Second, "60 deliveries", func() bool {
		n := 0
		for _, c := range cs {
			n += len(c.offsets())
		}
		return n == 60
	})

	settle(t, s)
	for _, c := range cs {
		got := c.offsets()
		if len(got) != 20 {
			t.Fatalf("%s got %d, want 20 (its permits)", c.name, len(got))
		}
		for _, off := range got {
			if who, dup := seen[off]; dup {
				t.Fatalf("offset %d on %s and %s", off, who, c.name)
			}
			seen[off] = c.name
		}
	}
	if err := s.Ack(context.Background(), cs[0], []int64{5}, true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("cumulative ack on Shared: %v, want ErrNotAllowed", err)
	}
	// a acks half of its messages and leaves: the rest go to b and c.
	aGot := cs[0].offsets()
	for _, c := range cs {
		c.take()
	}
	s.Ack(context.Background(), cs[0], aGot[:10], false)
	s.Remove(cs[0])
	s.Flow(cs[1], 40)
	s.Flow(cs[2], 40)
	testkit.Eventually(t, 5*time.Second, "everything delivered", func() bool {
		n := 0
		for _, c := range cs[1:] {
			n += len(c.offsets())
		}
		return n == 30+10
	})

	redelivered := 0
	for _, c := range cs[1:] {
		for _, d := range c.deliveries() {
			if who, dup := seen[d.Offset]; dup {
				if who != "a" || d.RedeliveryCount != 1 || slices.Contains(aGot[:10], d.Offset) {
					t.Fatalf("offset %d again on %s (first on %s, count %d)", d.Offset, c.name, who, d.RedeliveryCount)
				}
				redelivered++
			}
			seen[d.Offset] = c.name
		}
	}
	if redelivered != 10 || len(seen) != 90 {
		t.Fatalf("redelivered %d (want 10), seen %d (want 90)", redelivered, len(seen))
	}
	// Nack on Shared redelivers just that message, to any consumer.
	b, c := cs[1], cs[2]
	settle(t, s)
	off, count := b.deliveries()[0].Offset, b.deliveries()[0].RedeliveryCount
	b.take()
	c.take()
	s.Redeliver(b, []int64{off})
	testkit.Eventually(t, 5*time.Second, "nacked message", func() bool { return len(b.offsets())+len(c.offsets()) > 0 })
	settle(t, s)
	got := append(b.deliveries(), c.deliveries()...)
	if len(got) != 1 || got[0].Offset != off || got[0].RedeliveryCount != count+1 {
		t.Fatalf("nack of %d redelivered %+v, want it alone with count %d", off, got, count+1)
	}
	checkInvariants(t, s)
}

func TestSeek(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a", "b", "c", "d", "e", "f", "g", "h")
	a := &fakeConsumer{name: "a"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Exclusive, Initial: Earliest}, a)
	s.Flow(a, 100)
	waitCount(t, a, 8)
	s.Ack(context.Background(), a, []int64{5}, true)
	a.take()
	if err := s.Seek(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if got := waitCount(t, a, 6); !slices.Equal(got, seq(2, 8)) {
		t.Fatalf("after seek to 2: %v", got)
	}
	if c := s.cur.cursor(); c.MarkDelete != 1 {
		t.Fatalf("mark-delete after seek %d, want 1", c.MarkDelete)
	}
	a.take()
	// Record timestamps are 1 s × (offset+1): 6.5 s is offset 6.
	if err := s.SeekTime(context.Background(), time.UnixMicro(6_500_000)); err != nil {
		t.Fatal(err)
	}
	if got := waitCount(t, a, 2); !slices.Equal(got, []int64{6, 7}) {
		t.Fatalf("after seek to time: %v", got)
	}
	checkInvariants(t, s)
}

func TestReaderAndLatest(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("a", "b", "c", "d")
	start := int64(2)
	r := &fakeConsumer{name: "reader"}
	s := subscribe(t, m, src, SubscribeOptions{Subscription: "reader-1", Type: Exclusive, StartOffset: &start}, r)
	l := &fakeConsumer{name: "latest"}
	sl := subscribe(t, m, src, SubscribeOptions{Subscription: "latest", Type: Exclusive, Durable: true, Initial: Latest}, l)
	s.Flow(r, 10)
	sl.Flow(l, 10)
	if got := waitCount(t, r, 2); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("reader from 2: %v", got)
	}
	settle(t, sl)
	src.add("e")
	if got := waitCount(t, l, 1); got[0] != 4 {
		t.Fatalf("latest got %v, want [4]", got)
	}
	s.Remove(r)
	m.mu.Lock()
	_, still := m.subs[subKey{"persistent://tributary/factory/telemetry", "reader-1"}]
	m.mu.Unlock()
	if still {
		t.Fatal("reader subscription outlived its consumer")
	}
}

// TestSharedPriority: Shared consumers of the best priority level get
// messages first, others only when those have no permits.
func TestSharedPriority(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	for i := 0; i < 30; i++ {
		src.add("")
	}
	hi, lo := &fakeConsumer{name: "hi", prio: 0}, &fakeConsumer{name: "lo", prio: 1}
	s := subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, lo)
	subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, hi)
	s.mu.Lock() // both flows land in one pass
	s.byConsumer[hi].permits, s.byConsumer[lo].permits = 10, 100
	s.byConsumer[hi].flowed, s.byConsumer[lo].flowed = true, true
	s.poke()
	s.mu.Unlock()
	testkit.Eventually(t, 5*time.Second, "30 deliveries", func() bool { return len(hi.offsets())+len(lo.offsets()) == 30 })
	if got := hi.offsets(); !slices.Equal(got, seq(0, 10)) {
		t.Fatalf("priority 0 consumer got %v, want the first 10", got)
	}
	if got := lo.offsets(); !slices.Equal(got, seq(10, 30)) {
		t.Fatalf("priority 1 consumer got %v, want the rest", got)
	}
}

func TestCursorBound(t *testing.T) {
	a := newAckState(Cursor{MarkDelete: -1})
	for off := int64(1); off < 2*(DefaultMaxAckedRanges+10); off += 2 {
		a.ack(off)
	}
	c := a.cursor()
	if len(a.ranges) != DefaultMaxAckedRanges+10 || len(c.Acked) != DefaultMaxAckedRanges || c.Acked[DefaultMaxAckedRanges-1] != [2]int64{2*DefaultMaxAckedRanges - 1, 2 * DefaultMaxAckedRanges} {
		t.Fatalf("%d ranges in memory, %d persisted, last %v", len(a.ranges), len(c.Acked), c.Acked[len(c.Acked)-1])
	}
	// Reloaded, the dropped ranges are simply not acknowledged: delivered
	// again, never lost.
	b := newAckState(c)
	if b.acked(2*DefaultMaxAckedRanges+1) || !b.acked(2*DefaultMaxAckedRanges-1) || b.acked(0) {
		t.Fatal("reloaded bounded cursor")
	}
}

// TestSharedRedeliverList: a REDELIVER list in any order, with duplicates,
// offsets not pending on the consumer and negative ones, redelivers just
// the consumer's pending offsets among them, once each, in offset order.
func TestSharedRedeliverList(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	for i := 0; i < 40; i++ {
		src.add(fmt.Sprint(i))
	}
	a := &fakeConsumer{name: "a"}
	s := subscribe(t, m, src, SubscribeOptions{Type: Shared, Initial: Earliest}, a)
	s.Flow(a, 30)
	waitCount(t, a, 30)
	settle(t, s)
	a.take()
	if err := s.Ack(context.Background(), a, []int64{4, 5}, false); err != nil {
		t.Fatal(err)
	}
	s.Redeliver(a, []int64{25, 3, 3, 17, 99, -4, 10, 4, 31, 25})
	s.Flow(a, 4)
	got := waitCount(t, a, 4)
	settle(t, s)
	if want := []int64{3, 10, 17, 25}; !slices.Equal(got, want) {
		t.Fatalf("redelivered %v, want %v", got, want)
	}
	for _, d := range a.deliveries() {
		if d.RedeliveryCount != 1 {
			t.Fatalf("offset %d redelivery count %d, want 1", d.Offset, d.RedeliveryCount)
		}
	}
	checkInvariants(t, s)
	// The next pass reads on from 30.
	a.take()
	s.Flow(a, 10)
	if got := waitCount(t, a, 10); !slices.Equal(got, seq(30, 40)) {
		t.Fatalf("then %v, want 30..39", got)
	}
	checkInvariants(t, s)
}
