// Package wire is the stored form of a subscription cursor's
// individually acknowledged ranges (the cursor table's acked column). Its
// decoder checks its input and never panics; it is apart from package
// subscription so that it is fuzzed in a small test binary
// (subscription's tests link the table stack).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrBadAckedRanges is wrapped by DecodeAckedRanges.
var ErrBadAckedRanges = errors.New("bad acked ranges")

// EncodeAckedRanges encodes the ranges above markDelete as the cursor
// table's acked column: uvarint count, then per range uvarint gap from the
// previous range's end (from markDelete+1 for the first) and uvarint length.
func EncodeAckedRanges(markDelete int64, ranges [][2]int64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ranges)))
	prev := markDelete + 1
	for _, r := range ranges {
		b = binary.AppendUvarint(b, uint64(r[0]-prev))
		b = binary.AppendUvarint(b, uint64(r[1]-r[0]))
		prev = r[1]
	}
	return b
}

// DecodeAckedRanges is the inverse of EncodeAckedRanges. It refuses
// anything the encoder cannot produce from a valid cursor: empty or
// adjacent ranges (other than the first, which may start at markDelete+1 in
// cursors written by a hand), overflow, trailing bytes.
func DecodeAckedRanges(markDelete int64, b []byte) ([][2]int64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: count", ErrBadAckedRanges)
	}
	b = b[k:]
	if n > uint64(len(b))/2 { // every range takes at least two bytes
		return nil, fmt.Errorf("%w: %d ranges in %d bytes", ErrBadAckedRanges, n, len(b))
	}
	if markDelete < -1 {
		return nil, fmt.Errorf("%w: mark-delete %d", ErrBadAckedRanges, markDelete)
	}
	out := make([][2]int64, 0, n)
	prev := markDelete + 1
	for i := uint64(0); i < n; i++ {
		gap, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return nil, fmt.Errorf("%w: range %d gap", ErrBadAckedRanges, i)
		}
		b = b[k1:]
		length, k2 := binary.Uvarint(b)
		if k2 <= 0 {
			return nil, fmt.Errorf("%w: range %d length", ErrBadAckedRanges, i)
		}
		b = b[k2:]
		if length == 0 || (gap == 0 && i > 0) {
			return nil, fmt.Errorf("%w: range %d empty or adjacent", ErrBadAckedRanges, i)
		}
		if gap > uint64(math.MaxInt64-prev) || length > uint64(math.MaxInt64-prev-int64(gap)) {
			return nil, fmt.Errorf("%w: range %d overflows", ErrBadAckedRanges, i)
		}
		from := prev + int64(gap)
		to := from + int64(length)
		out = append(out, [2]int64{from, to})
		prev = to
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadAckedRanges, len(b))
	}
	return out, nil
}
