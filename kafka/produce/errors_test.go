package produce

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"

	"github.com/tributary-io/tributary/internal/testkit"
)

func TestProduceErrors(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.brokers = append(be.brokers, Broker{NodeID: "edge-2", Host: "10.0.0.2", Port: 9092})
	be.addStream("factory.ok", "edge-1", "edge-2")
	s := startServer(t, Config{MaxBatchBytes: 4096, MaxDecompressedBytes: 64 << 10, BackpressureThrottle: 250 * time.Millisecond}, be)
	rc := kafkatest.Dial(t, s.Addr())
	good := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(3, "g")...)
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-2] ^= 0x40
	magic1 := bytes.Clone(good)
	magic1[16] = 1
	big := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: make([]byte, 5000)})
	bomb := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 4}, kafkatest.Rec{Value: make([]byte, 200<<10)})
	if len(bomb) > 4096 {
		t.Fatalf("bomb batch is %d bytes", len(bomb))
	}
	// A header bomb: one zstd record whose thousands of empty headers take a
	// few bytes compressed (tens of millions of them took a node from 100 MB
	// to 5 GB before the cap).
	headerBomb := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, Codec: 4}, kafkatest.Rec{Value: []byte("v"), Headers: make([]tributary.Header, 20000)})
	if len(headerBomb) > 4096 {
		t.Fatalf("header bomb batch is %d bytes", len(headerBomb))
	}
	tests := []struct {
		name      string
		topic     string
		partition int32
		batch     []byte
		code      int16
	}{
		{"good", "factory.ok", 0, good, 0},
		{"unknown topic, auto-create off", "factory.nope", 0, good, kafka.CodeUnknownTopicOrPartition},
		{"unknown partition", "factory.ok", 7, good, kafka.CodeUnknownTopicOrPartition},
		{"invalid topic name", "no-namespace", 0, good, kafka.CodeInvalidTopic},
		{"invalid topic chars", "a.b/c", 0, good, kafka.CodeInvalidTopic},
		{"owned by another node", "factory.ok", 1, good, kafka.CodeNotLeaderOrFollower},
		{"oversize batch", "factory.ok", 0, big, kafka.CodeMessageTooLarge},
		{"decompression bomb", "factory.ok", 0, bomb, kafka.CodeMessageTooLarge},
		{"header bomb", "factory.ok", 0, headerBomb, kafka.CodeInvalidRecord},
		{"bad crc", "factory.ok", 0, badCRC, kafka.CodeCorruptMessage},
		{"truncated batch", "factory.ok", 0, good[:len(good)-3], kafka.CodeCorruptMessage},
		{"two batches", "factory.ok", 0, append(bytes.Clone(good), good...), kafka.CodeInvalidRecord},
		{"message format v1", "factory.ok", 0, magic1, kafka.CodeInvalidRecord},
		{"transactional batch", "factory.ok", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: 5, Seq: 0, Attrs: 0x10}, recs(1, "t")...), kafka.CodeInvalidRecord},
		{"control batch", "factory.ok", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: 5, Seq: 0, Attrs: 0x20}, recs(1, "t")...), kafka.CodeInvalidRecord},
		{"bad offset delta", "factory.ok", 0, badOffsetDeltaBatch(), kafka.CodeInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := produceOne(rc, tt.topic, tt.partition, tt.batch)
			if p.ErrorCode != tt.code {
				t.Fatalf("code %d, want %d (%v)", p.ErrorCode, tt.code, p.ErrorMessage)
			}
			if tt.code != 0 && (p.ErrorMessage == nil || *p.ErrorMessage == "") {
				t.Fatalf("no error message for code %d", p.ErrorCode)
			}
		})
	}
	if n := len(be.records("factory.ok", 0)); n != 3 {
		t.Fatalf("backend has %d records, want 3", n)
	}

	t.Run("budget exhausted", func(t *testing.T) {
		be.budget.Store(true)
		defer be.budget.Store(false)
		resp := rc.RoundTrip(produceReq(9, "factory.ok", 0, good)).(*kmsg.ProduceResponse)
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeKafkaStorageError {
			t.Fatalf("code %d, want %d", p.ErrorCode, kafka.CodeKafkaStorageError)
		}
		if resp.ThrottleMillis != 250 {
			t.Fatalf("throttle %d ms, want 250", resp.ThrottleMillis)
		}
		if s.Stats().Backpressure != 1 {
			t.Fatalf("stats %+v", s.Stats())
		}
	})
	t.Run("too few replicas", func(t *testing.T) {
		// Not a full disk: NOT_ENOUGH_REPLICAS, not KAFKA_STORAGE_ERROR.
		be.unrepl.Store(true)
		defer be.unrepl.Store(false)
		resp := rc.RoundTrip(produceReq(9, "factory.ok", 0, good)).(*kmsg.ProduceResponse)
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeNotEnoughReplicas {
			t.Fatalf("code %d, want %d", p.ErrorCode, kafka.CodeNotEnoughReplicas)
		}
		if n := len(be.records("factory.ok", 0)); n != 3 {
			t.Fatalf("backend has %d records, want 3", n)
		}
	})
	t.Run("transactional produce", func(t *testing.T) {
		req := produceReq(9, "factory.ok", 0, good)
		req.TransactionID = kmsg.StringPtr("txn")
		resp := rc.RoundTrip(req).(*kmsg.ProduceResponse)
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeInvalidRecord {
			t.Fatalf("code %d", p.ErrorCode)
		}
	})
	t.Run("transactional InitProducerId", func(t *testing.T) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version = 4
		req.TransactionalID = kmsg.StringPtr("txn")
		if resp := rc.RoundTrip(req).(*kmsg.InitProducerIDResponse); resp.ErrorCode != kafka.CodeInvalidRequest {
			t.Fatalf("code %d", resp.ErrorCode)
		}
	})
	t.Run("invalid acks", func(t *testing.T) {
		req := produceReq(9, "factory.ok", 0, good)
		req.Acks = 2
		if p := rc.RoundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeInvalidRequiredAcks {
			t.Fatalf("code %d", p.ErrorCode)
		}
	})
	t.Run("acks=0", func(t *testing.T) {
		c := kafkatest.Dial(t, s.Addr())
		before := len(be.records("factory.ok", 0))
		req := produceReq(7, "factory.ok", 0, good)
		req.Acks = 0
		c.C.Write(kafkatest.EncodeRequest(100, "acks0", req))
		// No response; the next request's response comes first.
		if v := c.RoundTrip(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse); v.ErrorCode != 0 {
			t.Fatal(v.ErrorCode)
		}
		if after := len(be.records("factory.ok", 0)); after != before+3 {
			t.Fatalf("acks=0 batch not appended before next response: %d -> %d", before, after)
		}
		// A failing acks=0 produce closes the connection.
		req = produceReq(7, "factory.nope", 0, good)
		req.Acks = 0
		c.C.Write(kafkatest.EncodeRequest(101, "acks0", req))
		c.ExpectClosed()
	})
}

