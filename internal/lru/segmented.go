package lru

import (
	"container/list"
	"sync"
)

// Segmented is a size-bounded cache that a long scan cannot flush: a
// segmented LRU whose promotion counts distinct readers.
//
//   - An item enters the probation segment, remembering the reader that
//     added it. A hit by that same reader only refreshes it there (a
//     sequential scan reads each item many times in a row, all from one
//     reader); a hit by another reader moves it to the protected segment.
//   - The protected segment holds at most ProtectedShare (3/4) of the
//     maximum; beyond it, its least recently used items go back to the
//     front of probation.
//   - Eviction takes probation's least recently used items first, and
//     protected ones only when probation is empty.
//
// So a reader scanning more than the cache cycles through probation, and
// the items several readers share (the hot tail that tailing consumers
// read) stay. Except that the most recently added item is always kept,
// the items' sizes sum to at most the maximum.
type Segmented struct {
	mu          sync.Mutex
	max, pmax   int64
	size, psize int64
	prob, prot  *list.List
	items       map[any]*list.Element
}

// ProtectedShare is the share of a Segmented cache's bytes that items
// read by more than one reader may hold: numerator over 4.
const ProtectedShare = 3

type segItem struct {
	key       any
	val       any
	size      int64
	reader    any
	protected bool
}

// NewSegmented returns a cache holding items whose sizes sum to at most max.
func NewSegmented(max int64) *Segmented {
	return &Segmented{max: max, pmax: max / 4 * ProtectedShare, prob: list.New(), prot: list.New(), items: map[any]*list.Element{}}
}

// Get returns the value of k for reader (any comparable identity of
// whoever reads: a connection), refreshing it, and promoting it to the
// protected segment if another reader added it.
func (c *Segmented) Get(k, reader any) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return nil, false
	}
	it := el.Value.(*segItem)
	switch {
	case it.protected:
		c.prot.MoveToFront(el)
	case it.reader == reader:
		c.prob.MoveToFront(el)
	default:
		c.prob.Remove(el)
		it.protected = true
		c.items[k] = c.prot.PushFront(it)
		c.psize += it.size
		for c.psize > c.pmax && c.prot.Len() > 1 {
			c.demote(c.prot.Back())
		}
	}
	return it.val, true
}

// demote moves a protected item to the front of probation.
func (c *Segmented) demote(el *list.Element) {
	it := el.Value.(*segItem)
	c.prot.Remove(el)
	c.psize -= it.size
	it.protected = false
	c.items[it.key] = c.prob.PushFront(it)
}

// Add stores v under k for reader (replacing any value) in probation, then
// evicts until the sizes fit.
func (c *Segmented) Add(k, v any, size int64, reader any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.remove(el)
	}
	c.items[k] = c.prob.PushFront(&segItem{key: k, val: v, size: size, reader: reader})
	c.size += size
	for c.size > c.max && c.prob.Len()+c.prot.Len() > 1 {
		if c.prob.Len() > 1 { // the newest, at the front, stays
			c.remove(c.prob.Back())
		} else {
			c.remove(c.prot.Back())
		}
	}
}

func (c *Segmented) remove(el *list.Element) {
	it := el.Value.(*segItem)
	if it.protected {
		c.prot.Remove(el)
		c.psize -= it.size
	} else {
		c.prob.Remove(el)
	}
	delete(c.items, it.key)
	c.size -= it.size
}

// Size is the sum of the items' sizes; Protected that of the protected
// segment's.
func (c *Segmented) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// Protected is the sum of the protected items' sizes.
func (c *Segmented) Protected() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.psize
}

// Len is the number of items.
func (c *Segmented) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}
