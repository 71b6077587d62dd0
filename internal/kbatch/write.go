package kbatch

import (
	"encoding/binary"
	"hash/crc32"
)

// castagnoli is the CRC-32C table of the batch checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Writing a batch (the read side of the cloud's fetch encodes rows into
// batches from records in package kafka and from Parquet columns in
// internal/pqkafka): AppendHeader, then each record (VarintLen,
// NullableLen, AppendNullable for its fields), then Finish.

// AppendHeader appends the header of an uncompressed batch of n records
// with base offset base, CREATE_TIME timestamps baseTS..maxTS (ms) and no
// producer id, its length and CRC left for Finish.
func AppendHeader(dst []byte, base int64, n int, baseTS, maxTS int64) []byte {
	var hdr [HeaderLen]byte
	binary.BigEndian.PutUint64(hdr[0:], uint64(base))
	// [8:12] batch length and [17:21] crc: Finish; [12:16] leader epoch 0
	hdr[16] = 2 // magic
	// [21:23] attributes 0: no compression, create time
	binary.BigEndian.PutUint32(hdr[23:], uint32(n-1))
	binary.BigEndian.PutUint64(hdr[27:], uint64(baseTS))
	binary.BigEndian.PutUint64(hdr[35:], uint64(maxTS))
	binary.BigEndian.PutUint64(hdr[43:], ^uint64(0)) // producer id -1
	binary.BigEndian.PutUint16(hdr[51:], 0xffff)     // producer epoch -1
	binary.BigEndian.PutUint32(hdr[53:], 0xffffffff) // base sequence -1
	binary.BigEndian.PutUint32(hdr[57:], uint32(n))
	return append(dst, hdr[:]...)
}

// Finish sets the length and CRC of the batch b (from its first byte to
// the end of its last record).
func Finish(b []byte) {
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[CRCOffset:], crc32.Checksum(b[CRCStart:], castagnoli))
}

// AppendNullable appends b with its varint length, -1 for nil (null).
func AppendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// NullableLen is the length AppendNullable appends for b.
func NullableLen(b []byte) int {
	if b == nil {
		return 1
	}
	return VarintLen(int64(len(b))) + len(b)
}

// VarintLen is the length of v as a zig-zag varint.
func VarintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
