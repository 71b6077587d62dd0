package kbatch

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestVarintMatchesBinary: the reader's varint (with its one- and
// two-byte fast paths) decodes every one- and two-byte input, and random
// longer ones, as binary.Varint does, consuming the same bytes and
// failing on the same inputs.
func TestVarintMatchesBinary(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		want, n := binary.Varint(b)
		r := reader{b: b}
		got := r.varint()
		switch {
		case n <= 0 && !r.bad:
			t.Fatalf("% x: decoded %d, binary.Varint fails", b, got)
		case n > 0 && (r.bad || got != want || len(r.b) != len(b)-n):
			t.Fatalf("% x: %d with %d bytes left, want %d with %d", b, got, len(r.b), want, len(b)-n)
		}
	}
	check(nil)
	for a := range 256 {
		check([]byte{byte(a)})
		for b := range 256 {
			check([]byte{byte(a), byte(b)})
			check([]byte{byte(a), byte(b), 0x05})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		b := binary.AppendVarint(nil, int64(rng.Uint64()>>rng.IntN(64)))
		check(b)
		check(b[:len(b)-1])
	}
}
