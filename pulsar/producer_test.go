package pulsar

// Producers over the raw wire, writing through the cloud write path
// (cloudwrite over a SQLite state database and a file:// store).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite"
	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/pulsar/wire"
	"github.com/tributary-io/tributary/uplink"
)

// testProduce is a write path whose only stream factory.telemetry has
// (cloud) partition 0.
type testProduce struct {
	*cloudwrite.Appender
	st   *cloudwrite.State
	tail *cloudwrite.Tail
}

func (p testProduce) Partitions(_ context.Context, stream string) ([]int32, error) {
	if stream != "factory.telemetry" {
		return nil, fmt.Errorf("%s: %w", stream, tributary.ErrUnknownStream)
	}
	return []int32{0}, nil
}

func (p testProduce) LastSequence(ctx context.Context, stream string, part int32, producer string) (int64, error) {
	return p.st.LastSequence(ctx, stream, part, producer)
}

// newTestProduce opens a write path in dir (a second one on the same
// dir is another server sharing the state).
func newTestProduce(t *testing.T, dir string, mod func(*cloudwrite.Config)) testProduce {
	t.Helper()
	return newTestProduceOn(t, dir, mod, nil)
}

// newTestProduceOn is newTestProduce with the writer's store wrapped.
func newTestProduceOn(t *testing.T, dir string, mod func(*cloudwrite.Config), wrap func(cloudwrite.Store) cloudwrite.Store) testProduce {
	t.Helper()
	st, err := cloudwrite.OpenState("sqlite://" + filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := uplink.OpenBucket(context.Background(), "file://"+filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cfg := cloudwrite.Config{Server: "s", FlushInterval: 5 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	var store cloudwrite.Store = cloudwrite.BucketStore{B: b}
	if wrap != nil {
		store = wrap(store)
	}
	w := cloudwrite.NewWriter(cfg, st, store)
	t.Cleanup(w.Close)
	app := cloudwrite.NewAppender(w, func(_ context.Context, stream string) ([]cloudwrite.Partition, error) {
		if stream != "factory.telemetry" {
			return nil, tributary.ErrUnknownStream
		}
		return []cloudwrite.Partition{{Partition: 0, Epoch: 1}}, nil
	})
	return testProduce{Appender: app, st: st, tail: cloudwrite.NewTail(st, cloudwrite.BucketStore{B: b}, 0)}
}

func (c *rawClient) producer(id uint64, name string) wire.Frame {
	c.t.Helper()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(testTopic + "-partition-0"), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(100 + id),
		ProducerName: proto.String(name)}})
	return c.recv()
}

// sendFrame encodes a SEND of producer id with sequence id seq.
func sendFrame(t *testing.T, id, seq uint64, md *pb.MessageMetadata, payload []byte) []byte {
	t.Helper()
	if md.ProducerName == nil {
		md.ProducerName, md.SequenceId, md.PublishTime = proto.String("p"), proto.Uint64(seq), proto.Uint64(1)
	}
	b, err := wire.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(seq), NumMessages: md.NumMessagesInBatch}}, nil, md, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// receipt expects the SEND_RECEIPT of seq at entry.
func (c *rawClient) receipt(seq uint64, entry int64) {
	c.t.Helper()
	f := c.recv()
	r := f.Cmd.SendReceipt
	if f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT || r.GetSequenceId() != seq || int64(r.GetMessageId().GetEntryId()) != entry ||
		entry >= 0 && r.GetMessageId().GetLedgerId() != ledgerID {
		c.t.Fatalf("got %v, want the receipt of %d at entry %d", f.Cmd, seq, entry)
	}
}

func (c *rawClient) sendError(seq uint64, code pb.ServerError) {
	c.t.Helper()
	f := c.recv()
	if e := f.Cmd.SendError; f.Cmd.GetType() != pb.BaseCommand_SEND_ERROR || e.GetSequenceId() != seq || e.GetError() != code {
		c.t.Fatalf("got %v, want SEND_ERROR %v of %d", f.Cmd, code, seq)
	}
}

