package produce

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/wal"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz seed corpora")

const fuzzMaxDecompressed = 1 << 20

// seedBatches are meaningful record batches: every codec, idempotent and
// not, null keys, empty values, headers, xerial snappy, a bomb, bad CRC.
func seedBatches() map[string][]byte {
	rs := []testRec{
		{key: nil, value: []byte("v0")},
		{key: []byte("k1"), value: []byte{}, headers: []wal.Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}},
		{key: []byte{}, value: []byte("v2"), tsDelta: 1000},
	}
	out := map[string][]byte{}
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		out["batch_"+name] = buildBatch(batchOpts{pid: 42, epoch: 1, seq: 7, codec: int16(codec), firstTS: 1700000000000}, rs...)
	}
	out["batch_plain"] = buildBatch(batchOpts{pid: -1, epoch: -1, seq: -1}, rs...)
	// xerial-framed snappy, as the Java client writes it.
	plain := out["batch_plain"]
	x := append([]byte{}, xerialHeader...)
	x = binary.BigEndian.AppendUint32(x, 1)
	x = binary.BigEndian.AppendUint32(x, 1)
	blk := s2.EncodeSnappy(nil, plain[batchHeaderLen:])
	x = binary.BigEndian.AppendUint32(x, uint32(len(blk)))
	x = append(x, blk...)
	out["batch_xerial"] = rebatch(plain, 2, x)
	out["batch_zstd_bomb"] = buildBatch(batchOpts{pid: -1, epoch: -1, seq: -1, codec: 4}, testRec{value: make([]byte, 4<<20)})
	out["batch_gzip_bomb"] = buildBatch(batchOpts{pid: -1, epoch: -1, seq: -1, codec: 1}, testRec{value: make([]byte, 4<<20)})
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

func seedRequests() map[string][]byte {
	out := map[string][]byte{}
	for _, v := range []int16{0, 3} {
		r := kmsg.NewPtrApiVersionsRequest()
		r.Version, r.ClientSoftwareName, r.ClientSoftwareVersion = v, "kgo", "1.0"
		out[fmt.Sprintf("apiversions_v%d", v)] = encodeRequest(1, "client", r)
	}
	fut := encodeRequest(1, "client", &kmsg.ApiVersionsRequest{Version: 4})
	binary.BigEndian.PutUint16(fut[6:], 99)
	out["apiversions_future"] = fut
	for _, v := range []int16{0, 4, 12} {
		r := kmsg.NewPtrMetadataRequest()
		r.Version = v
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr("factory.events")
		r.Topics = append(r.Topics, t)
		if v == 12 {
			r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{TopicID: kafka.TopicID("factory.events")})
			r.AllowAutoTopicCreation = true
		}
		out[fmt.Sprintf("metadata_v%d", v)] = encodeRequest(2, "client", r)
	}
	all := kmsg.NewPtrMetadataRequest()
	all.Version = 9
	out["metadata_all_v9"] = encodeRequest(3, "", all)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	out["initproducerid_v4"] = encodeRequest(4, "client", ip)
	fr := kmsg.NewPtrFetchRequest()
	fr.Version = 12
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "factory.events"
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fr.Topics = append(fr.Topics, ft)
	out["fetch_v12"] = encodeRequest(5, "client", fr)
	batches := seedBatches()
	for _, v := range []int16{3, 9, 12} {
		out[fmt.Sprintf("produce_v%d_zstd", v)] = encodeRequest(6, "client", produceReq(v, "factory.events", 0, batches["batch_zstd"]))
	}
	out["produce_v7_lz4"] = encodeRequest(7, "client", produceReq(7, "factory.events", 0, batches["batch_lz4"]))
	out["produce_v9_plain_bad_topic"] = encodeRequest(8, "client", produceReq(9, "bad", 0, batches["batch_plain"]))
	out["truncated"] = out["produce_v9_zstd"][:40]
	return out
}

// TestWriteFuzzSeeds regenerates the committed seed corpora with
// `go test ./kafka/produce -run TestWriteFuzzSeeds -write-seeds`.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz")
	}
	write := func(fuzz string, seeds map[string][]byte) {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	batchDir := filepath.Join("testdata", "fuzz", "FuzzRecordBatch")
	if err := os.MkdirAll(batchDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seedBatches() {
		fix := name != "batch_bad_crc"
		if err := os.WriteFile(filepath.Join(batchDir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", b, fix)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("FuzzRequestDecode", seedRequests())
}

// FuzzRequestDecode feeds bytes to the frame reader and request decoder,
// and hands what decodes to the handlers (over an in-memory backend).
func FuzzRequestDecode(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	be := newFakeBackend("edge-1")
	be.addStream("factory.events", "edge-1")
	s, err := NewServer(Config{Config: kafka.Config{Addr: "127.0.0.1:0", MaxFrameBytes: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, MaxDecompressedBytes: fuzzMaxDecompressed}, be)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := kafka.ReadFrame(bytes.NewReader(data), 1<<20)
		if err != nil {
			return
		}
		req, err := kafka.DecodeRequest(frame, apis)
		if err != nil {
			return
		}
		if req.Unsupported && req.Key != kafka.ApiVersionsKey {
			t.Fatalf("unsupported version admitted for key %d", req.Key)
		}
		resp, _ := s.Handle(context.Background(), req)
		if resp != nil {
			out := kafka.AppendResponse(nil, req, resp)
			if int(binary.BigEndian.Uint32(out)) != len(out)-4 {
				t.Fatal("bad response frame size")
			}
		}
	})
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
		b, err := parseBatch(data, fuzzMaxDecompressed)
		if err != nil {
			return
		}
		if len(b.records) == 0 || int32(len(b.records)) != b.lastOffsetDelta+1 {
			t.Fatalf("%d records, last offset delta %d", len(b.records), b.lastOffsetDelta)
		}
		var total int
		for _, r := range b.records {
			total += len(r.key) + len(r.value)
			for _, h := range r.headers {
				total += len(h.Key) + len(h.Value)
			}
		}
		if total > fuzzMaxDecompressed+len(data) {
			t.Fatalf("decoded %d bytes from %d", total, len(data))
		}
	})
}

func TestDecompressionBounds(t *testing.T) {
	big := testRec{value: bytes.Repeat([]byte("a"), 2<<20)}
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(name, func(t *testing.T) {
			b := buildBatch(batchOpts{pid: -1, epoch: -1, seq: -1, codec: int16(codec)}, big)
			if _, err := parseBatch(b, 1<<20); codec != 0 && batchErrorCode(err) != kafka.CodeMessageTooLarge {
				t.Fatalf("2 MiB in %d bytes under a 1 MiB bound: %v", len(b), err)
			}
			got, err := parseBatch(b, 4<<20)
			if err != nil || !bytes.Equal(got.records[0].value, big.value) {
				t.Fatalf("within bound: %v", err)
			}
		})
	}
	seeds := seedBatches()
	b, err := parseBatch(seeds["batch_xerial"], 1<<20)
	if err != nil || len(b.records) != 3 || b.records[0].key != nil || string(b.records[2].value) != "v2" {
		t.Fatalf("xerial snappy: %v", err)
	}
}
