package subscription

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
)

// Cursor is a subscription's durable position: the mark-delete offset (last
// offset of the acknowledged prefix; -1 = none) and the individually
// acknowledged [from,to) ranges above it.
type Cursor struct {
	MarkDelete int64
	Acked      [][2]int64
}

// maxAckedRanges bounds the individually acknowledged ranges of a cursor
// (Pulsar's managedLedgerMaxUnackedRangesToPersist has the same default),
// in memory and persisted: an individual ack that would open one more
// range (out of order, not adjacent to an acknowledged range) is refused
// with ErrTooMany, and the message stays unacknowledged (it is delivered
// again after a reconnect or a redelivery request) — an ack that extends
// or joins ranges is always taken. A cursor loaded with more (written by
// an older version) keeps them; cursor() persists the lowest
// maxAckedRanges.
const maxAckedRanges = 10000

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
	a.ranges = append(a.ranges[:i], append([][2]int64{{from, to}}, a.ranges[j:]...)...)
	if a.ranges[0][0] == a.markDelete+1 {
		a.markDelete = a.ranges[0][1] - 1
		a.ranges = a.ranges[1:]
	}
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

// cursor returns a copy to persist, bounded to maxAckedRanges.
func (a *ackState) cursor() Cursor {
	n := min(len(a.ranges), maxAckedRanges)
	return Cursor{MarkDelete: a.markDelete, Acked: append([][2]int64(nil), a.ranges[:n]...)}
}

// errBadAckedRanges is wrapped by decodeAckedRanges.
var errBadAckedRanges = errors.New("bad acked ranges")

// encodeAckedRanges encodes the ranges above markDelete as the cursor
// table's acked column: uvarint count, then per range uvarint gap from the
// previous range's end (from markDelete+1 for the first) and uvarint length.
func encodeAckedRanges(markDelete int64, ranges [][2]int64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ranges)))
	prev := markDelete + 1
	for _, r := range ranges {
		b = binary.AppendUvarint(b, uint64(r[0]-prev))
		b = binary.AppendUvarint(b, uint64(r[1]-r[0]))
		prev = r[1]
	}
	return b
}

// decodeAckedRanges is the inverse of encodeAckedRanges. It refuses
// anything the encoder cannot produce from a valid cursor: empty or
// adjacent ranges (other than the first, which may start at markDelete+1 in
// cursors written by a hand), overflow, trailing bytes.
func decodeAckedRanges(markDelete int64, b []byte) ([][2]int64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: count", errBadAckedRanges)
	}
	b = b[k:]
	if n > uint64(len(b))/2 { // every range takes at least two bytes
		return nil, fmt.Errorf("%w: %d ranges in %d bytes", errBadAckedRanges, n, len(b))
	}
	if markDelete < -1 {
		return nil, fmt.Errorf("%w: mark-delete %d", errBadAckedRanges, markDelete)
	}
	out := make([][2]int64, 0, n)
	prev := markDelete + 1
	for i := uint64(0); i < n; i++ {
		gap, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return nil, fmt.Errorf("%w: range %d gap", errBadAckedRanges, i)
		}
		b = b[k1:]
		length, k2 := binary.Uvarint(b)
		if k2 <= 0 {
			return nil, fmt.Errorf("%w: range %d length", errBadAckedRanges, i)
		}
		b = b[k2:]
		if length == 0 || (gap == 0 && i > 0) {
			return nil, fmt.Errorf("%w: range %d empty or adjacent", errBadAckedRanges, i)
		}
		if gap > uint64(math.MaxInt64-prev) || length > uint64(math.MaxInt64-prev-int64(gap)) {
			return nil, fmt.Errorf("%w: range %d overflows", errBadAckedRanges, i)
		}
		from := prev + int64(gap)
		to := from + int64(length)
		out = append(out, [2]int64{from, to})
		prev = to
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadAckedRanges, len(b))
	}
	return out, nil
}
