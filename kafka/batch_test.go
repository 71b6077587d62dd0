package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"

	"github.com/klauspost/compress/s2"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz seed corpora")

// fuzzMaxDecompressed is the decompression bound under fuzzing: small, so
// that an input the mutator turns into a compression bomb costs
// microseconds, not a megabyte of inflating; the bound is enforced the same
// way whatever its size (TestDecompressionBounds checks 1 and 4 MiB).
const fuzzMaxDecompressed = 64 << 10

// seedBatches are meaningful record batches: every codec, idempotent and
// not, null keys, empty values, headers, xerial snappy, a bomb, bad CRC.
func seedBatches() map[string][]byte {
	rs := []kafkatest.Rec{
		{Key: nil, Value: []byte("v0")},
		{Key: []byte("k1"), Value: []byte{}, Headers: []tributary.Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}},
		{Key: []byte{}, Value: []byte("v2"), TSDelta: 1000},
	}
	out := map[string][]byte{}
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		out["batch_"+name] = kafkatest.Batch(kafkatest.BatchOpts{PID: 42, Epoch: 1, Seq: 7, Codec: int16(codec), FirstTS: 1700000000000}, rs...)
	}
	out["batch_plain"] = kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, rs...)
	// xerial-framed snappy, as the Java client writes it.
	plain := out["batch_plain"]
	x := append([]byte{}, xerialHeader...)
	x = binary.BigEndian.AppendUint32(x, 1)
	x = binary.BigEndian.AppendUint32(x, 1)
	blk := s2.EncodeSnappy(nil, plain[batchHeaderLen:])
	x = binary.BigEndian.AppendUint32(x, uint32(len(blk)))
	x = append(x, blk...)
	out["batch_xerial"] = rebatch(plain, 2, x)
	out["batch_zstd_bomb"] = kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 4}, kafkatest.Rec{Value: make([]byte, 4<<20)})
	out["batch_gzip_bomb"] = kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 1}, kafkatest.Rec{Value: make([]byte, 4<<20)})
	bad := bytes.Clone(plain)
	bad[len(bad)-1] ^= 1
	out["batch_bad_crc"] = bad
	return out
}

// rebatch replaces a batch's records with body under codec and fixes
// length and CRC.
func rebatch(b []byte, codec int16, body []byte) []byte {
	out := append(bytes.Clone(b[:batchHeaderLen]), body...)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint16(out[21:], uint16(codec))
	binary.BigEndian.PutUint32(out[crcOffset:], crc32c(out[crcStart:]))
	return out
}

// FuzzRecordBatch decodes arbitrary batches with a decompression bound.
// With fix set, the batch length and CRC are made consistent first, so
// that mutations reach decompression and record decoding instead of
// stopping at the checksum.
func FuzzRecordBatch(f *testing.F) {
	for name, b := range seedBatches() {
		f.Add(b, name != "batch_bad_crc")
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix && len(data) >= batchHeaderLen {
			data = bytes.Clone(data)
			binary.BigEndian.PutUint32(data[8:], uint32(len(data)-12))
			binary.BigEndian.PutUint32(data[crcOffset:], crc32c(data[crcStart:]))
		}
		b, err := ParseBatch(data, BatchLimits{MaxDecompressed: fuzzMaxDecompressed})
		cb, stored, cerr := CheckBatch(data, BatchLimits{MaxDecompressed: fuzzMaxDecompressed})
		if (err == nil) != (cerr == nil) {
			t.Fatalf("ParseBatch %v, CheckBatch %v", err, cerr)
		}
		if err != nil {
			return
		}
		// The uncompressed form CheckBatch returns (what the WAL stores)
		// is a valid batch of the same records.
		sb, err := ParseBatch(stored, BatchLimits{MaxDecompressed: fuzzMaxDecompressed})
		if err != nil || cb.Count != len(b.Records) || sb.Attributes&0x07 != 0 || !reflect.DeepEqual(sb.Records, b.Records) ||
			sb.ProducerID != b.ProducerID || sb.BaseSequence != b.BaseSequence || sb.FirstTimestamp != b.FirstTimestamp {
			t.Fatalf("uncompressed form: %v", err)
		}
		if len(b.Records) == 0 || int32(len(b.Records)) != b.LastOffsetDelta+1 {
			t.Fatalf("%d records, last offset delta %d", len(b.Records), b.LastOffsetDelta)
		}
		var total int
		for _, r := range b.Records {
			total += len(r.Key) + len(r.Value)
			for _, h := range r.Headers {
				total += len(h.Key) + len(h.Value)
			}
		}
		if total > fuzzMaxDecompressed+len(data) {
			t.Fatalf("decoded %d bytes from %d", total, len(data))
		}
	})
}

