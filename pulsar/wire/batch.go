package wire

// The payload of a producer's SEND: compressed as its metadata's
// compression says (uncompressed_size the size before), and a batch
// (num_messages_in_batch set) a sequence of
//
//	[4: size][SingleMessageMetadata][payload_size bytes of payload]
//
// Both decoders bound what they produce by the caller's limit before
// allocating, so a small frame cannot make the server hold more.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

// Errors of a payload; the server answers SEND_ERROR, nothing is stored.
var (
	// ErrPayloadTooLarge: the payload decompresses (or claims to) to
	// more than the limit, or a batch holds more messages than allowed.
	ErrPayloadTooLarge = errors.New("pulsar: payload too large")
	// ErrBadPayload: the payload does not decode as its metadata says.
	ErrBadPayload = errors.New("pulsar: malformed payload")
)

// Decompress returns the payload as it was before the producer
// compressed it with codec to size bytes, refusing a size beyond max
// (ErrPayloadTooLarge) and output that differs from size (ErrBadPayload).
// An uncompressed payload is returned as is.
func Decompress(codec pb.CompressionType, in []byte, size uint32, max int) ([]byte, error) {
	if codec == pb.CompressionType_NONE {
		return in, nil
	}
	if uint64(size) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes uncompressed, limit %d", ErrPayloadTooLarge, size, max)
	}
	out := make([]byte, size)
	var n int
	var err error
	switch codec {
	case pb.CompressionType_LZ4: // a raw LZ4 block
		n, err = lz4.UncompressBlock(in, out)
	case pb.CompressionType_SNAPPY: // a raw snappy block
		var l int
		if l, err = s2.DecodedLen(in); err == nil && l != int(size) {
			err = fmt.Errorf("block of %d bytes", l)
		}
		if err == nil {
			_, err = s2.Decode(out, in)
			n = l
		}
	case pb.CompressionType_ZLIB:
		var zr io.ReadCloser
		if zr, err = zlib.NewReader(bytes.NewReader(in)); err == nil {
			n, err = readExactly(zr, out)
		}
	case pb.CompressionType_ZSTD:
		var d *zstd.Decoder
		if d, err = zstdDecoder(); err == nil {
			var got []byte
			got, err = d.DecodeAll(in, out[:0])
			if err == nil && len(got) != int(size) {
				err = fmt.Errorf("%d bytes", len(got))
			}
			n = len(got)
		}
	default:
		return nil, fmt.Errorf("%w: compression %v", ErrBadPayload, codec)
	}
	if err == nil && n != int(size) {
		err = fmt.Errorf("%d bytes", n)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v payload, %d bytes uncompressed declared: %v", ErrBadPayload, codec, size, err)
	}
	return out, nil
}

// readExactly fills out from r and checks that r ends there.
func readExactly(r io.Reader, out []byte) (int, error) {
	n, err := io.ReadFull(r, out)
	if err != nil {
		return n, err
	}
	var one [1]byte
	if m, _ := r.Read(one[:]); m > 0 {
		return n, errors.New("more than declared")
	}
	return n, nil
}

var (
	zstdOnce sync.Once
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// zstdDecoder is one shared decoder (DecodeAll is safe for concurrent
// use) that never allocates beyond the frame limit: output goes into the
// caller's buffer, of the declared size, and a frame that needs more
// memory is refused.
func zstdDecoder() (*zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(DefaultMaxFrameBytes+FramePadding), zstd.WithDecoderMaxWindow(8<<20))
	})
	return zstdDec, zstdErr
}

// BatchMessage is one message of a batch; Payload aliases the batch.
type BatchMessage struct {
	Metadata *pb.SingleMessageMetadata
	Payload  []byte
}

// SplitBatch decodes the n messages of an uncompressed batch payload,
// refusing more than max messages (ErrPayloadTooLarge) and anything but
// exactly n of them (ErrBadPayload).
func SplitBatch(b []byte, n, max int) ([]BatchMessage, error) {
	if n < 1 || n > max {
		return nil, fmt.Errorf("%w: %d messages in a batch, limit %d", ErrPayloadTooLarge, n, max)
	}
	out := make([]BatchMessage, 0, min(n, len(b)/4+1))
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: message %d of %d: truncated", ErrBadPayload, i, n)
		}
		sz := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(sz) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: message %d of %d: metadata of %d bytes in %d", ErrBadPayload, i, n, sz, len(b))
		}
		md := &pb.SingleMessageMetadata{}
		if err := proto.Unmarshal(b[:sz], md); err != nil {
			return nil, fmt.Errorf("%w: message %d of %d: %v", ErrBadPayload, i, n, err)
		}
		b = b[sz:]
		ps := md.GetPayloadSize()
		if ps < 0 || int(ps) > len(b) {
			return nil, fmt.Errorf("%w: message %d of %d: payload of %d bytes in %d", ErrBadPayload, i, n, ps, len(b))
		}
		out = append(out, BatchMessage{Metadata: md, Payload: b[:ps:ps]})
		b = b[ps:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last message", ErrBadPayload, len(b))
	}
	return out, nil
}

// AppendBatchMessage appends one message to a batch payload (what a
// producer does; tests and tools build batches with it).
func AppendBatchMessage(b []byte, md *pb.SingleMessageMetadata, payload []byte) ([]byte, error) {
	md.PayloadSize = proto.Int32(int32(len(payload)))
	b, err := appendSized(b, md)
	if err != nil {
		return b, err
	}
	return append(b, payload...), nil
}
