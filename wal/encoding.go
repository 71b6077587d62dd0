package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tributary-io/tributary"
)

// ErrCorrupt is returned (wrapped with the position and the field) when an
// encoded record or a WAL file does not decode.
var ErrCorrupt = errors.New("wal: corrupt record")

// formatV1 and formatV2 are the first byte of a record encoded by
// EncodeRecord.
//
// Layout of version 1, in order (varint = zigzag signed varint, uvarint =
// unsigned varint, string = uvarint length + bytes, bytes = uvarint (length+1)
// + bytes, where 0 means nil):
//
//	version byte (1)
//	Stream string, Partition varint, Offset varint, Epoch varint, Timestamp varint
//	Topic string, Key bytes, Value bytes
//	header count uvarint, then per header: Key string, Value bytes
//	Source string, ClientID string, Node string
//	ProducerID varint, ProducerEpoch varint, Sequence varint, ProducerTimestamp varint
//
// Version 2 is version 1 followed by one more field:
//
//	Principal string
//
// Nothing may follow the last field. Nil and empty byte slices are kept apart
// so that a record round-trips exactly.
//
// EncodeRecord writes version 2 only for a record with a Principal and
// version 1 otherwise, so that records of anonymous clients stay readable
// by nodes that predate version 2 (a rolling upgrade replicates between
// both); DecodeRecord reads both, a version 1 record with Principal "".
const (
	formatV1 = 1
	formatV2 = 2
)

// EncodeRecord appends the binary encoding of r to dst and returns the
// extended slice. The encoding is versioned and self-describing; DecodeRecord
// reverses it.
func EncodeRecord(dst []byte, r *tributary.Record) []byte {
	version := byte(formatV1)
	if r.Principal != "" {
		version = formatV2
	}
	dst = append(dst, version)
	dst = appendString(dst, r.Stream)
	dst = binary.AppendVarint(dst, int64(r.Partition))
	dst = binary.AppendVarint(dst, r.Offset)
	dst = binary.AppendVarint(dst, r.Epoch)
	dst = binary.AppendVarint(dst, r.Timestamp)
	dst = appendString(dst, r.Topic)
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendString(dst, h.Key)
		dst = appendBytes(dst, h.Value)
	}
	dst = appendString(dst, r.Source)
	dst = appendString(dst, r.ClientID)
	dst = appendString(dst, r.Node)
	dst = binary.AppendVarint(dst, r.ProducerID)
	dst = binary.AppendVarint(dst, int64(r.ProducerEpoch))
	dst = binary.AppendVarint(dst, int64(r.Sequence))
	dst = binary.AppendVarint(dst, r.ProducerTimestamp)
	if version == formatV2 {
		dst = appendString(dst, r.Principal)
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

// DecodeRecord decodes a record encoded by EncodeRecord. It never panics and
// never allocates more than a small multiple of len(b), whatever b holds; a
// malformed input yields an error wrapping ErrCorrupt.
//
// The returned record does not alias b: b may be reused (or, inside a bbolt
// transaction, become invalid) as soon as DecodeRecord returns.
func DecodeRecord(b []byte) (*tributary.Record, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrCorrupt)
	}
	version := b[0]
	if version != formatV1 && version != formatV2 {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, version)
	}
	// One copy; every byte slice of the record points into it (capped, so
	// that appending to one field never overwrites the next).
	d := decoder{b: append([]byte(nil), b...), off: 1}
	r := &tributary.Record{}
	r.Stream = d.string("stream")
	r.Partition = d.int32("partition")
	r.Offset = d.varint("offset")
	r.Epoch = d.varint("epoch")
	r.Timestamp = d.varint("timestamp")
	r.Topic = d.string("topic")
	r.Key = d.bytes("key")
	r.Value = d.bytes("value")
	if n := d.uvarint("header count"); n > 0 && d.err == nil {
		// Each header takes at least two bytes: bound the allocation by
		// what the input can hold.
		if n > uint64(len(d.b)-d.off)/2 {
			d.fail("header count")
		} else {
			r.Headers = make([]tributary.Header, n)
			for i := range r.Headers {
				r.Headers[i].Key = d.string("header key")
				r.Headers[i].Value = d.bytes("header value")
			}
		}
	}
	r.Source = d.string("source")
	r.ClientID = d.string("client id")
	r.Node = d.string("node")
	r.ProducerID = d.varint("producer id")
	r.ProducerEpoch = int16(d.ranged("producer epoch", math.MinInt16, math.MaxInt16))
	r.Sequence = d.int32("sequence")
	r.ProducerTimestamp = d.varint("producer timestamp")
	if version == formatV2 {
		r.Principal = d.string("principal")
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("%w: %d trailing bytes at byte %d", ErrCorrupt, len(d.b)-d.off, d.off)
	}
	return r, nil
}

// decoder reads fields from b; after the first error every read returns a
// zero value and err keeps the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(field string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s at byte %d", ErrCorrupt, field, d.off)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(field)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) ranged(field string, lo, hi int64) int64 {
	v := d.varint(field)
	if v < lo || v > hi {
		d.fail(field)
		return 0
	}
	return v
}

func (d *decoder) int32(field string) int32 {
	return int32(d.ranged(field, math.MinInt32, math.MaxInt32))
}

// take returns the next n bytes, or fails if fewer remain.
func (d *decoder) take(field string, n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(field)
		return nil
	}
	end := d.off + int(n)
	s := d.b[d.off:end:end]
	d.off = end
	return s
}

func (d *decoder) string(field string) string {
	n := d.uvarint(field)
	return string(d.take(field, n))
}

func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field)
	if n == 0 || d.err != nil {
		return nil
	}
	return d.take(field, n-1)
}
