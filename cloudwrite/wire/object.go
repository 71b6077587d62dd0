// Package wire is the format of the cloud write path's WAL objects
// (package cloudwrite): one object per flush of a cloud server, holding
// the segments it buffered, each framed and checksummed on its own. It
// imports nothing but the root package, so that its fuzz targets run
// fast (see the Makefile's FUZZ_TARGETS).
package wire

// The WAL object format, version 1. One object is what one flush of one
// cloud server wrote: every segment (one partition's batch of one
// produce request) buffered in the flush, each framed and checksummed on
// its own so that a reader fetches one segment with a ranged read:
//
//	object  = header segment*
//	header  = "TRBW" u8(version=1) u32(header body length) u32(crc32c of body) body
//	body    = str(server) i64(created, unix micros) u32(segment count)
//	segment = u32(body length) u32(crc32c of body) segbody
//	segbody = str(stream) i32(partition) i64(producer id) i16(producer epoch)
//	          i32(base sequence) str(topic) str(source) str(client id)
//	          str(principal) str(node) u32(record count) record*
//	record  = i64(timestamp, unix micros) i64(producer timestamp, unix ms)
//	          bytes?(key) bytes(value) u32(header count) (str bytes)*
//	str     = u32 length, bytes;  bytes = u32 length, bytes;
//	bytes?  = i32 length (-1 = null), bytes
//
// All integers are big-endian. Offsets are not in the object: they are
// assigned after it is written, when it is sequenced, and recorded with
// the segment's position in the state database (state.go); a segment the
// sequencing refused (a duplicate of an idempotent producer's batch, a
// fenced epoch) or an object never sequenced (the server died after the
// put) is therefore never read.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/tributary-io/tributary"
)

const (
	objectMagic   = "TRBW"
	objectVersion = 1
	headerFixed   = 4 + 1 + 4 + 4 // magic, version, length, crc
	segmentFixed  = 4 + 4         // length, crc
)

// Limits the decoder enforces, whatever an object claims.
const (
	// MaxObjectBytes bounds an object (and so a segment) the decoder
	// accepts.
	MaxObjectBytes = 256 << 20
	// MaxSegmentsPerObject bounds the segments an object may claim.
	MaxSegmentsPerObject = 1 << 20
	// MaxHeadersPerRecord bounds a record's headers.
	MaxHeadersPerRecord = 10000
)

// ErrCorrupt is wrapped by every decoding error: a bad magic, version,
// checksum, length or field.
var ErrCorrupt = errors.New("cloud write: corrupt WAL object")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Segment is one partition's records of one submission, as stored in a
// WAL object. Records carry Key, Value, Headers, Timestamp and
// ProducerTimestamp; the rest is the segment's (Records of a decoded
// segment have every field but Offset, which the sequencing gives).
type Segment struct {
	Stream        string
	Partition     int32
	ProducerID    int64 // -1 = not an idempotent producer
	ProducerEpoch int16
	BaseSequence  int32
	Topic         string
	Source        string // "kafka", "http", "grpc", "pulsar"
	ClientID      string
	Principal     string
	Node          string // the cloud server that accepted it
	Records       []*tributary.Record
	// Dedup is the write's named producer and sequence ids (a Pulsar
	// producer), checked when the segment is sequenced; not encoded:
	// the object holds what was sequenced, not how it was deduplicated.
	Dedup *tributary.Dedup
}

// SegmentRef is where a segment lies in its object.
type SegmentRef struct {
	Pos, Len int64 // byte range of the framed segment (length, crc, body)
}

