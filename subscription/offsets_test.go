package subscription

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// checkOffsetMap compares m with the reference ref and checks m's
// invariants: keys strictly increasing, the live count, tombstones at most
// half, and the backing array bounded by the live pairs.
func checkOffsetMap(t *testing.T, step string, m *offsetMap[int32], ref map[int64]int32) {
	t.Helper()
	if m.Len() != len(ref) {
		t.Fatalf("%s: Len %d, reference %d", step, m.Len(), len(ref))
	}
	live := 0
	for i := range m.es {
		if i > 0 && m.key(i) <= m.key(i-1) {
			t.Fatalf("%s: keys out of order at %d: %d after %d", step, i, m.key(i), m.key(i-1))
		}
		if m.es[i].off >= 0 {
			live++
		}
	}
	if live != m.live {
		t.Fatalf("%s: %d live pairs, counted %d", step, live, m.live)
	}
	if dead := len(m.es) - live; 2*dead > len(m.es) {
		t.Fatalf("%s: %d tombstones of %d pairs", step, dead, len(m.es))
	}
	if c := cap(m.es); c > max(offsetMapKeep, 8*m.live) {
		t.Fatalf("%s: capacity %d for %d live pairs", step, c, m.live)
	}
	var got []int64
	for off, v := range m.All() {
		if rv, ok := ref[off]; !ok || rv != v {
			t.Fatalf("%s: All gave %d=%d, reference %d (%v)", step, off, v, rv, ok)
		}
		got = append(got, off)
	}
	want := slices.Sorted(func(yield func(int64) bool) {
		for off := range ref {
			if !yield(off) {
				return
			}
		}
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%s: All gave %d offsets, reference %d", step, len(got), len(want))
	}
}

// TestOffsetMapAgainstMap drives offsetMap and a Go map with the same
// random operations in the patterns a subscription makes: offsets
// dispatched in increasing order, acked at once, every other one acked
// (the rest late), the first never acked, redeliveries inserted in the
// middle (out of order), random deletes, lookups of absent and negative
// offsets, early-stopped ranges, clears.
func TestOffsetMapAgainstMap(t *testing.T) {
	patterns := []string{"in-order", "every-other", "first-never", "random", "redeliver"}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, p := range patterns {
			t.Run(fmt.Sprintf("%s/%d", p, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				var m offsetMap[int32]
				ref := map[int64]int32{}
				next := int64(rng.IntN(3))
				del := func(off int64) {
					v, ok := m.Delete(off)
					rv, rok := ref[off]
					if ok != rok || v != rv {
						t.Fatalf("Delete(%d) = %d,%v, reference %d,%v", off, v, ok, rv, rok)
					}
					delete(ref, off)
				}
				for step := 0; step < 1000; step++ {
					switch r := rng.IntN(100); {
					case r < 40: // dispatch a run of new offsets
						for range 1 + rng.IntN(20) {
							v := rng.Int32()
							m.Put(next, v)
							ref[next] = v
							next++
						}
					case r < 75: // acks in the pattern's way
						offs := slices.Sorted(func(yield func(int64) bool) {
							for off := range ref {
								if !yield(off) {
									return
								}
							}
						})
						for range 1 + rng.IntN(20) {
							if len(offs) == 0 {
								break
							}
							var off int64
							switch p {
							case "in-order":
								off = offs[0]
							case "every-other":
								off = offs[rng.IntN(len(offs))]
								if off%2 == 1 && rng.IntN(10) > 0 {
									continue // the odd ones mostly wait
								}
							case "first-never":
								if len(offs) == 1 {
									continue
								}
								off = offs[1+rng.IntN(min(len(offs)-1, 5))]
							default:
								off = offs[rng.IntN(len(offs))]
							}
							del(off)
							offs = slices.DeleteFunc(offs, func(o int64) bool { return o == off })
						}
					case r < 85: // out of order: (re)insert below the end
						if next == 0 {
							break
						}
						off := rng.Int64N(next)
						v := rng.Int32()
						m.Put(off, v)
						ref[off] = v
					case r < 87: // a batch merged in (a consumer's pending set requeued)
						var offs []int64
						for off := rng.Int64N(next + 1); off < next+5 && len(offs) < 40; off += 1 + rng.Int64N(3) {
							offs = append(offs, off)
						}
						add := rng.Int32()
						m.Update(offs, func(i int, old int32, ok bool) int32 {
							if _, rok := ref[offs[i]]; rok != ok || old != ref[offs[i]] {
								t.Fatalf("Update(%d) saw %d,%v, reference %d,%v", offs[i], old, ok, ref[offs[i]], rok)
							}
							return old + add
						})
						for _, off := range offs {
							ref[off] += add
						}
						next = max(next, offs[len(offs)-1]+1)
					case r < 90: // a redelivery count
						off := rng.Int64N(next + 1)
						*m.Ptr(off)++
						ref[off]++
					case r < 97: // lookups, present, absent, negative
						for range 10 {
							off := rng.Int64N(next+10) - 5
							v, ok := m.Get(off)
							rv, rok := ref[off]
							if ok != rok || v != rv || m.Has(off) != rok {
								t.Fatalf("Get(%d) = %d,%v, reference %d,%v", off, v, ok, rv, rok)
							}
							if _, ok := m.Delete(-1 - off*off); ok {
								t.Fatalf("deleted a negative offset")
							}
						}
						// An early-stopped range sees the smallest offsets.
						k := rng.IntN(5)
						var first []int64
						for off := range m.All() {
							if len(first) == k {
								break
							}
							first = append(first, off)
						}
						sorted := slices.Sorted(func(yield func(int64) bool) {
							for off := range ref {
								if !yield(off) {
									return
								}
							}
						})
						if !slices.Equal(first, sorted[:min(k, len(sorted))]) {
							t.Fatalf("first %d: %v, reference %v", k, first, sorted[:min(k, len(sorted))])
						}
					case r < 98 && p == "redeliver":
						m.Clear()
						clear(ref)
					default: // delete absent offsets
						del(next + int64(rng.IntN(10)))
					}
					checkOffsetMap(t, fmt.Sprintf("step %d", step), &m, ref)
				}
			})
		}
	}
}

