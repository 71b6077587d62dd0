// Package wire is the encoding of the messages package replica sends on
// peer links: appends of committed records, their replies, releases and
// the takeover query. Every decoder checks its input and never panics; it
// is apart from package replica so that it is fuzzed in a small test
// binary (replica's tests link the table stack).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/wal"
)

// Message types on peer links (64–95 belong to package replica).
const (
	// MsgAppend: owner → replica, committed records of one partition
	// (Append); the reply is a Reply.
	MsgAppend uint8 = 64
	// MsgRelease: owner → replica, the owner's uplink released a
	// partition up to an offset (Release); the reply is empty.
	MsgRelease uint8 = 65
	// MsgQuery: a replica holder → the others, before a takeover: how far
	// do you hold origin's partition? (Query; the reply is an
	// Reply with Next, 0 if none).
	MsgQuery uint8 = 66
)

// Liveness of a member's data link is peer's own ping (peer.TypePing).

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("replica: malformed message")

// wireV1 is the first byte of every message of this package but Append,
// which also has version wireV2.
const (
	wireV1 = 1
	wireV2 = 2
)

// Append carries consecutive records of one partition.
//
// Layout of version 1 (varint = zigzag signed, uvarint = unsigned, string =
// uvarint length + bytes):
//
//	version byte (1)
//	Stream string, Partition varint, Epoch varint, Base varint
//	record count uvarint, then per record: uvarint length + wal.EncodeRecord bytes
//
// Layout of version 2, which carries the owner's WAL chunks as they are
// (sent while the owner fsyncs them, or read back to catch a replica up):
//
//	version byte (2)
//	Stream string, Partition varint, Epoch varint, Base varint
//	Incarnation varint (>= 1), From varint
//	chunk count uvarint, then per chunk: uvarint length + the chunk value
//
// Records (version 1) belong to (Stream, Partition) and have consecutive
// offsets; chunks (version 2) are opaque here: the replica's WAL checks
// their checksums and offsets (wal.OpVerbatim). Base is the
// owner's released offset: everything below it is in the table, so a
// replica behind it skips ahead instead of waiting for records the owner
// no longer has. Incarnation is the owner WAL's incarnation and From its
// partition's Start (wal.PartitionState): a replica that stored an older
// incarnation drops its records at or above From first, since the owner
// never made them durable. A message without records or chunks only moves
// Base (and passes on the incarnation). Encode writes version 1 when
// Records is set and version 2 otherwise; DecodeAppend reads both (a node
// of the previous version sends version 1 and cannot read version 2).
type Append struct {
	Stream      string
	Partition   int32
	Epoch       int64
	Base        int64
	Records     []*tributary.Record // version 1
	Incarnation int64               // version 2
	From        int64               // version 2
	Chunks      [][]byte            // version 2
}

// Reply statuses.
const (
	StatusOK     = 0 // Next is the replica's durable next offset
	StatusGap    = 1 // the records did not start at or below Next: resend from Next
	StatusFenced = 2 // the replica owns the partition at Epoch > the message's
	StatusStale  = 3 // the replica stored a newer incarnation of the owner than the message's
)

// Reply answers an Append.
//
//	version byte (1), status byte, Next varint, Epoch varint
type Reply struct {
	Status byte
	Next   int64
	Epoch  int64
}

// Release tells a replica that the owner released (stream, partition)
// below UpTo: it is in the table.
//
//	version byte (1), Stream string, Partition varint, UpTo varint
type Release struct {
	Stream    string
	Partition int32
	UpTo      int64
}

// Query asks how far a node holds Origin's replica of (Stream,
// Partition).
//
//	version byte (1), Origin string, Stream string, Partition varint
type Query struct {
	Origin    string
	Stream    string
	Partition int32
}

func (m Query) Encode() []byte {
	b := appendString([]byte{wireV1}, m.Origin)
	b = appendString(b, m.Stream)
	return binary.AppendVarint(b, int64(m.Partition))
}

