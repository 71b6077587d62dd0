package subscription

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

func TestMurmur3Vectors(t *testing.T) {
	// Vectors of MurmurHash3_x86_32 (the published ones for "hello" etc.,
	// the rest computed with an independent implementation of the public
	// definition).
	for _, tc := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"a", 0, 0x3c2569b2},
		{"ab", 0, 0x9bbfd75f},
		{"abc", 0, 0xb3dd93fa},
		{"abcd", 0, 0x43ed676a},
		{"hello", 0, 0x248bfa47},
		{"hello, world", 0, 0x149bbb7f},
		{"19 Jan 2038 at 3:14:07 AM", 0, 0xe31e8a70},
		{"The quick brown fox jumps over the lazy dog.", 0, 0xd5c48bfc},
		{"key-42", 0, 0x04df6717},
		{"\xff\xfe\x00\x01\x80", 0, 0xffece937},
	} {
		if got := murmur3_32([]byte(tc.in), tc.seed); got != tc.want {
			t.Errorf("murmur3_32(%q, %d) = %#x, want %#x", tc.in, tc.seed, got, tc.want)
		}
	}
	// Pulsar's variant clears the sign bit; the slot is the hash mod 65536.
	if got := stickyKeyHash([]byte("\xff\xfe\x00\x01\x80")); got != 0x7fece937 {
		t.Errorf("stickyKeyHash = %#x, want 0x7fece937", got)
	}
	if got := keySlot([]byte("hello")); got != 0xfa47 {
		t.Errorf("keySlot(hello) = %#x, want 0xfa47", got)
	}
	if keySlot(nil) != keySlot([]byte{}) || keySlot(nil) != 0 {
		t.Errorf("no key must hash as the empty key")
	}
}

func TestAutoSplit(t *testing.T) {
	cs := make([]*consumerState, 5)
	for i := range cs {
		cs[i] = &consumerState{seq: uint64(i)}
	}
	type rng struct{ from, to int32 }
	ranges := func(a *autoSplit) map[*consumerState]rng {
		out := map[*consumerState]rng{}
		for i, c := range a.own {
			out[c] = rng{a.start(i), a.ends[i]}
		}
		if len(a.ends) > 0 && a.ends[len(a.ends)-1] != hashSlots-1 {
			t.Fatalf("ranges end at %d", a.ends[len(a.ends)-1])
		}
		return out
	}
	var a autoSplit
	steps := []struct {
		add, remove *consumerState
		want        map[*consumerState]rng
	}{
		{add: cs[0], want: map[*consumerState]rng{cs[0]: {0, 65535}}},
		{add: cs[1], want: map[*consumerState]rng{cs[1]: {0, 32767}, cs[0]: {32768, 65535}}},
		{add: cs[2], want: map[*consumerState]rng{cs[2]: {0, 16383}, cs[1]: {16384, 32767}, cs[0]: {32768, 65535}}},
		{add: cs[3], want: map[*consumerState]rng{cs[2]: {0, 16383}, cs[1]: {16384, 32767}, cs[3]: {32768, 49151}, cs[0]: {49152, 65535}}},
		{remove: cs[1], want: map[*consumerState]rng{cs[2]: {0, 16383}, cs[3]: {16384, 49151}, cs[0]: {49152, 65535}}},
		{remove: cs[0], want: map[*consumerState]rng{cs[2]: {0, 16383}, cs[3]: {16384, 65535}}},
		{add: cs[4], want: map[*consumerState]rng{cs[2]: {0, 16383}, cs[4]: {16384, 40959}, cs[3]: {40960, 65535}}},
	}
	for i, st := range steps {
		if st.add != nil {
			a.add(st.add)
		} else {
			a.remove(st.remove)
		}
		got := ranges(&a)
		if len(got) != len(st.want) {
			t.Fatalf("step %d: %d ranges, want %d", i, len(got), len(st.want))
		}
		for c, r := range st.want {
			if got[c] != r {
				t.Fatalf("step %d: consumer %d owns %v, want %v", i, c.seq, got[c], r)
			}
			if a.pick(r.from) != c || a.pick(r.to) != c {
				t.Fatalf("step %d: pick at the bounds of %v is not consumer %d", i, r, c.seq)
			}
		}
	}
}