// TestOffsetMapMemory: whatever the acknowledgement pattern, offsetMap
// holds no more heap than a Go map of the same pairs (which also never
// gives memory back after its peak).
func TestOffsetMapMemory(t *testing.T) {
	const n = 50000
	patterns := map[string]func(off int64) bool{ // which offsets stay (unacknowledged)
		"every-other-acked": func(off int64) bool { return off%2 == 1 },
		"first-never-acked": func(off int64) bool { return off == 0 || off >= n-1000 },
		"one-in-ten-left":   func(off int64) bool { return off%10 == 3 },
		"none-acked":        func(off int64) bool { return true },
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for name, stays := range patterns {
		t.Run(name, func(t *testing.T) {
			// Each structure is filled in offset order and then acked in
			// offset order, as a dispatcher and its consumers do.
			h0 := heap()
			m := &offsetMap[int32]{}
			for off := int64(0); off < n; off++ {
				m.Put(off, int32(off))
			}
			for off := int64(0); off < n; off++ {
				if !stays(off) {
					m.Delete(off)
				}
			}
			h1 := heap()
			ref := map[int64]int32{}
			for off := int64(0); off < n; off++ {
				ref[off] = int32(off)
			}
			for off := int64(0); off < n; off++ {
				if !stays(off) {
					delete(ref, off)
				}
			}
			h2 := heap()
			if m.Len() != len(ref) {
				t.Fatalf("%d live, reference %d", m.Len(), len(ref))
			}
			dense, hashed := int64(h1)-int64(h0), int64(h2)-int64(h1)
			t.Logf("%d live of %d: offsetMap %d bytes (%.1f/live), map %d bytes (%.1f/live)", m.Len(), n,
				dense, float64(dense)/float64(m.Len()), hashed, float64(hashed)/float64(len(ref)))
			if dense > hashed {
				t.Errorf("offsetMap holds %d bytes, a map %d", dense, hashed)
			}
			runtime.KeepAlive(m)
			runtime.KeepAlive(ref)
		})
	}
}
