package subscription

import (
	"slices"
	"sort"
)

// Cursor is a subscription's durable position: the mark-delete offset (last
// offset of the acknowledged prefix; -1 = none) and the individually
// acknowledged [from,to) ranges above it.
type Cursor struct {
	MarkDelete int64
	Acked      [][2]int64
}

// DefaultMaxAckedRanges bounds the individually acknowledged ranges of a
// cursor by default (Caps.MaxAckedRanges, the cloud's
// pulsar.max_acked_ranges)
// (Pulsar's managedLedgerMaxUnackedRangesToPersist has the same default),
// in memory and persisted: an individual ack that would open one more
// range (out of order, not adjacent to an acknowledged range) is refused
// with ErrTooMany, and the message stays unacknowledged (it is delivered
// again after a reconnect or a redelivery request) — an ack that extends
// or joins ranges is always taken. A cursor loaded with more (written by
// an older version) keeps them; cursor() persists the lowest of them.
const DefaultMaxAckedRanges = 10000

// opensRange reports whether acknowledging off (not yet acknowledged)
// would add a range rather than extend or join existing ones.
func (a *ackState) opensRange(off int64) bool {
	if off == a.markDelete+1 {
		return false
	}
	i := sort.Search(len(a.ranges), func(i int) bool { return a.ranges[i][1] >= off })
	return i == len(a.ranges) || (a.ranges[i][1] != off && a.ranges[i][0] != off+1)
}

// ackState is the in-memory cursor.
//
// Invariants: ranges are sorted, non-empty, disjoint and non-adjacent, and
// every range starts above markDelete+1 (a range starting at markDelete+1 is
// folded into markDelete at once).
type ackState struct {
	markDelete int64
	ranges     [][2]int64
	maxRanges  int // the subscription's cap on ranges; 0 = DefaultMaxAckedRanges
}

func newAckState(c Cursor) ackState {
	a := ackState{markDelete: max(c.MarkDelete, -1)}
	for _, r := range c.Acked {
		a.addRange(max(r[0], a.markDelete+1), r[1])
	}
	return a
}

// acked reports whether off is acknowledged.
func (a *ackState) acked(off int64) bool {
	if off <= a.markDelete {
		return true
	}
	i := sort.Search(len(a.ranges), func(i int) bool { return a.ranges[i][1] > off })
	return i < len(a.ranges) && a.ranges[i][0] <= off
}

// ack acknowledges off individually; it reports whether anything changed.
func (a *ackState) ack(off int64) bool {
	if off < 0 || a.acked(off) {
		return false
	}
	a.addRange(off, off+1)
	return true
}

// addRange acknowledges [from,to), from > markDelete.
func (a *ackState) addRange(from, to int64) {
	if to <= from {
		return
	}
	i := sort.Search(len(a.ranges), func(i int) bool { return a.ranges[i][1] >= from })
	j := i
	for j < len(a.ranges) && a.ranges[j][0] <= to {
		from, to = min(from, a.ranges[j][0]), max(to, a.ranges[j][1])
		j++
	}
	if i == 0 && from == a.markDelete+1 {
		// The acknowledged prefix grows (acks in order: no range at all).
		a.markDelete = to - 1
		a.ranges = a.ranges[j:]
		return
	}
	// In place: ranges[i:j] become one (no allocation unless it grows).
	a.ranges = slices.Replace(a.ranges, i, j, [2]int64{from, to})
}

// ackUpTo acknowledges every offset <= off (cumulative ack).
func (a *ackState) ackUpTo(off int64) bool {
	if off <= a.markDelete {
		return false
	}
	a.markDelete = off
	i := 0
	for i < len(a.ranges) && a.ranges[i][1]-1 <= off {
		i++
	}
	a.ranges = a.ranges[i:]
	if len(a.ranges) > 0 && a.ranges[0][0] <= off+1 {
		a.markDelete = a.ranges[0][1] - 1
		a.ranges = a.ranges[1:]
	}
	return true
}

// cursor returns a copy to persist, bounded to max ranges (the
// subscription's Caps.MaxAckedRanges; 0 = DefaultMaxAckedRanges).
func (a *ackState) cursor() Cursor {
	max := a.maxRanges
	if max <= 0 {
		max = DefaultMaxAckedRanges
	}
	n := min(len(a.ranges), max)
	return Cursor{MarkDelete: a.markDelete, Acked: append([][2]int64(nil), a.ranges[:n]...)}
}