// EncodeObject appends the object of segs to dst and returns it with the
// position of every segment.
func EncodeObject(dst []byte, server string, created int64, segs []*Segment) ([]byte, []SegmentRef) {
	var body []byte
	body = appendStr(body, server)
	body = binary.BigEndian.AppendUint64(body, uint64(created))
	body = binary.BigEndian.AppendUint32(body, uint32(len(segs)))
	dst = append(dst, objectMagic...)
	dst = append(dst, objectVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(body, castagnoli))
	dst = append(dst, body...)
	refs := make([]SegmentRef, len(segs))
	for i, s := range segs {
		start := len(dst)
		dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
		dst = appendSegment(dst, s)
		b := dst[start+segmentFixed:]
		binary.BigEndian.PutUint32(dst[start:], uint32(len(b)))
		binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(b, castagnoli))
		refs[i] = SegmentRef{Pos: int64(start), Len: int64(len(dst) - start)}
	}
	return dst, refs
}

func appendSegment(b []byte, s *Segment) []byte {
	b = appendStr(b, s.Stream)
	b = binary.BigEndian.AppendUint32(b, uint32(s.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(s.ProducerID))
	b = binary.BigEndian.AppendUint16(b, uint16(s.ProducerEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(s.BaseSequence))
	for _, v := range []string{s.Topic, s.Source, s.ClientID, s.Principal, s.Node} {
		b = appendStr(b, v)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Records)))
	for _, r := range s.Records {
		b = binary.BigEndian.AppendUint64(b, uint64(r.Timestamp))
		b = binary.BigEndian.AppendUint64(b, uint64(r.ProducerTimestamp))
		if r.Key == nil {
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32)
		} else {
			b = appendStr(b, string(r.Key))
		}
		b = appendStr(b, string(r.Value))
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Headers)))
		for _, h := range r.Headers {
			b = appendStr(b, h.Key)
			b = appendStr(b, string(h.Value))
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// SegmentSize is about the bytes s takes in an object (for the flush
// threshold and the buffer cap).
func SegmentSize(s *Segment) int {
	n := segmentFixed + 64 + len(s.Stream) + len(s.Topic) + len(s.Source) + len(s.ClientID) + len(s.Principal) + len(s.Node)
	for _, r := range s.Records {
		n += 28 + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += 8 + len(h.Key) + len(h.Value)
		}
	}
	return n
}

// ObjectHeader is what an object's header says.
type ObjectHeader struct {
	Server   string
	Created  int64 // unix micros
	Segments int
}

// DecodeObject decodes a whole object: its header and every segment, in
// order, with their positions.
func DecodeObject(b []byte) (ObjectHeader, []*Segment, []SegmentRef, error) {
	h, pos, err := decodeHeader(b)
	if err != nil {
		return h, nil, nil, err
	}
	var segs []*Segment
	var refs []SegmentRef
	for i := 0; i < h.Segments; i++ {
		if len(b)-pos < segmentFixed {
			return h, nil, nil, fmt.Errorf("%w: segment %d truncated", ErrCorrupt, i)
		}
		n := int64(binary.BigEndian.Uint32(b[pos:]))
		if n > int64(len(b)-pos-segmentFixed) {
			return h, nil, nil, fmt.Errorf("%w: segment %d length %d beyond the object", ErrCorrupt, i, n)
		}
		ref := SegmentRef{Pos: int64(pos), Len: n + segmentFixed}
		s, err := DecodeSegment(b[pos : pos+int(ref.Len)])
		if err != nil {
			return h, nil, nil, fmt.Errorf("segment %d: %w", i, err)
		}
		segs, refs = append(segs, s), append(refs, ref)
		pos += int(ref.Len)
	}
	if pos != len(b) {
		return h, nil, nil, fmt.Errorf("%w: %d bytes after the last segment", ErrCorrupt, len(b)-pos)
	}
	return h, segs, refs, nil
}

