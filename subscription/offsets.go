package subscription

import (
	"fmt"
	"iter"
	"strings"
)

// offsetMap is a map from offset to V kept as a slice of (offset, value)
// pairs sorted by offset: the per-offset state of a subscription (pending,
// owner, replay, held, redeliveries) without a Go map per offset.
//
// Invariants:
//   - es is sorted by key (the offset); every key appears at most once.
//   - A deleted pair stays in place as a tombstone (its offset stored as
//     ^offset, negative, so the key order is kept and no flag is needed)
//     until tombstones are more than half of es; then es is compacted, and
//     its backing array shrunk when it is mostly empty (down to
//     offsetMapKeep pairs). The memory held is therefore at most 8 pairs
//     per live pair, or offsetMapKeep pairs (not the offset span, not the
//     history), whatever the deletion pattern.
//   - Offsets are >= 0 (Put panics otherwise: they come from the Source).
//
// Outline: offsets are mostly added in increasing order (dispatch), so Put
// appends; a smaller offset (a redelivery, an out-of-order requeue) is a
// binary search and an insertion in the middle, bounded by the caps on
// what a subscription holds. Get and Delete are binary searches. All
// visits live pairs in offset order; the map must not change meanwhile.
type offsetMap[V any] struct {
	es   []offsetPair[V]
	live int // pairs that are not tombstones
}

type offsetPair[V any] struct {
	off int64 // ^off (< 0) for a tombstone
	v   V
}

// key is the offset of pair i, tombstone or not.
func (m *offsetMap[V]) key(i int) int64 {
	if k := m.es[i].off; k >= 0 {
		return k
	}
	return ^m.es[i].off
}