// TestKeySharedScript drives a Key_Shared subscription through joins and
// leaves while checking after every step that no key is unacknowledged on
// two consumers and that each key's offsets arrive in order.
func TestKeySharedScript(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("device-%d", i)
	}
	add := func(n int) {
		for i := 0; i < n; i++ {
			src.add(keys[i%len(keys)])
		}
	}
	add(64)
	a, b, c := &fakeConsumer{name: "a"}, &fakeConsumer{name: "b"}, &fakeConsumer{name: "c"}
	opts := SubscribeOptions{Type: KeyShared, Initial: Earliest, KeySharedAutoSplit: true}
	s := subscribe(t, m, src, opts, a)
	s.Flow(a, 40)
	waitCount(t, a, 40)
	settle(t, s)

	// b joins while a holds 40 unacked: b's join point is 40, so b gets
	// nothing of offsets >= 40 until everything below 40 is acked.
	subscribe(t, m, src, opts, b)
	s.Flow(b, 100)
	s.Flow(a, 100)
	settle(t, s)
	checkInvariants(t, s)
	for _, off := range b.offsets() {
		t.Fatalf("b got offset %d before its join point was acked", off)
	}
	lastByKey := map[string]int64{}
	checkOrder := func(fc *fakeConsumer) {
		for _, d := range fc.deliveries() {
			k := string(d.Record.Key)
			if last, ok := lastByKey[k]; ok && d.Offset <= last && d.RedeliveryCount == 0 {
				t.Fatalf("key %s: offset %d after %d", k, d.Offset, last)
			}
			lastByKey[k] = max(lastByKey[k], d.Offset)
		}
	}
	// a's new deliveries are only of keys still in a's range.
	for _, d := range a.deliveries()[40:] {
		if s.sel.pick(keySlot(d.Record.Key)).c != a {
			t.Fatalf("a got offset %d of a key it no longer owns", d.Offset)
		}
	}
	checkOrder(a)
	// a acks everything it has: b is released.
	s.Ack(context.Background(), a, a.take(), false)
	testkit.Eventually(t, 5*time.Second, "all 64 delivered", func() bool { return accounted(s, 64) })
	settle(t, s)
	checkInvariants(t, s)
	checkOrder(b)
	checkOrder(a)
	for _, d := range b.deliveries() {
		if s.sel.pick(keySlot(d.Record.Key)).c != b {
			t.Fatalf("b got offset %d of a key it does not own", d.Offset)
		}
	}

	// c joins; a leaves with unacked messages: they go to whoever owns
	// their keys now, once nobody else holds those keys.
	s.Ack(context.Background(), b, b.take(), false)
	subscribe(t, m, src, opts, c)
	s.Flow(c, 100)
	add(32)
	testkit.Eventually(t, 5*time.Second, "96 entries read", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.readPos == 96
	})

	settle(t, s)
	checkInvariants(t, s)
	aHeld := a.take()
	s.Remove(a)
	s.Ack(context.Background(), b, b.take(), false)
	s.Ack(context.Background(), c, c.take(), false)
	testkit.Eventually(t, 5*time.Second, "everything acked", func() bool {
		s.Ack(context.Background(), b, b.take(), false)
		s.Ack(context.Background(), c, c.take(), false)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cur.markDelete == 95
	})

	checkInvariants(t, s)
	_ = aHeld
}

// accounted reports whether every offset below n is acked or pending.
func accounted(s *Subscription, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for off := int64(0); off < n; off++ {
		if !s.owner.Has(off) && !s.cur.acked(off) {
			return false
		}
	}
	return true
}

// TestKeySharedNoKeyOnTwo: a slot pending on one consumer is not given to
// another even when the ranges move.
func TestKeySharedNoKeyOnTwo(t *testing.T) {
	m := newTestManager(t, nil)
	src := &fakeSource{}
	src.add("k", "k", "k", "k")
	a, b := &fakeConsumer{name: "a"}, &fakeConsumer{name: "b"}
	opts := SubscribeOptions{Type: KeyShared, Initial: Earliest, KeySharedAutoSplit: true}
	s := subscribe(t, m, src, opts, a)
	s.Flow(a, 2)
	waitCount(t, a, 2)
	subscribe(t, m, src, opts, b)
	s.Flow(b, 10)
	slot := keySlot([]byte("k"))
	owner := s.sel.pick(slot).c
	settle(t, s)
	if owner == Consumer(b) && len(b.offsets()) != 0 {
		t.Fatalf("b got %v while a holds the key", b.offsets())
	}
	// a nacks one and acks the other: the key is free, everything goes to
	// its owner in order.
	s.Redeliver(a, []int64{1})
	s.Ack(context.Background(), a, []int64{0}, false)
	s.Flow(a, 10)
	want := []int64{1, 2, 3}
	var got []int64
	testkit.Eventually(t, 5*time.Second, "rest of the key", func() bool {
		if owner == Consumer(a) {
			got = a.offsets()[2:]
		} else {
			got = b.offsets()
		}
		return len(got) >= 3
	})

	if !slices.Equal(got, want) {
		t.Fatalf("key owner got %v, want %v", got, want)
	}
	checkInvariants(t, s)
}