func DecodeQuery(b []byte) (Query, error) {
	d := reader{b: b}
	d.version()
	var m Query
	m.Origin = d.string("origin")
	m.Stream = d.string("stream")
	m.Partition = int32(d.ranged("partition", 0, math.MaxInt32))
	if d.err == nil && (d.off != len(b) || m.Stream == "" || m.Origin == "") {
		d.fail("end")
	}
	return m, d.err
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func (m *Append) Encode() []byte {
	if m.Records != nil {
		return m.encodeV1()
	}
	size := 48 + len(m.Stream)
	for _, c := range m.Chunks {
		size += 4 + len(c)
	}
	b := make([]byte, 0, size)
	b = append(b, wireV2)
	b = appendString(b, m.Stream)
	b = binary.AppendVarint(b, int64(m.Partition))
	b = binary.AppendVarint(b, m.Epoch)
	b = binary.AppendVarint(b, m.Base)
	b = binary.AppendVarint(b, m.Incarnation)
	b = binary.AppendVarint(b, m.From)
	b = binary.AppendUvarint(b, uint64(len(m.Chunks)))
	for _, c := range m.Chunks {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b
}

func (m *Append) encodeV1() []byte {
	size := 32 + len(m.Stream)
	for _, r := range m.Records {
		size += 64 + len(r.Value) + len(r.Key) + len(r.Topic)
	}
	b := make([]byte, 0, size)
	b = append(b, wireV1)
	b = appendString(b, m.Stream)
	b = binary.AppendVarint(b, int64(m.Partition))
	b = binary.AppendVarint(b, m.Epoch)
	b = binary.AppendVarint(b, m.Base)
	b = binary.AppendUvarint(b, uint64(len(m.Records)))
	var rec []byte
	for _, r := range m.Records {
		rec = wal.EncodeRecord(rec[:0], r)
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

// DecodeAppend decodes and checks an Append. It never panics, allocates
// in proportion to len(b), and reports bad input with ErrMalformed.
func DecodeAppend(b []byte) (*Append, error) {
	d := reader{b: b}
	v2 := len(b) > 0 && b[0] == wireV2
	if v2 {
		d.off = 1
	} else {
		d.version()
	}
	m := &Append{}
	m.Stream = d.string("stream")
	m.Partition = int32(d.ranged("partition", 0, math.MaxInt32))
	m.Epoch = d.ranged("epoch", 0, math.MaxInt64)
	m.Base = d.ranged("base", 0, math.MaxInt64)
	if v2 {
		return d.chunks(m)
	}
	n := d.uvarint("record count")
	if d.err == nil && n > uint64(len(b)-d.off)/2 { // each record takes at least two bytes
		d.fail("record count")
	}
	if d.err != nil {
		return nil, d.err
	}
	if m.Stream == "" {
		return nil, fmt.Errorf("%w: empty stream", ErrMalformed)
	}
	m.Records = make([]*tributary.Record, 0, n)
	for i := uint64(0); i < n; i++ {
		l := d.uvarint("record length")
		raw := d.take("record", l)
		if d.err != nil {
			return nil, d.err
		}
		r, err := wal.DecodeRecord(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrMalformed, i, err)
		}
		if r.Stream != m.Stream || r.Partition != m.Partition {
			return nil, fmt.Errorf("%w: record %d is of %s/%d in a message of %s/%d", ErrMalformed, i, r.Stream, r.Partition, m.Stream, m.Partition)
		}
		if i > 0 && r.Offset != m.Records[i-1].Offset+1 || r.Offset < 0 || r.Offset == math.MaxInt64 {
			return nil, fmt.Errorf("%w: record %d has offset %d, not consecutive", ErrMalformed, i, r.Offset)
		}
		m.Records = append(m.Records, r)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-d.off)
	}
	return m, nil
}

// chunks decodes the rest of a version 2 Append.
func (d *reader) chunks(m *Append) (*Append, error) {
	m.Incarnation = d.ranged("incarnation", 1, math.MaxInt64)
	m.From = d.ranged("from", 0, math.MaxInt64)
	n := d.uvarint("chunk count")
	if d.err == nil && n > uint64(len(d.b)-d.off)/2 { // each chunk takes at least two bytes
		d.fail("chunk count")
	}
	if d.err != nil {
		return nil, d.err
	}
	if m.Stream == "" {
		return nil, fmt.Errorf("%w: empty stream", ErrMalformed)
	}
	m.Chunks = make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		c := d.take("chunk", d.uvarint("chunk length"))
		if d.err == nil && len(c) == 0 {
			d.fail("chunk length")
		}
		if d.err != nil {
			return nil, d.err
		}
		m.Chunks = append(m.Chunks, c)
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b)-d.off)
	}
	return m, nil
}

func (r Reply) Encode() []byte {
	b := []byte{wireV1, r.Status}
	b = binary.AppendVarint(b, r.Next)
	return binary.AppendVarint(b, r.Epoch)
}

func DecodeReply(b []byte) (Reply, error) {
	d := reader{b: b}
	d.version()
	var r Reply
	if d.err == nil {
		if d.off >= len(b) || b[d.off] > StatusStale {
			d.fail("status")
		} else {
			r.Status = b[d.off]
			d.off++
		}
	}
	r.Next = d.ranged("next", 0, math.MaxInt64)
	r.Epoch = d.ranged("epoch", 0, math.MaxInt64)
	if d.err == nil && d.off != len(b) {
		d.fail("end")
	}
	return r, d.err
}

func (m Release) Encode() []byte {
	b := appendString([]byte{wireV1}, m.Stream)
	b = binary.AppendVarint(b, int64(m.Partition))
	return binary.AppendVarint(b, m.UpTo)
}

func DecodeRelease(b []byte) (Release, error) {
	d := reader{b: b}
	d.version()
	var m Release
	m.Stream = d.string("stream")
	m.Partition = int32(d.ranged("partition", 0, math.MaxInt32))
	m.UpTo = d.ranged("up to", 0, math.MaxInt64)
	if d.err == nil && (d.off != len(b) || m.Stream == "") {
		d.fail("end")
	}
	return m, d.err
}

// reader reads fields; after the first error every read returns zero and
// err keeps the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (d *reader) fail(field string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s at byte %d", ErrMalformed, field, d.off)
	}
}

func (d *reader) version() {
	if len(d.b) == 0 || d.b[0] != wireV1 {
		d.fail("version")
		return
	}
	d.off = 1
}

func (d *reader) uvarint(field string) uint64 {
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

func (d *reader) ranged(field string, lo, hi int64) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 || v < lo || v > hi {
		d.fail(field)
		return 0
	}
	d.off += n
	return v
}

func (d *reader) take(field string, n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(field)
		return nil
	}
	s := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return s
}

func (d *reader) string(field string) string {
	n := d.uvarint(field)
	if d.err == nil && n > 1024 {
		d.fail(field)
		return ""
	}
	return string(d.take(field, n))
}
