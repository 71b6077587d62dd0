package subscription

import (
	"encoding/binary"
	"math/bits"
)

// murmur3_32 is MurmurHash3's x86 32-bit variant (Austin Appleby's public
// definition) over b with the given seed.
func murmur3_32(b []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(b)
	for len(b) >= 4 {
		k := binary.LittleEndian.Uint32(b)
		b = b[4:]
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch len(b) {
	case 3:
		k ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(b[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// stickyKeyHash is Pulsar's Murmur3_32Hash.makeHash: seed 0, sign bit
// cleared (the broker keeps it a non-negative Java int).
func stickyKeyHash(key []byte) uint32 { return murmur3_32(key, 0) & 0x7fffffff }

// hashSlots is the Key_Shared hash range size (Pulsar's DEFAULT_RANGE_SIZE).
const hashSlots = 65536

// keySlot is the Key_Shared slot of a message key (nil = no key, which
// hashes as the empty key).
func keySlot(key []byte) int32 { return int32(stickyKeyHash(key) % hashSlots) }
