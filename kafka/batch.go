package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/tributary-io/tributary/internal/kbatch"
)

// Record batch (message format v2) decoding, for the produce side
// (kafka/produce); encode.go is the consume side's encoder.
//
// Layout (big endian): baseOffset int64, batchLength int32,
// partitionLeaderEpoch int32, magic int8 (=2), crc uint32, Attributes int16,
// LastOffsetDelta int32, FirstTimestamp int64, maxTimestamp int64,
// producerId int64, ProducerEpoch int16, BaseSequence int32, Records count
// int32, Records. The CRC-32C covers everything from Attributes (byte 21) to
// the end, so the base offset can be rewritten without recomputing it.
//
// Attributes: bits 0–2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4
// zstd), bit 3 timestamp type, bit 4 transactional, bit 5 control.

const (
	batchHeaderLen = 61
	crcOffset      = 17
	crcStart       = 21
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch errors; errorCode maps them to Kafka codes.
var (
	ErrCorruptBatch  = kbatch.ErrCorrupt
	ErrInvalidBatch  = kbatch.ErrInvalid
	ErrBatchTooLarge = errors.New("kafka: record batch too large")
)

// Batch is a decoded record batch (the produce side's view: the base
// offset and timestamps other than the first are not kept).
type Batch struct {
	Attributes      int16
	LastOffsetDelta int32
	FirstTimestamp  int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	Records         []BatchRecord
	// BodyBytes is the size of the records after decompression.
	BodyBytes int
	// Count is the number of records.
	Count int
}

// BatchRecord is one record of a Batch.
type BatchRecord = kbatch.Record

// Idempotent reports whether the batch carries a producer id.
func (b *Batch) Idempotent() bool { return b.ProducerID >= 0 }

// LastSequence is the sequence of the batch's last record.
func (b *Batch) LastSequence() int32 {
	return AddSeq(b.BaseSequence, int32(b.Count-1))
}

// BatchLimits bound what decoding one batch may allocate.
type BatchLimits struct {
	// MaxDecompressed bounds the batch's records after decompression
	// (ErrBatchTooLarge beyond).
	MaxDecompressed int64
	// MaxHeadersPerRecord bounds the headers of one record
	// (ErrTooManyHeaders beyond); 0 = DefaultMaxHeadersPerRecord.
	MaxHeadersPerRecord int
}

// DefaultMaxHeadersPerRecord is the default of BatchLimits.MaxHeadersPerRecord.
const DefaultMaxHeadersPerRecord = 1000

// ErrTooManyHeaders refuses a record with more headers than allowed: a few
// kilobytes of compressed empty headers would otherwise expand to millions
// of header values in memory (and in the WAL).
var ErrTooManyHeaders = kbatch.ErrTooManyHeaders

// ParseBatch decodes exactly one v2 record batch from raw, checking the
// CRC and decompressing at most lim.MaxDecompressed bytes.
func ParseBatch(raw []byte, lim BatchLimits) (*Batch, error) {
	b, _, err := parseBatch(raw, lim, true, nil)
	return b, err
}

// CheckBatch checks raw as ParseBatch does — every record is parsed —
// without keeping its records (b.Records is nil, b.Count is set, nothing
// is allocated per record), and returns it as an uncompressed batch: raw
// itself if it is not compressed, else a new batch of the decompressed
// records with the same header, codec 0 and its CRC-32C recomputed. That
// is the form the WAL stores (wal.Batch).
func CheckBatch(raw []byte, lim BatchLimits) (b *Batch, uncompressed []byte, err error) {
	var dst []byte
	if len(raw) >= batchHeaderLen && raw[22]&0x07 != 0 {
		// Decompressed straight after a copy of the header: the body is
		// not copied again.
		dst = append(make([]byte, 0, batchHeaderLen), raw[:batchHeaderLen]...)
	}
	b, out, err := parseBatch(raw, lim, false, dst)
	if err != nil {
		return nil, nil, err
	}
	if b.Attributes&0x07 == 0 {
		return b, raw, nil
	}
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint16(out[21:], uint16(b.Attributes&^0x07))
	binary.BigEndian.PutUint32(out[crcOffset:], crc32.Checksum(out[crcStart:], castagnoli))
	return b, out, nil
}

// parseBatch is ParseBatch, keeping the records (keep) or only checking
// them. It also returns the records' bytes: raw's own if uncompressed,
// else dst with the decompressed records appended.
func parseBatch(raw []byte, lim BatchLimits, keep bool, dst []byte) (*Batch, []byte, error) {
	if lim.MaxHeadersPerRecord <= 0 {
		lim.MaxHeadersPerRecord = DefaultMaxHeadersPerRecord
	}
	maxDecompressed := lim.MaxDecompressed
	if len(raw) < batchHeaderLen {
		return nil, nil, fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptBatch, len(raw))
	}
	length := int32(binary.BigEndian.Uint32(raw[8:]))
	if length < batchHeaderLen-12 || int64(length) != int64(len(raw)-12) {
		if int64(length) < int64(len(raw)-12) && length >= batchHeaderLen-12 {
			return nil, nil, fmt.Errorf("%w: more than one batch in a partition's records", ErrInvalidBatch)
		}
		return nil, nil, fmt.Errorf("%w: batch length %d, have %d bytes", ErrCorruptBatch, length, len(raw)-12)
	}
	if magic := int8(raw[16]); magic != 2 {
		return nil, nil, fmt.Errorf("%w: message format (magic) %d, only 2 is supported", ErrInvalidBatch, magic)
	}
	if want, got := binary.BigEndian.Uint32(raw[crcOffset:]), crc32.Checksum(raw[crcStart:], castagnoli); want != got {
		return nil, nil, fmt.Errorf("%w: crc32c %08x, computed %08x", ErrCorruptBatch, want, got)
	}
	b := &Batch{
		Attributes:      int16(binary.BigEndian.Uint16(raw[21:])),
		LastOffsetDelta: int32(binary.BigEndian.Uint32(raw[23:])),
		FirstTimestamp:  int64(binary.BigEndian.Uint64(raw[27:])),
		ProducerID:      int64(binary.BigEndian.Uint64(raw[43:])),
		ProducerEpoch:   int16(binary.BigEndian.Uint16(raw[51:])),
		BaseSequence:    int32(binary.BigEndian.Uint32(raw[53:])),
	}
	count := int32(binary.BigEndian.Uint32(raw[57:]))
	if b.Attributes&0x20 != 0 {
		return nil, nil, fmt.Errorf("%w: control batches cannot be produced", ErrInvalidBatch)
	}
	if b.Attributes&0x10 != 0 {
		return nil, nil, fmt.Errorf("%w: transactional batches are not supported", ErrInvalidBatch)
	}
	if count <= 0 || count != b.LastOffsetDelta+1 {
		return nil, nil, fmt.Errorf("%w: %d Records with last offset delta %d", ErrInvalidBatch, count, b.LastOffsetDelta)
	}
	if b.Idempotent() && (b.BaseSequence < 0 || b.ProducerEpoch < 0) {
		return nil, nil, fmt.Errorf("%w: producer id %d with epoch %d sequence %d", ErrInvalidBatch, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
	}
	out, err := decompress(b.Attributes&0x07, raw[batchHeaderLen:], maxDecompressed, dst)
	if err != nil {
		return nil, nil, err
	}
	body := out
	if b.Attributes&0x07 != 0 {
		body = out[len(dst):]
	}
	b.BodyBytes, b.Count = len(body), int(count)
	// Every record takes at least 7 bytes, which bounds the allocation.
	if int64(count) > int64(len(body))/7 {
		return nil, nil, fmt.Errorf("%w: %d Records in %d bytes", ErrCorruptBatch, count, len(body))
	}
	if keep {
		b.Records = make([]BatchRecord, count)
	}
	rest := body
	for i := range int(count) {
		var rec *BatchRecord
		if keep {
			rec = &b.Records[i]
		}
		n, err := parseRecord(rest, rec, int32(i), lim.MaxHeadersPerRecord)
		if err != nil {
			return nil, nil, fmt.Errorf("record %d: %w", i, err)
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(rest))
	}
	return b, out, nil
}

// parseRecord decodes one record from the front of b and returns its size
// (kbatch.ParseRecord, shared with the WAL, which stores batches).
func parseRecord(b []byte, rec *BatchRecord, wantDelta int32, maxHeaders int) (int, error) {
	return kbatch.ParseRecord(b, (*kbatch.Record)(rec), wantDelta, maxHeaders)
}

// zstdDecoders holds one shared decoder per bound: DecodeAll is safe for
// concurrent use, and WithDecoderMaxMemory makes it refuse output beyond
// the bound instead of allocating it.
var zstdDecoders sync.Map // int64 -> *zstd.Decoder

// zstdDecoderFor returns the decoder for a decompression limit. Its memory
// and window bound is the limit but at least 8 MiB, the window of zstd's
// default encoder (klauspost refuses windows above the memory bound), so
// that ordinary producers are not refused; decompress checks the output
// against the exact limit.
func zstdDecoderFor(limit int64) (*zstd.Decoder, error) {
	if d, ok := zstdDecoders.Load(limit); ok {
		return d.(*zstd.Decoder), nil
	}
	bound := min(max(uint64(limit), 8<<20), zstd.MaxWindowSize)
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(bound), zstd.WithDecoderMaxWindow(bound))
	if err != nil {
		return nil, err
	}
	if prev, loaded := zstdDecoders.LoadOrStore(limit, d); loaded {
		d.Close()
		return prev.(*zstd.Decoder), nil
	}
	return d, nil
}

