package subscription

import "sort"

// autoSplit is Key_Shared's auto-split hash-range selector, as the Pulsar
// broker's HashRangeAutoSplitStickyKeyConsumerSelector behaves.
//
// Invariants: the ranges partition the slots [0, hashSlots) exactly, every
// range belongs to exactly one consumer and every consumer owns exactly one
// range, so a key (a slot) is never assigned to two consumers at once.
//
// The first consumer owns everything. A joining consumer takes the lower
// half of the biggest range (the first one when several are equally big); a
// leaving consumer's range goes to the consumer owning the next range above
// it, or, for the top range, to the one below it.
type autoSplit struct {
	ends []int32          // sorted inclusive upper bounds of the ranges
	own  []*consumerState // own[i] owns (ends[i-1], ends[i]]
}

func (a *autoSplit) add(c *consumerState) {
	if len(a.ends) == 0 {
		a.ends, a.own = []int32{hashSlots - 1}, []*consumerState{c}
		return
	}
	best, size := 0, int32(-1)
	for i, end := range a.ends {
		if n := end - a.start(i) + 1; n > size {
			best, size = i, n
		}
	}
	if size < 2 {
		// More consumers than slots: the newcomer owns nothing.
		return
	}
	mid := a.start(best) + size/2 - 1
	a.ends = append(a.ends, 0)
	a.own = append(a.own, nil)
	copy(a.ends[best+1:], a.ends[best:])
	copy(a.own[best+1:], a.own[best:])
	a.ends[best], a.own[best] = mid, c
}

func (a *autoSplit) start(i int) int32 {
	if i == 0 {
		return 0
	}
	return a.ends[i-1] + 1
}

func (a *autoSplit) remove(c *consumerState) {
	for i, o := range a.own {
		if o != c {
			continue
		}
		switch {
		case len(a.own) == 1:
			a.ends, a.own = nil, nil
		case i == len(a.own)-1:
			// Top range: the consumer below extends up to the top.
			a.ends[i-1] = a.ends[i]
			a.ends, a.own = a.ends[:i], a.own[:i]
		default:
			// The next range above extends down to this range's start.
			a.ends = append(a.ends[:i], a.ends[i+1:]...)
			a.own = append(a.own[:i], a.own[i+1:]...)
		}
		return
	}
}

// pick returns the consumer owning slot, nil if there is none.
func (a *autoSplit) pick(slot int32) *consumerState {
	i := sort.Search(len(a.ends), func(i int) bool { return a.ends[i] >= slot })
	if i == len(a.ends) {
		return nil
	}
	return a.own[i]
}
