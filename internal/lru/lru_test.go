package lru

import "testing"

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	c := New(10)
	c.Add("a", 1, 4)
	c.Add("b", 2, 4)
	if _, ok := c.Get("a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.Add("c", 3, 4) // 12 > 10: b goes
	if _, ok := c.Get("b"); ok {
		t.Fatal("b kept past the cap")
	}
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("a = %v %v", v, ok)
	}
	if c.Size() != 8 || c.Len() != 2 {
		t.Fatalf("size %d len %d", c.Size(), c.Len())
	}
	c.Add("a", 9, 2) // replace: size accounted once
	if c.Size() != 6 {
		t.Fatalf("size after replace %d", c.Size())
	}
	c.Add("huge", 0, 100) // larger than the cap: kept alone
	if c.Len() != 1 || c.Size() != 100 {
		t.Fatalf("len %d size %d", c.Len(), c.Size())
	}
}