func batchOf(t *testing.T, n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		var err error
		b, err = wire.AppendBatchMessage(b, &pb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i)),
			EventTime: proto.Uint64(uint64(1000 + i)), Properties: []*pb.KeyValue{{Key: proto.String("h"), Value: proto.String("v")}}},
			[]byte(fmt.Sprint("batched ", i)))
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// Pipelined SENDs answered in order with entry = offset, a zstd batch
// split into records mapped as the consumer side maps them back, resends
// deduplicated (the last one with its original id, an older one -1:-1),
// and a producer of the same name on another server resuming after its
// last sequence id.
func TestProduceSendAndDedup(t *testing.T) {
	dir := t.TempDir()
	be := newTestProduce(t, dir, nil)
	s, _ := testServer(t, 1, Config{Produce: be})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	f := c.producer(1, "")
	if ps := f.Cmd.ProducerSuccess; f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || ps.GetProducerName() == "" || ps.GetLastSequenceId() != -1 {
		t.Fatalf("producer: %v", f.Cmd)
	}
	if f := c.producer(2, "named"); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || f.Cmd.ProducerSuccess.GetProducerName() != "named" {
		t.Fatalf("named producer: %v", f.Cmd)
	}
	var all []byte
	for i := uint64(0); i < 3; i++ {
		all = append(all, sendFrame(t, 2, i, &pb.MessageMetadata{PartitionKey: proto.String("key"),
			Properties: []*pb.KeyValue{{Key: proto.String("a"), Value: proto.String("1")}}, EventTime: proto.Uint64(42)},
			[]byte(fmt.Sprint("single ", i)))...)
	}
	batch := batchOf(t, 3)
	enc, _ := zstd.NewWriter(nil)
	all = append(all, sendFrame(t, 2, 3, &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(3), Compression: pb.CompressionType_ZSTD.Enum(),
		UncompressedSize: proto.Uint32(uint32(len(batch)))}, enc.EncodeAll(batch, nil))...)
	c.write(all) // pipelined: four SENDs in flight
	for i, e := range []int64{0, 1, 2, 3} {
		c.receipt(uint64(i), e)
	}
	c.write(sendFrame(t, 2, 3, &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(3)}, batch))
	c.receipt(3, 3)
	c.write(sendFrame(t, 2, 1, &pb.MessageMetadata{}, []byte("single 1")))
	c.receipt(1, -1)
	c.write(sendFrame(t, 1, 0, &pb.MessageMetadata{}, nil)) // the unnamed producer, a null value
	c.receipt(0, 6)

	recs, err := be.tail.Read(context.Background(), "factory.telemetry", 0, 0, 1<<20)
	if err != nil || len(recs) != 7 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for i, r := range recs[:3] {
		if string(r.Value) != fmt.Sprint("single ", i) || string(r.Key) != "key" || r.ProducerTimestamp != 42 || len(r.Headers) != 1 ||
			r.Headers[0].Key != "a" || string(r.Headers[0].Value) != "1" || r.Source != "pulsar" || r.ClientID != "named" {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	for i, r := range recs[3:6] {
		if string(r.Value) != fmt.Sprint("batched ", i) || string(r.Key) != fmt.Sprint("k", i) || r.ProducerTimestamp != int64(1000+i) {
			t.Fatalf("batched record %d: %+v", i, r)
		}
	}
	if r := recs[6]; r.Key != nil || len(r.Value) != 0 {
		t.Fatalf("null key and value: %+v", r)
	}
	// The consumer side's bytes of a produced record are the producer's.
	var md pb.MessageMetadata
	tail := appendMessageTail(nil, recs[3], 3)
	if err := proto.Unmarshal(tail[10:10+int(uint32(tail[6])<<24|uint32(tail[7])<<16|uint32(tail[8])<<8|uint32(tail[9]))], &md); err != nil ||
		md.GetPartitionKey() != "k0" || md.GetEventTime() != 1000 || !bytes.HasSuffix(tail, []byte("batched 0")) {
		t.Fatalf("read back: %v %v", &md, err)
	}

	// Another server on the same state: the named producer resumes.
	s2, _ := testServer(t, 1, Config{Produce: newTestProduce(t, dir, nil)})
	c2 := dialRaw(t, s2.Addr())
	c2.connect(19, false)
	if f := c2.producer(7, "named"); f.Cmd.ProducerSuccess.GetLastSequenceId() != 3 {
		t.Fatalf("resumed producer: %v", f.Cmd)
	}
	c2.write(sendFrame(t, 7, 2, &pb.MessageMetadata{}, []byte("single 2")))
	c2.receipt(2, -1)
	c2.write(sendFrame(t, 7, 4, &pb.MessageMetadata{}, []byte("next")))
	c2.receipt(4, 7)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(2), RequestId: proto.Uint64(9)}})
	if f := c.expect(pb.BaseCommand_SUCCESS); f.Cmd.Success.GetRequestId() != 9 {
		t.Fatalf("close: %v", f.Cmd)
	}
}

