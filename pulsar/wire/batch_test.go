package wire

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

// compress is what a Pulsar producer does with a payload.
func compress(t testing.TB, codec pb.CompressionType, in []byte) []byte {
	switch codec {
	case pb.CompressionType_LZ4:
		out := make([]byte, lz4.CompressBlockBound(len(in)))
		n, err := lz4.CompressBlock(in, out, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[:n]
	case pb.CompressionType_SNAPPY:
		return s2.EncodeSnappy(nil, in)
	case pb.CompressionType_ZLIB:
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write(in)
		w.Close()
		return b.Bytes()
	case pb.CompressionType_ZSTD:
		e, _ := zstd.NewWriter(nil)
		return e.EncodeAll(in, nil)
	}
	return in
}

func testBatch(t testing.TB, n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		md := &pb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i)), EventTime: proto.Uint64(uint64(i + 1)),
			Properties: []*pb.KeyValue{{Key: proto.String("h"), Value: proto.String("v")}}}
		var err error
		if b, err = AppendBatchMessage(b, md, bytes.Repeat([]byte{byte(i)}, i*10)); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// Every codec a Pulsar client compresses with, and a batch split back
// into its messages.
func TestDecompressAndSplit(t *testing.T) {
	batch := testBatch(t, 5)
	for _, codec := range []pb.CompressionType{pb.CompressionType_NONE, pb.CompressionType_LZ4, pb.CompressionType_SNAPPY,
		pb.CompressionType_ZLIB, pb.CompressionType_ZSTD} {
		out, err := Decompress(codec, compress(t, codec, batch), uint32(len(batch)), 1<<20)
		if err != nil || !bytes.Equal(out, batch) {
			t.Fatalf("%v: %v", codec, err)
		}
		msgs, err := SplitBatch(out, 5, 10)
		if err != nil || len(msgs) != 5 {
			t.Fatalf("%v: %d messages, %v", codec, len(msgs), err)
		}
		for i, m := range msgs {
			if len(m.Payload) != i*10 || m.Metadata.GetPartitionKey() != fmt.Sprint("k", i) || m.Metadata.GetEventTime() != uint64(i+1) {
				t.Fatalf("%v: message %d: %+v", codec, i, m)
			}
		}
		if codec == pb.CompressionType_NONE {
			continue
		}
		if _, err := Decompress(codec, compress(t, codec, batch), uint32(len(batch)-1), 1<<20); !errors.Is(err, ErrBadPayload) {
			t.Fatalf("%v: a wrong uncompressed size: %v", codec, err)
		}
	}
}

// The worst a client can send: a bomb claiming or holding more than the
// limit, a batch of more messages than allowed, sizes that lie.
func TestPayloadCaps(t *testing.T) {
	big := make([]byte, 2<<20)
	for _, codec := range []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_SNAPPY, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD} {
		c := compress(t, codec, big)
		if _, err := Decompress(codec, c, uint32(len(big)), 1<<20); !errors.Is(err, ErrPayloadTooLarge) {
			t.Fatalf("%v: declared beyond the limit: %v", codec, err)
		}
		if _, err := Decompress(codec, c, 1<<20, 1<<20); !errors.Is(err, ErrBadPayload) {
			t.Fatalf("%v: holds more than declared: %v", codec, err)
		}
	}
	if _, err := SplitBatch(testBatch(t, 11), 11, 10); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("too many messages: %v", err)
	}
	b := testBatch(t, 3)
	for name, c := range map[string]struct {
		b []byte
		n int
	}{"fewer": {b, 4}, "more": {b, 2}, "truncated": {b[:len(b)-1], 3}, "zero": {b, 0}} {
		if _, err := SplitBatch(c.b, c.n, 10); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
}

func FuzzBatch(f *testing.F) {
	b := testBatch(f, 3)
	f.Add(b, 3, int32(0), uint32(len(b)))
	f.Add(compress(f, pb.CompressionType_LZ4, b), 3, int32(pb.CompressionType_LZ4), uint32(len(b)))
	f.Add(compress(f, pb.CompressionType_ZSTD, b), 3, int32(pb.CompressionType_ZSTD), uint32(len(b)))
	f.Add(compress(f, pb.CompressionType_SNAPPY, b), 3, int32(pb.CompressionType_SNAPPY), uint32(len(b)))
	f.Add(compress(f, pb.CompressionType_ZLIB, b), 3, int32(pb.CompressionType_ZLIB), uint32(len(b)))
	f.Fuzz(func(t *testing.T, in []byte, n int, codec int32, size uint32) {
		out, err := Decompress(pb.CompressionType(codec), in, size, 1<<16)
		if err != nil {
			return
		}
		if pb.CompressionType(codec) != pb.CompressionType_NONE && len(out) != int(size) {
			t.Fatalf("%d bytes, declared %d", len(out), size)
		}
		msgs, err := SplitBatch(out, n, 100)
		if err == nil && len(msgs) != n {
			t.Fatalf("%d messages, want %d", len(msgs), n)
		}
	})
}