// xerialHeader starts snappy data framed the way the Java client frames it.
var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decompress returns the Records bytes of a batch, refusing to produce more
// than max bytes (ErrBatchTooLarge): in itself if uncompressed (codec 0),
// else dst with the decompressed bytes appended.
func decompress(codec int16, in []byte, max int64, dst []byte) ([]byte, error) {
	tooLarge := fmt.Errorf("%w: Records decompress to more than %d bytes", ErrBatchTooLarge, max)
	var (
		out []byte
		err error
	)
	switch codec {
	case 0:
		return in, nil
	case 1: // gzip
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(in)); err == nil {
			out, err = readMax(dst, zr, max)
		}
	case 2: // snappy: raw block (librdkafka, kgo, sarama) or xerial framing (Java)
		if bytes.HasPrefix(in, xerialHeader) {
			out, err = unxerial(dst, in, max+int64(len(dst)))
		} else {
			out, err = snappyBlock(dst, in, max+int64(len(dst)))
		}
	case 3: // lz4 frame
		out, err = readMax(dst, lz4.NewReader(bytes.NewReader(in)), max)
	case 4: // zstd
		var n uint64
		if n, err = zstdFrameSize(in); err == nil && n > uint64(max) {
			return nil, tooLarge
		}
		var d *zstd.Decoder
		if err == nil {
			d, err = zstdDecoderFor(max)
		}
		if err == nil {
			out, err = d.DecodeAll(in, dst)
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || int64(len(out)-len(dst)) > max {
				return nil, tooLarge
			}
		}
	default:
		return nil, fmt.Errorf("%w: compression codec %d", ErrCorruptBatch, codec)
	}
	if errors.Is(err, ErrBatchTooLarge) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("%w: decompress (codec %d): %v", ErrCorruptBatch, codec, err)
	}
	return out, nil
}