// Bad input: a SEND before PRODUCER_SUCCESS or after CLOSE_PRODUCER, a
// corrupt checksum, the biggest batch and a decompression bomb each
// refuse that SEND and store nothing; the connection goes on.
func TestProduceRefusals(t *testing.T) {
	be := newTestProduce(t, t.TempDir(), nil)
	s, _ := testServer(t, 1, Config{Produce: be, MaxBatchMessages: 10, MaxFrameBytes: 64 << 10})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	c.write(sendFrame(t, 1, 0, &pb.MessageMetadata{}, []byte("early")))
	c.sendError(0, pb.ServerError_NotAllowedError)
	if f := c.producer(1, "p"); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatal(f.Cmd)
	}
	if f := c.producer(1, "q"); f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_ProducerBusy {
		t.Fatalf("producer id reused: %v", f.Cmd)
	}
	corrupt := sendFrame(t, 1, 0, &pb.MessageMetadata{}, []byte("payload"))
	corrupt[len(corrupt)-1] ^= 1
	c.write(corrupt)
	c.sendError(0, pb.ServerError_ChecksumError)
	c.write(sendFrame(t, 1, 1, &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(11)}, batchOf(t, 11)))
	c.sendError(1, pb.ServerError_NotAllowedError)
	bomb := make([]byte, 64<<10+1)
	enc, _ := zstd.NewWriter(nil)
	c.write(sendFrame(t, 1, 2, &pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(uint32(len(bomb)))},
		enc.EncodeAll(bomb, nil)))
	c.sendError(2, pb.ServerError_NotAllowedError)
	c.write(sendFrame(t, 1, 3, &pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(10)},
		enc.EncodeAll(bomb[:100], nil)))
	c.sendError(3, pb.ServerError_NotAllowedError)
	c.write(sendFrame(t, 1, 4, &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(10)}, batchOf(t, 10)))
	c.receipt(4, 0)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(9)}})
	c.expect(pb.BaseCommand_SUCCESS)
	c.write(sendFrame(t, 1, 5, &pb.MessageMetadata{}, []byte("late")))
	c.sendError(5, pb.ServerError_NotAllowedError)
	for _, topic := range []string{"persistent://tributary/factory/nope", testTopic + "-partition-3"} {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(5), RequestId: proto.Uint64(5)}})
		if f := c.recv(); f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_TopicNotFound {
			t.Fatalf("%s: %v", topic, f.Cmd)
		}
	}
	if end, _, _ := be.st.End(context.Background(), "factory.telemetry", 0); end != 10 {
		t.Fatalf("end %d: a refused SEND stored something", end)
	}
	// A frame beyond the cap closes the connection.
	c.write(sendFrame(t, 1, 6, &pb.MessageMetadata{}, make([]byte, 64<<10+wire.FramePadding)))
	c.expectClosed()
}

// Back-pressure of the write path is a retriable SEND_ERROR, in order
// after the receipt of the SEND before it, and the producer's later
// SENDs fail too (its client reconnects and resends them all).
func TestProduceBackpressure(t *testing.T) {
	be := newTestProduce(t, t.TempDir(), func(c *cloudwrite.Config) {
		c.FlushInterval, c.MaxBufferedBytes = 2*time.Second, 1 // the first held while the others arrive
	})
	s, _ := testServer(t, 1, Config{Produce: be})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	c.producer(1, "p")
	var all []byte
	for i := uint64(0); i < 3; i++ {
		all = append(all, sendFrame(t, 1, i, &pb.MessageMetadata{}, []byte("v"))...)
	}
	c.write(all)
	c.receipt(0, 0)
	c.sendError(1, pb.ServerError_ServiceNotReady)
	c.sendError(2, pb.ServerError_PersistenceError)
}

