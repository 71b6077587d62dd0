package produce

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz seed corpora")

// fuzzMaxDecompressed is the decompression bound under fuzzing: small, so
// that an input the mutator turns into a compression bomb costs
// microseconds, not a megabyte of inflating; the bound is enforced the same
// way whatever its size (TestDecompressionBounds checks 1 and 4 MiB).
const fuzzMaxDecompressed = 64 << 10

func seedRequests() map[string][]byte {
	out := map[string][]byte{}
	for _, v := range []int16{0, 3} {
		r := kmsg.NewPtrApiVersionsRequest()
		r.Version, r.ClientSoftwareName, r.ClientSoftwareVersion = v, "kgo", "1.0"
		out[fmt.Sprintf("apiversions_v%d", v)] = kafkatest.EncodeRequest(1, "client", r)
	}
	fut := kafkatest.EncodeRequest(1, "client", &kmsg.ApiVersionsRequest{Version: 4})
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
		out[fmt.Sprintf("metadata_v%d", v)] = kafkatest.EncodeRequest(2, "client", r)
	}
	all := kmsg.NewPtrMetadataRequest()
	all.Version = 9
	out["metadata_all_v9"] = kafkatest.EncodeRequest(3, "", all)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	out["initproducerid_v4"] = kafkatest.EncodeRequest(4, "client", ip)
	fr := kmsg.NewPtrFetchRequest()
	fr.Version = 12
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "factory.events"
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fr.Topics = append(fr.Topics, ft)
	out["fetch_v12"] = kafkatest.EncodeRequest(5, "client", fr)
	// The batches of kafka's FuzzRecordBatch seeds (kafka/batch_test.go).
	rs := []kafkatest.Rec{
		{Key: nil, Value: []byte("v0")},
		{Key: []byte("k1"), Value: []byte{}, Headers: []tributary.Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}},
		{Key: []byte{}, Value: []byte("v2"), TSDelta: 1000},
	}
	batches := map[string][]byte{
		"batch_zstd":  kafkatest.Batch(kafkatest.BatchOpts{PID: 42, Epoch: 1, Seq: 7, Codec: 4, FirstTS: 1700000000000}, rs...),
		"batch_lz4":   kafkatest.Batch(kafkatest.BatchOpts{PID: 42, Epoch: 1, Seq: 7, Codec: 3, FirstTS: 1700000000000}, rs...),
		"batch_plain": kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, rs...),
	}
	for _, v := range []int16{3, 9, 12} {
		out[fmt.Sprintf("produce_v%d_zstd", v)] = kafkatest.EncodeRequest(6, "client", produceReq(v, "factory.events", 0, batches["batch_zstd"]))
	}
	out["produce_v7_lz4"] = kafkatest.EncodeRequest(7, "client", produceReq(7, "factory.events", 0, batches["batch_lz4"]))
	out["produce_v9_plain_bad_topic"] = kafkatest.EncodeRequest(8, "client", produceReq(9, "bad", 0, batches["batch_plain"]))
	out["truncated"] = out["produce_v9_zstd"][:40]
	return out
}

// TestWriteFuzzSeeds regenerates the committed seed corpora with
// `go test ./kafka/produce -run TestWriteFuzzSeeds -write-seeds`.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz")
	}
	kafkatest.WriteFuzzSeeds(t, "FuzzRequestDecode", seedRequests())
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
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, MaxDecompressedBytes: fuzzMaxDecompressed}, be, be)
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
		if req.Key == kafka.SaslHandshakeKey || req.Key == kafka.SaslAuthenticateKey {
			return // answered by kafka.Server, never by the Handler
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
