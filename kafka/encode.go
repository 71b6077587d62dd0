package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	"github.com/tributary-io/tributary"
)

// RecordTimestampMs is the Kafka timestamp served for a row: the producer's
// own timestamp when it set one, else the time the edge accepted it.
func RecordTimestampMs(r *tributary.Record) int64 {
	if r.ProducerTimestamp != 0 {
		return r.ProducerTimestamp
	}
	return r.Timestamp / 1000
}

// RecordSize estimates the encoded size of a record in a batch.
func RecordSize(r *tributary.Record) int {
	n := 24 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// AppendBatch appends one uncompressed record batch (magic 2) of recs,
// which must be consecutive offsets, with base offset recs[0].Offset,
// CREATE_TIME timestamps and no producer id.
func AppendBatch(dst []byte, recs []*tributary.Record) []byte {
	need := 61
	for _, r := range recs {
		need += RecordSize(r)
	}
	dst = slices.Grow(dst, need)
	start := len(dst)
	base := recs[0].Offset
	baseTS := RecordTimestampMs(recs[0])
	maxTS := baseTS
	for _, r := range recs {
		maxTS = max(maxTS, RecordTimestampMs(r))
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(base))
	dst = append(dst, 0, 0, 0, 0) // batch length, below
	dst = append(dst, 0, 0, 0, 0) // partition leader epoch
	dst = append(dst, 2)          // magic
	dst = append(dst, 0, 0, 0, 0) // crc, below
	crcStart := len(dst)
	dst = append(dst, 0, 0) // Attributes: no compression, create time
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)-1))
	dst = binary.BigEndian.AppendUint64(dst, uint64(baseTS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(maxTS))
	dst = binary.BigEndian.AppendUint64(dst, ^uint64(0)) // producer id -1
	dst = append(dst, 0xff, 0xff)                        // producer epoch -1
	dst = append(dst, 0xff, 0xff, 0xff, 0xff)            // base sequence -1
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)))
	for i, r := range recs {
		tsDelta := RecordTimestampMs(r) - baseTS
		n := 1 + varintLen(tsDelta) + varintLen(int64(i)) + bytesLen(r.Key, r.Key == nil) + bytesLen(r.Value, false) +
			varintLen(int64(len(r.Headers)))
		for _, h := range r.Headers {
			n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value, h.Value == nil)
		}
		dst = binary.AppendVarint(dst, int64(n))
		dst = append(dst, 0) // record Attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, int64(i))
		dst = appendVarBytesOrNull(dst, r.Key, r.Key == nil)
		dst = appendVarBytesOrNull(dst, r.Value, false)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for _, h := range r.Headers {
			dst = binary.AppendVarint(dst, int64(len(h.Key)))
			dst = append(dst, h.Key...)
			dst = appendVarBytesOrNull(dst, h.Value, h.Value == nil)
		}
	}
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-12))
	binary.BigEndian.PutUint32(dst[crcStart-4:], crc32.Checksum(dst[crcStart:], castagnoli))
	return dst
}

func appendVarBytesOrNull(dst, b []byte, null bool) []byte {
	if null {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

func bytesLen(b []byte, null bool) int {
	if null {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}
