package kafka

import (
	"encoding/binary"
	"slices"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/kbatch"
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
	dst = kbatch.AppendHeader(dst, base, len(recs), baseTS, maxTS)
	for i, r := range recs {
		tsDelta := RecordTimestampMs(r) - baseTS
		// The value is never null: a nil one is served empty.
		n := 1 + kbatch.VarintLen(tsDelta) + kbatch.VarintLen(int64(i)) + kbatch.NullableLen(r.Key) +
			kbatch.VarintLen(int64(len(r.Value))) + len(r.Value) + kbatch.VarintLen(int64(len(r.Headers)))
		for _, h := range r.Headers {
			n += kbatch.VarintLen(int64(len(h.Key))) + len(h.Key) + kbatch.NullableLen(h.Value)
		}
		dst = binary.AppendVarint(dst, int64(n))
		dst = append(dst, 0) // record Attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, int64(i))
		dst = kbatch.AppendNullable(dst, r.Key)
		dst = binary.AppendVarint(dst, int64(len(r.Value)))
		dst = append(dst, r.Value...)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for _, h := range r.Headers {
			dst = binary.AppendVarint(dst, int64(len(h.Key)))
			dst = append(dst, h.Key...)
			dst = kbatch.AppendNullable(dst, h.Value)
		}
	}
	kbatch.Finish(dst[start:])
	return dst
}