// Producing needs auth.Produce on the stream, whatever else the
// principal may do; a server without a write path refuses producers.
func TestProduceAuthorization(t *testing.T) {
	a, sign := testAuthority(t)
	s, _ := testServer(t, 1, Config{Auth: a, Produce: newTestProduce(t, t.TempDir(), nil)})
	c := dialRaw(t, s.Addr())
	if f := c.connectAuth("token", sign("reader", time.Now().Add(time.Hour))); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatal(f.Cmd)
	}
	if f := c.producer(1, "p"); f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("producer without produce rights: %v", f.Cmd)
	}
	c = dialRaw(t, s.Addr())
	c.connectAuth("token", sign("writer", time.Now().Add(time.Hour)))
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(testTopic), RequestId: proto.Uint64(1)}})
	if r := c.expect(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.PartitionMetadataResponse; r.GetPartitions() != 1 {
		t.Fatalf("a producer's partitioned metadata: %v", r)
	}
	if f := c.producer(1, "p"); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer with produce rights: %v", f.Cmd)
	}
}

// failingStore fails every put while fail is set.
type failingStore struct {
	cloudwrite.Store
	fail *atomic.Bool
}

func (s failingStore) Put(ctx context.Context, key string, data []byte) error {
	if s.fail.Load() {
		return errors.New("store down")
	}
	return s.Store.Put(ctx, key, data)
}

// A write the object store failed is a retriable SEND_ERROR
// (PersistenceError) and stores nothing: the producer's resend after it
// reconnects lands once.
func TestProduceStoreFailure(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	be := newTestProduceOn(t, t.TempDir(), nil, func(st cloudwrite.Store) cloudwrite.Store { return failingStore{Store: st, fail: &fail} })
	s, _ := testServer(t, 1, Config{Produce: be})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	c.producer(1, "p")
	c.write(sendFrame(t, 1, 0, &pb.MessageMetadata{}, []byte("v")))
	c.sendError(0, pb.ServerError_PersistenceError)
	fail.Store(false)
	c.nc.Close()
	c = dialRaw(t, s.Addr())
	c.connect(19, false)
	waitProducer := time.Now().Add(10 * time.Second)
	for f := c.producer(1, "p"); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || f.Cmd.ProducerSuccess.GetLastSequenceId() != -1; f = c.producer(1, "p") {
		// The old connection's producer may hold the name until its close is seen.
		if time.Now().After(waitProducer) || f.Cmd.GetError().GetError() != pb.ServerError_ProducerBusy {
			t.Fatalf("producer after the failure: %v", f.Cmd)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.write(sendFrame(t, 1, 0, &pb.MessageMetadata{}, []byte("v")))
	c.receipt(0, 0)
	if end, _, _ := be.st.End(context.Background(), "factory.telemetry", 0); end != 1 {
		t.Fatalf("end %d", end)
	}
}

// More SENDs in flight than MaxPendingSends: the one beyond is a
// retriable SEND_ERROR after the receipts of those before it.
func TestProducePendingCap(t *testing.T) {
	be := newTestProduce(t, t.TempDir(), func(c *cloudwrite.Config) { c.FlushInterval = 2 * time.Second }) // all three in flight at once
	s, _ := testServer(t, 1, Config{Produce: be, MaxPendingSends: 2})
	c := dialRaw(t, s.Addr())
	c.connect(19, false)
	c.producer(1, "p")
	var all []byte
	for i := uint64(0); i < 3; i++ {
		all = append(all, sendFrame(t, 1, i, &pb.MessageMetadata{}, []byte("v"))...)
	}
	c.write(all)
	c.receipt(0, 0)
	c.receipt(1, 1)
	c.sendError(2, pb.ServerError_ServiceNotReady)
}