// find returns the index of off's pair (live or tombstone) and whether it
// exists; when not, the index where it would go.
func (m *offsetMap[V]) find(off int64) (int, bool) {
	n := len(m.es)
	if n == 0 {
		return 0, false
	}
	if last := m.key(n - 1); off >= last { // the common case: at the end
		return n - 1 + boolInt(off > last), off == last
	}
	lo, hi := 0, n-1 // key(hi) > off
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.key(mid) < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, m.key(lo) == off
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Len is the number of live pairs.
func (m *offsetMap[V]) Len() int { return m.live }

// Get returns off's value.
func (m *offsetMap[V]) Get(off int64) (V, bool) {
	if off >= 0 {
		if i, ok := m.find(off); ok && m.es[i].off >= 0 {
			return m.es[i].v, true
		}
	}
	var zero V
	return zero, false
}

// Has reports whether off is in the map.
func (m *offsetMap[V]) Has(off int64) bool {
	_, ok := m.Get(off)
	return ok
}

// Put sets off's value.
func (m *offsetMap[V]) Put(off int64, v V) {
	if off < 0 {
		panic("subscription: negative offset in offsetMap")
	}
	i, ok := m.find(off)
	switch {
	case ok:
		if m.es[i].off < 0 {
			m.es[i].off = off
			m.live++
		}
		m.es[i].v = v
		return
	case i == len(m.es):
		m.es = append(m.es, offsetPair[V]{off, v})
	default:
		m.es = append(m.es, offsetPair[V]{})
		copy(m.es[i+1:], m.es[i:])
		m.es[i] = offsetPair[V]{off, v}
	}
	m.live++
}

// Ptr returns a pointer to off's value, adding it (zero) if absent; valid
// until the next Put or Delete.
func (m *offsetMap[V]) Ptr(off int64) *V {
	i, ok := m.find(off)
	if !ok || m.es[i].off < 0 {
		var zero V
		m.Put(off, zero)
		i, _ = m.find(off)
	}
	return &m.es[i].v
}

// Update sets the value of each offset of offs (strictly increasing, >=
// 0) to f(i, old, present) in one merge pass, so that moving many offsets
// below the end (a consumer's whole pending set to the replay set) costs
// O(len(offs) + Len()), not an insertion each.
func (m *offsetMap[V]) Update(offs []int64, f func(i int, old V, ok bool) V) {
	if len(offs) == 0 {
		return
	}
	if len(offs) <= 8 || len(m.es) == 0 || offs[0] > m.key(len(m.es)-1) {
		for i, off := range offs {
			old, ok := m.Get(off)
			m.Put(off, f(i, old, ok))
		}
		return
	}
	out := make([]offsetPair[V], 0, m.live+len(offs))
	j := 0
	for i, off := range offs {
		if off < 0 || (i > 0 && off <= offs[i-1]) {
			panic("subscription: offsetMap.Update offsets not increasing")
		}
		for ; j < len(m.es) && m.key(j) < off; j++ {
			if m.es[j].off >= 0 {
				out = append(out, m.es[j])
			}
		}
		var old V
		ok := false
		if j < len(m.es) && m.key(j) == off {
			if m.es[j].off >= 0 {
				old, ok = m.es[j].v, true
			}
			j++
		}
		out = append(out, offsetPair[V]{off, f(i, old, ok)})
	}
	for ; j < len(m.es); j++ {
		if m.es[j].off >= 0 {
			out = append(out, m.es[j])
		}
	}
	m.es, m.live = out, len(out)
}

// Delete removes off and returns its value.
func (m *offsetMap[V]) Delete(off int64) (V, bool) {
	var zero V
	if off < 0 {
		return zero, false
	}
	i, ok := m.find(off)
	if !ok || m.es[i].off < 0 {
		return zero, false
	}
	v := m.es[i].v
	m.es[i] = offsetPair[V]{off: ^off} // drop the value's references
	m.live--
	switch {
	case m.live == 0:
		m.es = m.es[:0]
		m.shrink()
	case i == len(m.es)-1:
		m.es = m.es[:i] // trailing tombstones need no compaction
		m.trimTail()
	case 2*(len(m.es)-m.live) > len(m.es):
		m.compact()
	}
	return v, true
}

// trimTail drops tombstones at the end.
func (m *offsetMap[V]) trimTail() {
	n := len(m.es)
	for n > 0 && m.es[n-1].off < 0 {
		n--
	}
	m.es = m.es[:n]
	if 2*(len(m.es)-m.live) > len(m.es) {
		m.compact()
		return
	}
	m.shrink()
}

// compact drops every tombstone.
func (m *offsetMap[V]) compact() {
	j := 0
	for _, e := range m.es {
		if e.off >= 0 {
			m.es[j] = e
			j++
		}
	}
	clear(m.es[j:])
	m.es = m.es[:j]
	m.shrink()
}

// offsetMapKeep is the capacity (pairs) an offsetMap keeps however empty
// it gets, so that a consumer acking as it goes does not reallocate its
// array at each empty moment.
const offsetMapKeep = 1024

// shrink gives back a backing array at most a quarter used (beyond
// offsetMapKeep).
func (m *offsetMap[V]) shrink() {
	if c := cap(m.es); c > offsetMapKeep && 4*len(m.es) < c {
		es := make([]offsetPair[V], len(m.es), 2*len(m.es))
		copy(es, m.es)
		m.es = es
	}
}

// Clear removes every pair.
func (m *offsetMap[V]) Clear() {
	clear(m.es)
	m.es = m.es[:0]
	m.live = 0
	m.shrink()
}

// All yields the live pairs in offset order; the map must not change
// during the loop (collect first).
func (m *offsetMap[V]) All() iter.Seq2[int64, V] {
	return func(yield func(int64, V) bool) {
		for _, e := range m.es {
			if e.off >= 0 && !yield(e.off, e.v) {
				return
			}
		}
	}
}

// String formats the live pairs like a map (for test logs).
func (m *offsetMap[V]) String() string {
	var b strings.Builder
	b.WriteString("map[")
	for off, v := range m.All() {
		if b.Len() > 4 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%v", off, v)
	}
	b.WriteByte(']')
	return b.String()
}
