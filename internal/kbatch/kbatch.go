// Package kbatch is the byte format of a Kafka record batch (message
// format v2) that more than one layer reads: the produce side decodes
// batches clients send (package kafka), and the WAL stores a produced
// batch as one entry and decodes its records when it is read (package
// wal), and the cloud's fetch encodes rows into batches both from records
// (package kafka) and straight from Parquet columns (internal/pqkafka),
// through the writer in write.go. It has no I/O and no dependencies
// beyond the root types.
//
// Layout (big endian): baseOffset int64, batchLength int32,
// partitionLeaderEpoch int32, magic int8 (=2), crc uint32, attributes
// int16, lastOffsetDelta int32, firstTimestamp int64, maxTimestamp int64,
// producerId int64, producerEpoch int16, baseSequence int32, records
// count int32, records. The CRC-32C covers everything from the
// attributes (byte 21) to the end, so the base offset can be rewritten
// without recomputing it.
package kbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/tributary-io/tributary"
)

// Byte positions of a batch header.
const (
	HeaderLen = 61
	CRCOffset = 17
	CRCStart  = 21
)

// Errors of record decoding.
var (
	ErrCorrupt = errors.New("kafka: corrupt record batch")
	ErrInvalid = errors.New("kafka: invalid record batch")
	// ErrTooManyHeaders refuses a record with more headers than allowed:
	// a few kilobytes of compressed empty headers would otherwise expand
	// to millions of header values in memory (and in the WAL).
	ErrTooManyHeaders = fmt.Errorf("%w: too many headers in a record", ErrInvalid)
)

// Record is one record of a batch.
type Record struct {
	TimestampDelta int64
	Key, Value     []byte // nil = null
	Headers        []tributary.Header
}

// reader is a bounds-checked cursor over record bytes.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) varint() int64 {
	// Fast paths for one- and two-byte varints (attributes, deltas,
	// lengths under 8 KiB: most of a record's fields), as binary.Varint
	// decodes them.
	if b := r.b; len(b) > 0 && b[0] < 0x80 {
		r.b = b[1:]
		return int64(b[0]>>1) ^ -int64(b[0]&1)
	} else if len(b) > 1 && b[1] < 0x80 {
		ux := uint64(b[0]&0x7f) | uint64(b[1])<<7
		r.b = b[2:]
		return int64(ux>>1) ^ -int64(ux&1)
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes reads varint-length bytes; -1 = nil (null), 0 = empty non-nil.
func (r *reader) bytes() []byte {
	l := r.varint()
	switch {
	case r.bad:
		return nil
	case l == -1:
		return nil
	case l < -1 || l > int64(len(r.b)):
		r.bad = true
		r.b = nil
		return nil
	}
	v := r.b[:l:l]
	r.b = r.b[l:]
	return v
}

// ParseRecord decodes one record from the front of b (uncompressed record
// bytes) into rec and returns its size. The record's offset delta must be
// wantDelta and it may carry at most maxHeaders headers. rec's byte
// slices alias b. A nil rec only checks the record, allocating nothing.
func ParseRecord(b []byte, rec *Record, wantDelta int32, maxHeaders int) (int, error) {
	n, _, err := parseRecord(b, rec, wantDelta, maxHeaders, nil, false)
	return n, err
}

// ParseRecordInPlace is ParseRecord for a reader that walks stored
// batches without allocating per record: rec's headers are appended to
// hs (rec.Headers is the appended part, nil when the record has none, as
// ParseRecord gives) and their keys alias b as well (unsafe.String), so
// b must not change while rec is used. It returns hs with the headers
// appended.
func ParseRecordInPlace(b []byte, rec *Record, wantDelta int32, hs []tributary.Header) (int, []tributary.Header, error) {
	return parseRecord(b, rec, wantDelta, math.MaxInt32, hs, true)
}

// parseRecord is ParseRecord; with inPlace, headers go to hs and their
// keys alias b.
func parseRecord(b []byte, rec *Record, wantDelta int32, maxHeaders int, hs []tributary.Header, inPlace bool) (int, []tributary.Header, error) {
	r := reader{b: b}
	l := r.varint()
	if r.bad || l < 6 || l > int64(len(r.b)) {
		return 0, hs, fmt.Errorf("%w: record length %d", ErrCorrupt, l)
	}
	size := len(b) - len(r.b) + int(l)
	r.b = r.b[:l]
	r.byte() // attributes: unused in v2
	delta := r.varint()
	if d := r.varint(); !r.bad && d != int64(wantDelta) {
		return 0, hs, fmt.Errorf("%w: offset delta %d, want %d", ErrInvalid, d, wantDelta)
	}
	key := r.bytes()
	value := r.bytes()
	nh := r.varint()
	if r.bad || nh < 0 || nh > int64(len(r.b))/2 {
		return 0, hs, fmt.Errorf("%w: header count %d", ErrCorrupt, nh)
	}
	if nh > int64(maxHeaders) {
		return 0, hs, fmt.Errorf("%w: %d (at most %d)", ErrTooManyHeaders, nh, maxHeaders)
	}
	var headers []tributary.Header
	start := len(hs)
	if nh > 0 && rec != nil && !inPlace {
		headers = make([]tributary.Header, nh)
	}
	for i := range int(nh) {
		k := r.bytes()
		if k == nil && !r.bad {
			return 0, hs[:start], fmt.Errorf("%w: null header key", ErrCorrupt)
		}
		v := r.bytes()
		switch {
		case headers != nil:
			headers[i] = tributary.Header{Key: string(k), Value: v}
		case inPlace && rec != nil:
			hs = append(hs, tributary.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: v})
		}
	}
	if r.bad {
		return 0, hs[:start], fmt.Errorf("%w: truncated record", ErrCorrupt)
	}
	if len(r.b) != 0 {
		return 0, hs[:start], fmt.Errorf("%w: %d bytes after record fields", ErrCorrupt, len(r.b))
	}
	if inPlace && nh > 0 {
		headers = hs[start:len(hs):len(hs)]
	}
	if rec != nil {
		*rec = Record{TimestampDelta: delta, Key: key, Value: value, Headers: headers}
	}
	return size, hs, nil
}

// Sequence arithmetic: sequences run 0..MaxInt32 and wrap to 0.

// AddSeq is s+n in sequence arithmetic.
func AddSeq(s, n int32) int32 { return int32((int64(s) + int64(n)) % (math.MaxInt32 + 1)) }
