package lru

import "testing"

// A scan of ten times the cache by one reader, each item read many times
// in a row as a sequential consumer does, does not evict the items two
// other readers share; without the segments (plain LRU) it does.
func TestSegmentedScanResistant(t *testing.T) {
	const max, item = 100, 5
	c := NewSegmented(max)
	plain := New(max)
	hot := []string{"tail-1", "tail-2", "tail-3"}
	for _, k := range hot {
		c.Add(k, k, item, "tailer-a")
		plain.Add(k, k, item)
		if _, ok := c.Get(k, "tailer-b"); !ok { // a second tailer reads it: protected
			t.Fatalf("%s missing", k)
		}
	}
	if c.Protected() != 3*item {
		t.Fatalf("protected %d bytes, want %d", c.Protected(), 3*item)
	}
	for i := range 10 * max / item {
		k := i
		c.Add(k, k, item, "scanner")
		plain.Add(k, k, item)
		for range 16 {
			c.Get(k, "scanner")
			plain.Get(k)
		}
		if c.Size() > max {
			t.Fatalf("size %d over %d", c.Size(), max)
		}
	}
	for _, k := range hot {
		if v, ok := c.Get(k, "tailer-a"); !ok || v != k {
			t.Fatalf("%s evicted by the scan", k)
		}
		if _, ok := plain.Get(k); ok {
			t.Fatalf("plain LRU kept %s: the test does not scan enough", k)
		}
	}
	// The scan still had the rest of the cache: its last items are there.
	if _, ok := c.Get(10*max/item-1, "scanner"); !ok {
		t.Fatal("the scan's newest item is not cached")
	}
}

// The protected segment is bounded: items beyond its share go back to
// probation and are evicted from there, and the newest item always stays.
func TestSegmentedProtectedBounded(t *testing.T) {
	c := NewSegmented(100)
	for i := range 50 {
		c.Add(i, i, 10, "a")
		c.Get(i, "b")
		if c.Protected() > 75 || c.Size() > 100 {
			t.Fatalf("after %d: protected %d, size %d", i, c.Protected(), c.Size())
		}
	}
	if _, ok := c.Get(49, "c"); !ok {
		t.Fatal("newest item evicted")
	}
	c.Add("big", 0, 1000, "a") // larger than the cache: kept alone
	if c.Len() != 1 || c.Size() != 1000 {
		t.Fatalf("after an oversize item: %d items, %d bytes", c.Len(), c.Size())
	}
	c.Add("big", 1, 10, "a") // replaced
	if v, _ := c.Get("big", "a"); v != 1 || c.Size() != 10 {
		t.Fatalf("replace: %v, size %d", v, c.Size())
	}
}
