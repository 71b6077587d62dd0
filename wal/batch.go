package wal

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/kbatch"
)

// Kafka record batches stored as received.
//
// A produced Kafka record batch is stored as ONE entry covering its N
// records' N consecutive offsets, instead of N EncodeRecord records: the
// produce path builds no per-record objects and the WAL copies the batch
// once. Read (and so every reader: the uplink, replication, takeover,
// producer state) decodes such an entry into the same tributary.Record
// values the per-record form gives, and can start in the middle of it.
//
// The batch is stored as an uncompressed message format v2 batch whose
// base offset is the entry's first offset (the client's compressed batch
// is decompressed by the produce side, which has to decompress it to
// validate it anyway; the attributes' codec and the CRC-32C are then
// rewritten so the batch stays a valid Kafka batch). Stored uncompressed,
// a batch reads without decompression and its bytes count against the
// disk budget as the per-record form did; storing a compressed batch as
// received would save disk for compressible data at the cost of a
// decompression on every read.
//
// Entry layout (the first byte distinguishes it from an EncodeRecord
// record, whose first byte is 1 or 2):
//
//	formatKafkaBatch byte (3)
//	Stream string, Partition varint, Offset varint (the first record's), Epoch varint, Timestamp varint
//	Topic string, Source string, ClientID string, Node string, Principal string
//	record count uvarint (= the batch's records = the offsets covered)
//	the record batch (uncompressed, magic 2, base offset = Offset), to the end
//
// A chunk holding such an entry is of version 2 (chunkV2):
//
//	version byte (2)
//	first offset, 8 bytes big-endian (must equal the key)
//	entry count uvarint (>= 1)
//	count × (entry length uvarint (>= 1), offsets covered uvarint (>= 1))
//	the entries, concatenated (EncodeRecord records covering 1 offset, batch entries)
//	CRC32C (Castagnoli) of all preceding bytes, 4 bytes big-endian
//
// Chunks of records only are still written as version 1, which nodes
// without batch entries read. Release frees a batch entry's bytes when it
// passes the entry's last offset; before that, its records below
// Released are invisible, as in a partly released chunk.
const (
	formatKafkaBatch = 3
	chunkV2          = 2
)

// Batch is a Kafka record batch to store as one entry (Op.Batch): the
// write contract's tributary.Batch (its fields and their rules are
// documented there), as a WAL type with the WAL's methods. Callers convert
// a *tributary.Batch to *Batch in place.
type Batch tributary.Batch

// count is the number of records of a batch (checked by enqueue).
func (b *Batch) count() int { return int(int32(be.Uint32(b.Records[57:]))) }

// Count is the number of records of b (whose Records hold at least a
// batch header).
func (b *Batch) Count() int {
	if len(b.Records) < kbatch.HeaderLen {
		return 0
	}
	return b.count()
}

// Decode returns b's records from index skip on as Read returns them
// once b is stored (Offset and Timestamp as set): for a caller that needs
// a few of them as records (the node's recent-records view, a test).
func (b *Batch) Decode(skip int) ([]*tributary.Record, error) {
	if err := checkBatch(b); err != nil {
		return nil, err
	}
	e := batchEntry{stream: b.Stream, topic: b.Topic, source: b.Source, clientID: b.ClientID, node: b.Node,
		principal: b.Principal, partition: b.Partition, offset: b.Offset, epoch: b.Epoch, timestamp: b.Timestamp,
		count: b.count(), batch: b.Records}
	return e.records(skip, e.count)
}

// ValueBytes is the sum of b's records' value sizes, counted without
// decoding them into records.
func (b *Batch) ValueBytes() int64 {
	if checkBatch(b) != nil {
		return 0
	}
	body := b.Records[kbatch.HeaderLen:]
	var n int64
	for i := range b.count() {
		var r kbatch.Record
		m, err := kbatch.ParseRecord(body, &r, int32(i), math.MaxInt32)
		if err != nil {
			break
		}
		n += int64(len(r.Value))
		body = body[m:]
	}
	return n
}

// checkBatch checks what the WAL relies on of a batch.
func checkBatch(b *Batch) error {
	if err := checkStream(b.Stream); err != nil {
		return err
	}
	r := b.Records
	if len(r) < kbatch.HeaderLen || int64(be.Uint32(r[8:])) != int64(len(r)-12) || r[16] != 2 || r[22]&0x07 != 0 {
		return fmt.Errorf("%w: not an uncompressed v2 record batch", ErrInvalid)
	}
	if n := int32(be.Uint32(r[57:])); n < 1 || int64(n) > int64(len(r)-kbatch.HeaderLen) {
		return fmt.Errorf("%w: record batch of %d records", ErrInvalid, n)
	}
	return nil
}