func decodeHeader(b []byte) (ObjectHeader, int, error) {
	var h ObjectHeader
	if len(b) > MaxObjectBytes {
		return h, 0, fmt.Errorf("%w: %d bytes, more than %d", ErrCorrupt, len(b), MaxObjectBytes)
	}
	if len(b) < headerFixed || string(b[:4]) != objectMagic {
		return h, 0, fmt.Errorf("%w: no magic", ErrCorrupt)
	}
	if b[4] != objectVersion {
		return h, 0, fmt.Errorf("%w: version %d", ErrCorrupt, b[4])
	}
	n := int(binary.BigEndian.Uint32(b[5:]))
	if n > len(b)-headerFixed {
		return h, 0, fmt.Errorf("%w: header length %d", ErrCorrupt, n)
	}
	body := b[headerFixed : headerFixed+n]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[9:]) {
		return h, 0, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	d := decoder{b: body}
	h.Server = d.str()
	h.Created = d.i64()
	cnt := d.u32()
	if d.err != nil || len(d.b) != 0 {
		return h, 0, fmt.Errorf("%w: header body", ErrCorrupt)
	}
	if cnt > MaxSegmentsPerObject {
		return h, 0, fmt.Errorf("%w: %d segments", ErrCorrupt, cnt)
	}
	h.Segments = int(cnt)
	return h, headerFixed + n, nil
}

// DecodeSegment decodes one framed segment (as read at a SegmentRef).
func DecodeSegment(b []byte) (*Segment, error) {
	if len(b) < segmentFixed || len(b) > MaxObjectBytes {
		return nil, fmt.Errorf("%w: segment of %d bytes", ErrCorrupt, len(b))
	}
	n := int(binary.BigEndian.Uint32(b))
	body := b[segmentFixed:]
	if n != len(body) {
		return nil, fmt.Errorf("%w: segment length %d, have %d", ErrCorrupt, n, len(body))
	}
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return nil, fmt.Errorf("%w: segment checksum", ErrCorrupt)
	}
	d := decoder{b: body}
	s := &Segment{Stream: d.str(), Partition: d.i32(), ProducerID: d.i64(), ProducerEpoch: int16(d.u16()), BaseSequence: d.i32()}
	s.Topic, s.Source, s.ClientID, s.Principal, s.Node = d.str(), d.str(), d.str(), d.str(), d.str()
	cnt := d.u32()
	// A record takes at least 28 bytes: the count cannot exceed the body.
	if d.err == nil && uint64(cnt)*28 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorrupt, cnt, len(d.b))
	}
	if d.err == nil {
		s.Records = make([]*tributary.Record, 0, cnt)
	}
	for i := uint32(0); i < cnt && d.err == nil; i++ {
		r := &tributary.Record{Stream: s.Stream, Partition: s.Partition, Topic: s.Topic, Source: s.Source,
			ClientID: s.ClientID, Principal: s.Principal, Node: s.Node,
			ProducerID: s.ProducerID, ProducerEpoch: s.ProducerEpoch, Sequence: -1}
		if s.ProducerID >= 0 {
			r.Sequence = AddSeq(s.BaseSequence, int32(i))
		}
		r.Timestamp = d.i64()
		r.ProducerTimestamp = d.i64()
		r.Key = d.nullable()
		r.Value = d.bytes()
		hn := d.u32()
		if hn > MaxHeadersPerRecord || uint64(hn)*8 > uint64(len(d.b)) {
			d.fail()
			break
		}
		if hn > 0 {
			r.Headers = make([]tributary.Header, hn)
			for j := range r.Headers {
				r.Headers[j] = tributary.Header{Key: d.str(), Value: d.bytes()}
			}
		}
		s.Records = append(s.Records, r)
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: segment body", ErrCorrupt)
	}
	return s, nil
}

// AddSeq adds n to a Kafka sequence, wrapping at MaxInt32 as Kafka does.
func AddSeq(s, n int32) int32 { return int32((int64(s) + int64(n)) % (math.MaxInt32 + 1)) }

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err, d.b = ErrCorrupt, nil }

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) i32() int32 { return int32(d.u32()) }

func (d *decoder) i64() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if n > uint32(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.take(int(n))
	if v == nil {
		return []byte{}
	}
	return v
}

func (d *decoder) nullable() []byte {
	if d.err == nil && len(d.b) >= 4 && binary.BigEndian.Uint32(d.b) == math.MaxUint32 {
		d.b = d.b[4:]
		return nil
	}
	return d.bytes()
}

func (d *decoder) str() string { return string(d.bytes()) }