// badOffsetDeltaBatch has records whose offset deltas are not 0, 1, ….
func badOffsetDeltaBatch() []byte {
	b := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(2, "d")...)
	// Record 0 starts at 61: length varint (1 byte), attributes, ts delta
	// (varint 0 = 1 byte), offset delta.
	b[batchHeaderLen+3] = 0x04 // varint 2
	binary.BigEndian.PutUint32(b[crcOffset:], crc32c(b[crcStart:]))
	return b
}

func TestAutoCreate(t *testing.T) {
	be := newFakeBackend("edge-1")
	s := startServer(t, Config{AutoCreate: true}, be)
	rc := kafkatest.Dial(t, s.Addr())
	// Metadata without permission to create does not create.
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("factory.meta")
	req.Topics = append(req.Topics, rt)
	resp := rc.RoundTrip(req).(*kmsg.MetadataResponse)
	if resp.Topics[0].ErrorCode != kafka.CodeUnknownTopicOrPartition {
		t.Fatalf("code %d", resp.Topics[0].ErrorCode)
	}
	req.AllowAutoTopicCreation = true
	resp = rc.RoundTrip(req).(*kmsg.MetadataResponse)
	if mt := resp.Topics[0]; mt.ErrorCode != 0 || len(mt.Partitions) != 1 || mt.Partitions[0].Leader != kafka.BrokerID("edge-1") {
		t.Fatalf("metadata %+v", mt)
	}
	// Produce creates too.
	if p := produceOne(rc, "factory.prod", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "p")...)); p.ErrorCode != 0 {
		t.Fatalf("code %d", p.ErrorCode)
	}
	// But not invalid names.
	if p := produceOne(rc, "nope", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "p")...)); p.ErrorCode != kafka.CodeInvalidTopic {
		t.Fatalf("code %d", p.ErrorCode)
	}
	// One Metadata request naming 50 new streams creates one of them (it
	// created all 50 before).
	req = kmsg.NewPtrMetadataRequest()
	req.Version = 12
	req.AllowAutoTopicCreation = true
	for i := range 50 {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(fmt.Sprintf("flood.t%d", i))
		req.Topics = append(req.Topics, rt)
	}
	resp = rc.RoundTrip(req).(*kmsg.MetadataResponse)
	made := 0
	for _, mt := range resp.Topics {
		if mt.ErrorCode == 0 {
			made++
		}
	}
	if made != 1 {
		t.Fatalf("one Metadata request created %d streams, want 1", made)
	}
}

