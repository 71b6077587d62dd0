package kafka

import "testing"

func TestBufPoolClasses(t *testing.T) {
	for _, n := range []int{keepBufBytes + 1, 2 << 20, 2<<20 + 1, 5 << 20, 64 << 20} {
		b := getBuf(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("getBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		putBuf(append(b, 1, 2, 3))
		if b := getBuf(n); len(b) != 0 || cap(b) < n {
			t.Fatalf("getBuf(%d) after put: len %d cap %d", n, len(b), cap(b))
		}
	}
	// Beyond the largest class: allocated, never pooled.
	if b := getBuf(65 << 20); cap(b) < 65<<20 {
		t.Fatalf("getBuf(65 MiB): cap %d", cap(b))
	}
	putBuf(make([]byte, 0, 128<<20)) // dropped, not kept
	putBuf(make([]byte, 0, 100))     // below the classes: dropped
	// A buffer of 3 MiB serves the 2 MiB class, never a 4 MiB request.
	putBuf(make([]byte, 0, 3<<20))
	for range 4 {
		if b := getBuf(4 << 20); cap(b) < 4<<20 {
			t.Fatalf("getBuf(4 MiB) returned cap %d", cap(b))
		}
	}
}
