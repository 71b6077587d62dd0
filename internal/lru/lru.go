// Package lru is a size-bounded least-recently-used cache, safe for
// concurrent use. The table reader caches decoded row groups and Parquet
// footers in it, and the Kafka consume side its encoded record batches;
// each bounds its cache by its own measure of size (bytes, or 1 per item).
package lru

import (
	"container/list"
	"sync"
)

// Cache is a least-recently-used cache whose items' sizes sum to at most
// its maximum, except that the most recently added item is always kept.
type Cache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	ll    *list.List
	items map[any]*list.Element
}

type item struct {
	key  any
	val  any
	size int64
}

// New returns a cache holding items whose sizes sum to at most max.
func New(max int64) *Cache { return &Cache{max: max, ll: list.New(), items: map[any]*list.Element{}} }

// Get returns the value of k, marking it most recently used.
func (c *Cache) Get(k any) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*item).val, true
	}
	return nil, false
}

// Add stores v under k (replacing any value), then evicts the least
// recently used items until the sizes fit.
func (c *Cache) Add(k, v any, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.size -= el.Value.(*item).size
		c.ll.Remove(el)
	}
	c.items[k] = c.ll.PushFront(&item{k, v, size})
	c.size += size
	for c.size > c.max && c.ll.Len() > 1 {
		el := c.ll.Back()
		it := el.Value.(*item)
		c.ll.Remove(el)
		delete(c.items, it.key)
		c.size -= it.size
	}
}

// Len is the number of items; Size the sum of their sizes.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Size is the sum of the items' sizes.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