func TestMetadata(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.brokers = append(be.brokers, Broker{NodeID: "edge-2", Host: "10.0.0.2", Port: 9093})
	be.addStream("factory.a", "edge-1", "edge-2", "edge-gone")
	be.addStream("factory.b", "edge-1")
	s := startServer(t, Config{Config: kafka.Config{ClusterID: "plant"}}, be)
	rc := kafkatest.Dial(t, s.Addr())
	for _, v := range []int16{0, 1, 4, 9, 12} {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = v
		if v == 0 {
			req.Topics = []kmsg.MetadataRequestTopic{}
		}
		resp := rc.RoundTrip(req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 2 || *resp.Topics[0].Topic != "factory.a" {
			t.Fatalf("v%d topics %+v", v, resp.Topics)
		}
		host, port, _ := kafka.SplitHostPort32(s.Addr())
		var self, peer bool
		for _, b := range resp.Brokers {
			self = self || (b.NodeID == kafka.BrokerID("edge-1") && b.Host == host && b.Port == port)
			peer = peer || (b.NodeID == kafka.BrokerID("edge-2") && b.Host == "10.0.0.2" && b.Port == 9093)
		}
		if !self || !peer {
			t.Fatalf("v%d brokers %+v", v, resp.Brokers)
		}
		ps := resp.Topics[0].Partitions
		if len(ps) != 3 || ps[0].Leader != kafka.BrokerID("edge-1") || ps[1].Leader != kafka.BrokerID("edge-2") || ps[2].Leader != -1 || ps[2].ErrorCode != kafka.CodeLeaderNotAvailable {
			t.Fatalf("v%d partitions %+v", v, ps)
		}
		if v >= 10 && resp.Topics[0].TopicID != kafka.TopicID("factory.a") {
			t.Fatalf("v%d topic id %x", v, resp.Topics[0].TopicID)
		}
		if v >= 2 && (resp.ClusterID == nil || *resp.ClusterID != "plant") {
			t.Fatalf("v%d cluster id %v", v, resp.ClusterID)
		}
	}
	// By topic id (v12), unknown and invalid names.
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	for _, rt := range []kmsg.MetadataRequestTopic{{TopicID: kafka.TopicID("factory.b")}, {Topic: kmsg.StringPtr("factory.zz")}, {Topic: kmsg.StringPtr("bad name")}} {
		req.Topics = append(req.Topics, rt)
	}
	resp := rc.RoundTrip(req).(*kmsg.MetadataResponse)
	if *resp.Topics[0].Topic != "factory.b" || resp.Topics[0].ErrorCode != 0 || resp.Topics[1].ErrorCode != kafka.CodeUnknownTopicOrPartition || resp.Topics[2].ErrorCode != kafka.CodeInvalidTopic {
		t.Fatalf("topics %+v", resp.Topics)
	}
	if kafka.TopicID("factory.a") == kafka.TopicID("factory.b") || kafka.TopicID("x.y") != kafka.TopicID("x.y") || kafka.TopicID("x.y")[6]>>4 != 5 {
		t.Fatal("topic ids not stable, distinct, v5")
	}
}

func TestApiVersions(t *testing.T) {
	s := startServer(t, Config{}, newFakeBackend("edge-1"))
	rc := kafkatest.Dial(t, s.Addr())
	for _, v := range []int16{0, 3, 4} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
		resp := rc.RoundTrip(req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(apis) {
			t.Fatalf("v%d: %+v", v, resp)
		}
		for _, k := range resp.ApiKeys {
			if r, ok := apis[k.ApiKey]; !ok || r.Min != k.MinVersion || r.Max != k.MaxVersion {
				t.Fatalf("v%d: advertised %+v", v, k)
			}
		}
	}
	// An unknown version is answered in v0 with UNSUPPORTED_VERSION.
	rc.Corr++
	frame := kafkatest.EncodeRequest(rc.Corr, "future", &kmsg.ApiVersionsRequest{Version: 4})
	binary.BigEndian.PutUint16(frame[6:], 99)
	rc.C.Write(frame)
	got, err := kafka.ReadFrame(rc.C, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(got[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kafka.CodeUnsupportedVersion || len(resp.ApiKeys) != len(apis) {
		t.Fatalf("%+v", resp)
	}
}

// TestMalformedFramesCloseOnlyTheirConnection runs a kgo producer while
// other connections send broken frames; each broken connection is closed,
// the producer is unaffected.
func TestMalformedFramesCloseOnlyTheirConnection(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "factory.steady"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{Config: kafka.Config{MaxFrameBytes: 1 << 20}}, be)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	prodErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
				prodErr <- err
				return
			}
		}
	}()
	testkit.Eventually(t, 10*time.Second, "producer to start", func() bool { return len(be.records(topic, 0)) > 100 })

	garbage := make([]byte, 256)
	rand.Read(garbage)
	binary.BigEndian.PutUint32(garbage, 200) // plausible length, random content
	validProduce := kafkatest.EncodeRequest(1, "x", produceReq(9, topic, 0, kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "v")...)))
	truncatedBody := bytes.Clone(validProduce[:len(validProduce)-20])
	binary.BigEndian.PutUint32(truncatedBody, uint32(len(truncatedBody)-4))
	unknownKey := kafkatest.EncodeRequest(1, "x", kmsg.NewPtrJoinGroupRequest())
	oldProduce := kafkatest.EncodeRequest(1, "x", produceReq(2, topic, 0, nil))
	cases := []struct {
		name  string
		bytes []byte
		half  bool // close our write side after sending (frame cut short)
	}{
		{"huge length", []byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0}, false},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xfe}, false},
		{"tiny frame", []byte{0, 0, 0, 2, 0, 0}, false},
		{"garbage", garbage[:204], false},
		{"truncated request body", truncatedBody, false},
		{"frame cut short", validProduce[:len(validProduce)/2], true},
		{"unknown api key", unknownKey, false},
		{"produce v2", oldProduce, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc := kafkatest.Dial(t, s.Addr())
			if _, err := rc.C.Write(c.bytes); err != nil {
				t.Fatal(err)
			}
			if c.half {
				rc.C.(*net.TCPConn).CloseWrite()
			}
			rc.ExpectClosed()
		})
	}
	wg.Wait()
	select {
	case err := <-prodErr:
		t.Fatalf("good producer failed: %v", err)
	default:
	}
	got := be.records(topic, 0)
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for i, r := range got {
		if string(r.Value) != fmt.Sprint(i) || r.Offset != int64(i) {
			t.Fatalf("record %d = %q at %d", i, r.Value, r.Offset)
		}
	}
	if st := s.Stats(); st.ClosedMalformed < int64(len(cases)) {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloseWaitsForInFlightAppend(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.addStream("factory.slow", "edge-1")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	be.appendFn = func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	rc.Corr++
	rc.C.Write(kafkatest.EncodeRequest(rc.Corr, "slow", produceReq(9, "factory.slow", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "s")...))))
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("Close returned while an append was in flight")
	default:
	}
	close(release)
	frame, err := kafka.ReadFrame(rc.C, 1<<20)
	if err != nil {
		t.Fatalf("response of the in-flight produce not written: %v", err)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 9
	if err := resp.ReadFrom(frame[5:]); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("response %+v %v", resp, err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	rc.ExpectClosed()
}

func TestFetchRefused(t *testing.T) {
	s := startServer(t, Config{}, newFakeBackend("edge-1"))
	rc := kafkatest.Dial(t, s.Addr())
	for _, v := range []int16{4, 12} {
		req := kmsg.NewPtrFetchRequest()
		req.Version = v
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "factory.events"
		ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
		req.Topics = append(req.Topics, ft)
		resp := rc.RoundTrip(req).(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kafka.CodeUnsupportedVersion || resp.Topics[0].Partitions[0].RecordBatches != nil {
			t.Fatalf("v%d: %+v", v, resp)
		}
	}
}