// appendBatchEntry appends b's entry, with offset and timestamp as set,
// to dst; the batch's base offset is rewritten in the copy.
func appendBatchEntry(dst []byte, b *Batch) []byte {
	dst = appendBatchHeader(dst, b)
	start := len(dst)
	dst = append(dst, b.Records...)
	be.PutUint64(dst[start:], uint64(b.Offset)) // the CRC-32C does not cover it
	return dst
}

// appendBatchHeader appends b's entry up to its record batch.
func appendBatchHeader(dst []byte, b *Batch) []byte {
	dst = append(dst, formatKafkaBatch)
	dst = appendString(dst, b.Stream)
	dst = binary.AppendVarint(dst, int64(b.Partition))
	dst = binary.AppendVarint(dst, b.Offset)
	dst = binary.AppendVarint(dst, b.Epoch)
	dst = binary.AppendVarint(dst, b.Timestamp)
	dst = appendString(dst, b.Topic)
	dst = appendString(dst, b.Source)
	dst = appendString(dst, b.ClientID)
	dst = appendString(dst, b.Node)
	dst = appendString(dst, b.Principal)
	return binary.AppendUvarint(dst, uint64(b.count()))
}

// batchEntry is a decoded batch entry's header; batch aliases the input.
type batchEntry struct {
	stream, topic, source, clientID, node, principal string
	partition                                        int32
	offset, epoch, timestamp                         int64
	count                                            int
	batch                                            []byte
}

// decodeBatchHeader decodes a batch entry up to its record batch, checking
// the batch's header against it. It never panics; errors wrap ErrCorrupt.
func decodeBatchHeader(b []byte) (batchEntry, error) {
	if len(b) == 0 || b[0] != formatKafkaBatch {
		return batchEntry{}, fmt.Errorf("%w: not a batch entry", ErrCorrupt)
	}
	d := decoder{b: b, off: 1}
	var e batchEntry
	e.stream = d.string("stream")
	e.partition = d.int32("partition")
	e.offset = d.ranged("offset", 0, math.MaxInt64)
	e.epoch = d.varint("epoch")
	e.timestamp = d.varint("timestamp")
	e.topic = d.string("topic")
	e.source = d.string("source")
	e.clientID = d.string("client id")
	e.node = d.string("node")
	e.principal = d.string("principal")
	n := d.uvarint("record count")
	if d.err != nil {
		return batchEntry{}, d.err
	}
	e.batch = b[d.off:]
	r := e.batch
	if n < 1 || n > math.MaxInt32 || len(r) < kbatch.HeaderLen || int64(be.Uint32(r[8:])) != int64(len(r)-12) || r[16] != 2 ||
		r[22]&0x07 != 0 || uint64(be.Uint32(r[57:])) != n || int64(be.Uint64(r)) != e.offset || e.offset > math.MaxInt64-int64(n) {
		return batchEntry{}, fmt.Errorf("%w: bad record batch in a batch entry", ErrCorrupt)
	}
	e.count = int(n)
	return e, nil
}

// decodeBatchEntry decodes the records of a batch entry from index skip
// on (offsets offset+skip, …). The records do not alias b.
func decodeBatchEntry(b []byte, skip int) ([]*tributary.Record, error) {
	e, err := decodeBatchHeader(b)
	if err != nil {
		return nil, err
	}
	return e.records(skip, e.count)
}

// view is the tributary.BatchView of e's records [skip, skip+n), over
// batch (e's batch bytes or a copy).
func (e *batchEntry) view(skip, n int, batch []byte) *tributary.BatchView {
	return &tributary.BatchView{Stream: e.stream, Topic: e.topic, Source: e.source, ClientID: e.clientID, Node: e.node,
		Principal: e.principal, Partition: e.partition, Epoch: e.epoch, Timestamp: e.timestamp,
		Offset: e.offset + int64(skip), Skip: skip, Count: n, Records: batch}
}

