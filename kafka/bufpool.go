package kafka

import (
	"math/bits"
	"sync"
)

// Response buffers. A connection keeps its own buffer up to
// keepBufBytes; a larger one (a fetch response of many batches) goes
// back, once written, to a pool of its size class, from which the next
// large response of any connection takes one. Classes are powers of two
// from 2 MiB to 64 MiB; larger buffers are left to the garbage
// collector. A sync.Pool retains nothing across garbage collections
// beyond its victim cache, so idle buffers do not accumulate.
const (
	keepBufBytes = 1 << 20
	minBufClass  = 21 // 2 MiB
	maxBufClass  = 26 // 64 MiB
)

var bufPools [maxBufClass - minBufClass + 1]sync.Pool

// getBuf returns an empty buffer of capacity at least n (n > keepBufBytes).
func getBuf(n int) []byte {
	c := max(bits.Len(uint(n-1)), minBufClass) // smallest class >= n
	if c > maxBufClass {
		return make([]byte, 0, n)
	}
	if b, ok := bufPools[c-minBufClass].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<c)
}

// putBuf gives b back to the pool of the largest class it covers.
func putBuf(b []byte) {
	c := bits.Len(uint(cap(b))) - 1 // largest class <= cap
	if c < minBufClass || c > maxBufClass {
		return
	}
	b = b[:0]
	bufPools[c-minBufClass].Put(&b)
}
