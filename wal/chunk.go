package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
)

// chunkV1 is the first byte of every chunk value.
//
// A chunk holds consecutive records of one partition, written by one group
// commit; its bbolt key is the 8-byte big-endian offset of its first record.
// Layout of version 1:
//
//	version byte (1)
//	first offset, 8 bytes big-endian (must equal the key)
//	record count uvarint (>= 1)
//	count × record length uvarint (each >= 1)
//	the records' EncodeRecord bytes, concatenated
//	CRC32C (Castagnoli) of all preceding bytes, 4 bytes big-endian
//
// Nothing may follow the checksum.
//
// Version 2 (batch.go) adds, after each record length, the number of
// offsets the entry covers, so that a Kafka record batch is one entry.
const chunkV1 = 1

// Write-side chunk caps: a group's records of one partition are split into
// chunks of at most maxChunkRecords records and, unless a single record is
// larger, maxChunkBytes record bytes. Readers accept any size. Measured with
// BenchmarkAppendKafka (1 KiB records, 1000 per Append): 32–64 KiB chunks
// append about twice as fast as 1 MiB chunks, whose bbolt overflow pages
// and buffers are large fresh allocations on every commit.
const (
	maxChunkRecords = 1024
	maxChunkBytes   = 32 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunk is a decoded chunk header; its entry bytes alias the input. An
// entry of a version 1 chunk is one record (one offset); one of a version
// 2 chunk covers offs[i]-offs[i-1] offsets.
type chunk struct {
	first int64
	ends  []int   // ends[i] = end of entry i in data
	offs  []int64 // version 2: offs[i] = offsets covered by entries 0..i; nil: one per entry
	data  []byte
}

// count is the number of offsets the chunk covers.
func (c *chunk) count() int {
	if c.offs == nil {
		return len(c.ends)
	}
	return int(c.offs[len(c.offs)-1])
}

// entries is the number of entries.
func (c *chunk) entries() int { return len(c.ends) }

// entryFirst is the first offset of entry i, relative to c.first.
func (c *chunk) entryFirst(i int) int64 {
	if c.offs == nil {
		return int64(i)
	}
	if i == 0 {
		return 0
	}
	return c.offs[i-1]
}

// entryOf is the entry holding relative offset rel (0 <= rel < count).
func (c *chunk) entryOf(rel int64) int {
	if c.offs == nil {
		return int(rel)
	}
	return sort.Search(len(c.offs), func(i int) bool { return c.offs[i] > rel })
}

// end is the offset after the chunk's last record.
func (c *chunk) end() int64 { return c.first + int64(c.count()) }

// record returns the encoded bytes of entry i (of a version 1 chunk: the
// record at offset first+i).
func (c *chunk) record(i int) []byte {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.data[start:c.ends[i]:c.ends[i]]
}

// size returns the bytes that releasing the relative offsets [i, j)
// frees: the sizes of the entries whose last offset is in [i, j) (a batch
// entry is freed by the release that passes its end).
func (c *chunk) size(i, j int) int64 {
	if i >= j {
		return 0
	}
	if c.offs != nil {
		// Entries ending in [i, j): from the one holding offset i (or
		// the next) through the one holding j-1, if it ends there.
		a, b := c.entryOf(int64(i)), c.entryOf(int64(j-1))
		if c.offs[b] != int64(j) {
			b-- // the entry holding j-1 goes on past it
		}
		if b < a {
			return 0
		}
		i, j = a, b+1
	}
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return int64(c.ends[j-1] - start)
}

// sub appends to dst a chunk of c's entries covering the relative offsets
// [i, j), starting at offset c.first+i, of c's version, the entries' bytes
// as they are. i and j must fall on entry boundaries: a batch entry is
// never split (replicas cut the owner's chunks where the owner's entries
// begin, so they always do).
func (c *chunk) sub(dst []byte, i, j int64) ([]byte, error) {
	a, b := c.entryOf(i), c.entries()
	if j < int64(c.count()) {
		b = c.entryOf(j)
	}
	if c.entryFirst(a) != i || (b < c.entries() && c.entryFirst(b) != j) {
		return dst, fmt.Errorf("%w: offsets [%d, %d) of the chunk at %d split an entry", ErrCorrupt, c.first+i, c.first+j, c.first)
	}
	recs := make([][]byte, 0, b-a)
	var ns []int
	for e := a; e < b; e++ {
		recs = append(recs, c.record(e))
		if c.offs != nil {
			ns = append(ns, int(c.entryFirst(e+1)-c.entryFirst(e)))
		}
	}
	return encodeChunkV(dst, c.first+i, recs, ns), nil
}

// encodeChunk appends a chunk of the given encoded records, the first at
// offset first, to dst.
func encodeChunk(dst []byte, first int64, recs [][]byte) []byte {
	return encodeChunkV(dst, first, recs, nil)
}

// encodeChunkV appends a chunk of entries to dst: of version 1 when ns is
// nil, else of version 2 with entry i covering ns[i] offsets.
func encodeChunkV(dst []byte, first int64, recs [][]byte, ns []int) []byte {
	return encodeChunkParts(dst, first, recs, nil, ns)
}

// encodeChunkParts is encodeChunkV for entries in two parts: entry i is
// heads[i] followed by tails[i] (tails nil: no second parts), so that a
// batch entry's records are copied once, into the chunk.
func encodeChunkParts(dst []byte, first int64, heads, tails [][]byte, ns []int) []byte {
	start := len(dst)
	version := byte(chunkV1)
	if ns != nil {
		version = chunkV2
	}
	tail := func(i int) []byte {
		if tails == nil {
			return nil
		}
		return tails[i]
	}
	dst = append(dst, version)
	dst = be.AppendUint64(dst, uint64(first))
	dst = binary.AppendUvarint(dst, uint64(len(heads)))
	for i, r := range heads {
		dst = binary.AppendUvarint(dst, uint64(len(r)+len(tail(i))))
		if ns != nil {
			dst = binary.AppendUvarint(dst, uint64(ns[i]))
		}
	}
	for i, r := range heads {
		dst = append(dst, r...)
		dst = append(dst, tail(i)...)
	}
	return be.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// decodeChunk checks and decodes a chunk. It never panics, allocates at most
// one int per input byte, and reports malformed or torn input with an error
// wrapping ErrCorrupt. The chunk aliases b.
func decodeChunk(b []byte) (chunk, error) {
	const minLen = 1 + 8 + 1 + 4
	if len(b) < minLen {
		return chunk{}, fmt.Errorf("%w: chunk of %d bytes", ErrCorrupt, len(b))
	}
	if b[0] != chunkV1 && b[0] != chunkV2 {
		return chunk{}, fmt.Errorf("%w: unknown chunk version %d", ErrCorrupt, b[0])
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), be.Uint32(b[len(b)-4:]); got != want {
		return chunk{}, fmt.Errorf("%w: chunk checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	first := be.Uint64(body[1:])
	off := 9
	count, n := binary.Uvarint(body[off:])
	if n <= 0 || count == 0 {
		return chunk{}, fmt.Errorf("%w: bad chunk record count", ErrCorrupt)
	}
	off += n
	// Each length takes at least one byte and each record at least one.
	if count > uint64(len(body)-off)/2 {
		return chunk{}, fmt.Errorf("%w: chunk record count %d exceeds %d bytes", ErrCorrupt, count, len(body)-off)
	}
	if first > math.MaxInt64-count {
		return chunk{}, fmt.Errorf("%w: chunk offsets %d+%d overflow", ErrCorrupt, first, count)
	}
	ends := make([]int, count)
	var offs []int64
	if b[0] == chunkV2 {
		offs = make([]int64, count)
	}
	total := 0
	covered := uint64(0)
	for i := range ends {
		l, n := binary.Uvarint(body[off:])
		if n <= 0 || l == 0 || l > uint64(len(body)) {
			return chunk{}, fmt.Errorf("%w: bad length of chunk record %d", ErrCorrupt, i)
		}
		off += n
		if offs != nil {
			c, n := binary.Uvarint(body[off:])
			if n <= 0 || c == 0 || c > math.MaxInt32 {
				return chunk{}, fmt.Errorf("%w: bad offset count of chunk entry %d", ErrCorrupt, i)
			}
			off += n
			covered += c
			offs[i] = int64(covered)
		}
		total += int(l)
		if total > len(body) {
			return chunk{}, fmt.Errorf("%w: chunk records exceed its size", ErrCorrupt)
		}
		ends[i] = total
	}
	if total != len(body)-off {
		return chunk{}, fmt.Errorf("%w: chunk records hold %d bytes, chunk has %d", ErrCorrupt, total, len(body)-off)
	}
	if offs != nil && first > math.MaxInt64-covered {
		return chunk{}, fmt.Errorf("%w: chunk offsets %d+%d overflow", ErrCorrupt, first, covered)
	}
	return chunk{first: int64(first), ends: ends, offs: offs, data: body[off:]}, nil
}

// decodeChunkAt decodes the chunk stored under key k.
func decodeChunkAt(k, v []byte) (chunk, error) {
	if len(k) != 8 {
		return chunk{}, fmt.Errorf("%w: chunk key %x", ErrCorrupt, k)
	}
	c, err := decodeChunk(v)
	if err != nil {
		return chunk{}, fmt.Errorf("chunk %d: %w", be.Uint64(k), err)
	}
	if uint64(c.first) != be.Uint64(k) {
		return chunk{}, fmt.Errorf("%w: chunk under key %d starts at %d", ErrCorrupt, be.Uint64(k), c.first)
	}
	return c, nil
}