// DecodeView decodes the records of a batch view (ReadEntriesInto) as Read
// returns them.
func DecodeView(v *tributary.BatchView) ([]*tributary.Record, error) {
	e := batchEntry{stream: v.Stream, topic: v.Topic, source: v.Source, clientID: v.ClientID, node: v.Node,
		principal: v.Principal, partition: v.Partition, offset: v.Offset - int64(v.Skip), epoch: v.Epoch,
		timestamp: v.Timestamp, batch: v.Records}
	r := v.Records
	if len(r) < kbatch.HeaderLen || v.Skip < 0 || v.Count < 0 {
		return nil, fmt.Errorf("%w: batch view of %d bytes", ErrCorrupt, len(r))
	}
	e.count = int(int32(be.Uint32(r[57:])))
	if v.Skip+v.Count > e.count {
		return nil, fmt.Errorf("%w: batch view [%d, %d) of %d records", ErrCorrupt, v.Skip, v.Skip+v.Count, e.count)
	}
	return e.records(v.Skip, v.Count)
}

// Records decodes entries (ReadEntriesInto) into the records Read returns.
func Records(es []tributary.Entry) ([]*tributary.Record, error) {
	var out []*tributary.Record
	for _, e := range es {
		if e.Record != nil {
			out = append(out, e.Record)
			continue
		}
		rs, err := DecodeView(e.Batch)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// records decodes e's records [skip, skip+n) (every record is checked);
// they do not alias e's batch (what they hold is copied into one buffer).
func (e *batchEntry) records(skip, n int) ([]*tributary.Record, error) {
	r := e.batch
	firstTS := int64(be.Uint64(r[27:]))
	pid := int64(be.Uint64(r[43:]))
	pepoch := int16(be.Uint16(r[51:]))
	baseSeq := int32(be.Uint32(r[53:]))
	body := r[kbatch.HeaderLen:]
	if e.count > len(body)/7 { // a record takes at least 7 bytes
		return nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorrupt, e.count, len(body))
	}
	skip = min(max(skip, 0), e.count)
	end := skip + min(max(n, 0), e.count-skip)
	kept := make([]kbatch.Record, end-skip)
	size := 0
	for i := range e.count {
		var dst *kbatch.Record
		if i >= skip && i < end {
			dst = &kept[i-skip]
		}
		n, err := kbatch.ParseRecord(body, dst, int32(i), math.MaxInt32)
		if err != nil {
			return nil, fmt.Errorf("%w: batch entry record %d: %v", ErrCorrupt, i, err)
		}
		if dst != nil {
			size += n // at least what the record's bytes take
		}
		body = body[n:]
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after a batch entry's last record", ErrCorrupt, len(body))
	}
	buf := make([]byte, 0, size)
	own := func(v []byte) []byte { // a copy in buf, nil and empty kept apart
		if v == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	recs := make([]tributary.Record, len(kept))
	out := make([]*tributary.Record, len(kept))
	for j := range kept {
		kr, i := &kept[j], skip+j
		for h := range kr.Headers {
			kr.Headers[h].Value = own(kr.Headers[h].Value)
		}
		seq := int32(-1)
		if pid >= 0 {
			seq = kbatch.AddSeq(baseSeq, int32(i))
		}
		recs[j] = tributary.Record{Stream: e.stream, Partition: e.partition, Offset: e.offset + int64(i), Epoch: e.epoch,
			Timestamp: e.timestamp, Topic: e.topic, Key: own(kr.Key), Value: own(kr.Value), Headers: kr.Headers,
			Source: e.source, ClientID: e.clientID, Node: e.node, Principal: e.principal,
			ProducerID: pid, ProducerEpoch: pepoch, Sequence: seq, ProducerTimestamp: firstTS + kr.TimestampDelta}
		out[j] = &recs[j]
	}
	return out, nil
}

// entryTimestamp is the accept timestamp of an entry (a record or a
// batch entry).
func entryTimestamp(v []byte) (int64, error) {
	if len(v) > 0 && v[0] == formatKafkaBatch {
		e, err := decodeBatchHeader(v)
		return e.timestamp, err
	}
	return recordTimestamp(v)
}

// timestampAt is the accept timestamp of the record at relative offset rel.
func (c *chunk) timestampAt(rel int64) (int64, error) {
	return entryTimestamp(c.record(c.entryOf(rel)))
}

// encodeChunkV2 appends a version 2 chunk of entries, entry i covering
// ns[i] offsets, the first at offset first, to dst.
func encodeChunkV2(dst []byte, first int64, entries [][]byte, ns []int) []byte {
	return encodeChunkV(dst, first, entries, ns)
}