func TestDecompressionBounds(t *testing.T) {
	big := kafkatest.Rec{Value: bytes.Repeat([]byte("a"), 2<<20)}
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(name, func(t *testing.T) {
			b := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: int16(codec)}, big)
			if _, err := ParseBatch(b, BatchLimits{MaxDecompressed: 1 << 20}); codec != 0 && !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("2 MiB in %d bytes under a 1 MiB bound: %v", len(b), err)
			}
			got, err := ParseBatch(b, BatchLimits{MaxDecompressed: 4 << 20})
			if err != nil || !bytes.Equal(got.Records[0].Value, big.Value) {
				t.Fatalf("within bound: %v", err)
			}
		})
	}
	seeds := seedBatches()
	b, err := ParseBatch(seeds["batch_xerial"], BatchLimits{MaxDecompressed: 1 << 20})
	if err != nil || len(b.Records) != 3 || b.Records[0].Key != nil || string(b.Records[2].Value) != "v2" {
		t.Fatalf("xerial snappy: %v", err)
	}
}

// TestWriteFuzzSeeds regenerates the committed FuzzRecordBatch corpus with
// `go test ./kafka -run TestWriteFuzzSeeds -write-seeds`.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzRecordBatch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seedBatches() {
		fix := name != "batch_bad_crc"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", b, fix)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// TestCheckBatchStoredForm: for every codec (xerial snappy too),
// CheckBatch's uncompressed form (decompressed straight after a copy of
// the header) is byte for byte the uncompressed batch of the same
// records, and its decompression bound is exact: a body of exactly the
// bound passes, one byte less refuses it.
func TestCheckBatchStoredForm(t *testing.T) {
	rs := []kafkatest.Rec{{Value: bytes.Repeat([]byte("abc"), 5000)}, {Key: []byte{}, Value: nil}, {Key: []byte("k"), Value: []byte("v"),
		Headers: []tributary.Header{{Key: "h", Value: nil}}}}
	opts := kafkatest.BatchOpts{PID: 3, Epoch: 0, Seq: 11, FirstTS: 1700000000000}
	plain := kafkatest.Batch(opts, rs...)
	body := len(plain) - batchHeaderLen
	x := append([]byte{}, xerialHeader...)
	x = binary.BigEndian.AppendUint32(x, 1)
	x = binary.BigEndian.AppendUint32(x, 1)
	for _, part := range [][]byte{plain[batchHeaderLen : batchHeaderLen+body/2], plain[batchHeaderLen+body/2:]} {
		blk := s2.EncodeSnappy(nil, part)
		x = binary.BigEndian.AppendUint32(x, uint32(len(blk)))
		x = append(x, blk...)
	}
	batches := map[string][]byte{"xerial": rebatch(plain, 2, x)}
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		o := opts
		o.Codec = int16(codec)
		batches[name] = kafkatest.Batch(o, rs...)
	}
	for name, raw := range batches {
		_, stored, err := CheckBatch(raw, BatchLimits{MaxDecompressed: int64(body)})
		if err != nil || !bytes.Equal(stored, plain) {
			t.Errorf("%s: stored form differs from the plain batch (%v)", name, err)
		}
		if name == "none" {
			continue
		}
		if _, _, err := CheckBatch(raw, BatchLimits{MaxDecompressed: int64(body - 1)}); !errors.Is(err, ErrBatchTooLarge) {
			t.Errorf("%s: a body one byte over the bound: %v", name, err)
		}
	}
}

// BenchmarkCheckBatchSnappy checks a snappy batch of 100 records of 1 KiB
// (kgo's default codec) into its stored, uncompressed form.
func BenchmarkCheckBatchSnappy(b *testing.B) {
	rs := make([]kafkatest.Rec, 100)
	for i := range rs {
		rs[i] = kafkatest.Rec{Value: bytes.Repeat([]byte{byte(i), 'x', 'y'}, 341), TSDelta: int64(i)}
	}
	raw := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 2}, rs...)
	b.SetBytes(100 * 1023)
	b.ReportAllocs()
	for range b.N {
		if _, _, err := CheckBatch(raw, BatchLimits{MaxDecompressed: 64 << 20}); err != nil {
			b.Fatal(err)
		}
	}
}