// zstdFrameSize returns the declared content size of the first frame, or 0.
func zstdFrameSize(in []byte) (uint64, error) {
	var h zstd.Header
	if err := h.Decode(in); err != nil {
		return 0, err
	}
	if h.HasFCS {
		return h.FrameContentSize, nil
	}
	return 0, nil
}

// readMax reads r to the end, appended to dst, failing with
// ErrBatchTooLarge past max bytes read.
func readMax(dst []byte, r io.Reader, max int64) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	n, err := io.Copy(buf, io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, ErrBatchTooLarge
	}
	return buf.Bytes(), nil
}

// snappyBlock appends the decoded snappy block to dst (decoded in place:
// no second copy), checking the declared length against the bound on
// len(dst)+n before allocating.
func snappyBlock(dst, in []byte, max int64) ([]byte, error) {
	n, err := s2.DecodedLen(in)
	if err != nil {
		return nil, err
	}
	if int64(len(dst))+int64(n) > max {
		return nil, ErrBatchTooLarge
	}
	dst = slices.Grow(dst, n)
	at := dst[len(dst) : len(dst)+n]
	out, err := s2.Decode(at, in)
	if err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, errors.New("snappy block shorter than declared")
	}
	if n > 0 && &out[0] != &at[0] {
		copy(at, out)
	}
	return dst[:len(dst)+n], nil
}

// unxerial decodes xerial-framed snappy: header (8 bytes), version and
// compatible version (4 bytes each), then (int32 length, snappy block)*.
func unxerial(dst, in []byte, max int64) ([]byte, error) {
	if len(in) < 16 {
		return nil, errors.New("short xerial header")
	}
	in = in[16:]
	out := dst
	for len(in) > 0 {
		if len(in) < 4 {
			return nil, errors.New("truncated xerial chunk length")
		}
		n := binary.BigEndian.Uint32(in)
		in = in[4:]
		if n > uint32(len(in)) || n > math.MaxInt32 {
			return nil, errors.New("truncated xerial chunk")
		}
		var err error
		if out, err = snappyBlock(out, in[:n], max); err != nil {
			return nil, err
		}
		in = in[n:]
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// Sequence arithmetic: sequences run 0..MaxInt32 and wrap to 0.

// AddSeq is s+n in sequence arithmetic.
func AddSeq(s, n int32) int32 { return kbatch.AddSeq(s, n) }

// NextSeq is the sequence after s.
func NextSeq(s int32) int32 { return AddSeq(s, 1) }

// SeqDelta is (b - a) modulo 2^31.
func SeqDelta(a, b int32) int32 {
	d := (int64(b) - int64(a)) % (math.MaxInt32 + 1)
	if d < 0 {
		d += math.MaxInt32 + 1
	}
	return int32(d)
}
