package produce

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/wal"
)

// TestPipelinedProduceFailureInTheMiddle: five idempotent batches of one
// producer are in flight on one connection (all queued before the first
// append ends); the second is refused for the WAL's budget. Kafka's
// answer, in request order: the first appended, the second
// KAFKA_STORAGE_ERROR, the three after it OUT_OF_ORDER_SEQUENCE_NUMBER
// and not stored (they are not acknowledged ahead of the refused one).
// The producer's resend of the four, pipelined again, lands in order
// after the first, and a resend of the first is a duplicate.
func TestPipelinedProduceFailureInTheMiddle(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "factory.pipelined"
	be.addStream(topic, "edge-1")
	release := make(chan struct{})
	var applied atomic.Int64
	be.appendFn = func() { <-release } // the first append waits until all five are queued
	var refused atomic.Bool
	be.refuse = func(recs []*tributary.Record) error {
		applied.Add(1)
		if recs[0].Sequence == 3 && refused.CompareAndSwap(false, true) {
			return fmt.Errorf("fake: %w", wal.ErrBudgetExceeded)
		}
		return nil
	}
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	const pid = 4242
	batch := func(i int) []byte {
		var rs []kafkatest.Rec
		for j := range 3 {
			rs = append(rs, kafkatest.Rec{Value: []byte(fmt.Sprint(3*i + j))})
		}
		return kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: int32(3 * i)}, rs...)
	}
	send := func(corr int32, i int) {
		t.Helper()
		if _, err := rc.C.Write(kafkatest.EncodeRequest(corr, "pipeline", produceReq(9, topic, 0, batch(i)))); err != nil {
			t.Fatal(err)
		}
	}
	read := func(wantCorr int32) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		rc.C.SetReadDeadline(time.Now().Add(10 * time.Second))
		frame, err := kafka.ReadFrame(rc.C, 1<<20)
		if err != nil {
			t.Fatalf("response %d: %v", wantCorr, err)
		}
		if got := int32(binary.BigEndian.Uint32(frame)); got != wantCorr {
			t.Fatalf("response with correlation id %d, want %d (out of order)", got, wantCorr)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(frame[5:]); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	for i := range 5 {
		send(int32(i+1), i)
	}
	waitFor(t, 5*time.Second, "five appends queued while the first waits", func() bool { return be.queued.Load() == 5 })
	close(release)
	wantCodes := []int16{0, kafka.CodeKafkaStorageError, kafka.CodeOutOfOrderSequence, kafka.CodeOutOfOrderSequence, kafka.CodeOutOfOrderSequence}
	for i, want := range wantCodes {
		p := read(int32(i + 1))
		if p.ErrorCode != want {
			t.Fatalf("batch %d: error code %d, want %d", i, p.ErrorCode, want)
		}
	}
	if n := len(be.records(topic, 0)); n != 3 {
		t.Fatalf("%d records stored, want 3 (only the batch before the refused one)", n)
	}
	// The producer resends the four in order, pipelined, then (a stale
	// retry) the first.
	for i := 1; i < 5; i++ {
		send(int32(10+i), i)
	}
	send(20, 0)
	for i := 1; i < 5; i++ {
		if p := read(int32(10 + i)); p.ErrorCode != 0 || p.BaseOffset != int64(3*i) {
			t.Fatalf("resent batch %d: code %d offset %d, want offset %d", i, p.ErrorCode, p.BaseOffset, 3*i)
		}
	}
	if p := read(20); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("duplicate of the first batch: code %d offset %d", p.ErrorCode, p.BaseOffset)
	}
	got := be.records(topic, 0)
	if len(got) != 15 {
		t.Fatalf("%d records, want 15", len(got))
	}
	for i, r := range got {
		if string(r.Value) != fmt.Sprint(i) || r.Sequence != int32(i) {
			t.Fatalf("record %d: value %q sequence %d", i, r.Value, r.Sequence)
		}
	}
}

// TestKgoPipelinedWithRefusals: kgo's idempotent producer (five requests
// in flight per connection) against appends refused now and then for
// the budget (ten times), in the middle of its pipeline: every record is stored
// exactly once, in the order produced.
func TestKgoPipelinedWithRefusals(t *testing.T) {
	const n = 20000
	be := newFakeBackend("edge-1")
	const topic = "factory.kgo_refusals"
	be.addStream(topic, "edge-1")
	var appends, refusals atomic.Int64
	be.appendFn = func() { time.Sleep(200 * time.Microsecond) } // an fsync's worth: requests pile up
	be.refuse = func(recs []*tributary.Record) error {
		if appends.Add(1)%40 == 3 && refusals.Load() < 10 {
			refusals.Add(1)
			return fmt.Errorf("fake: %w", wal.ErrBudgetExceeded)
		}
		return nil
	}
	s := startServer(t, Config{BackpressureThrottle: time.Millisecond}, be)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(n),
		kgo.ProducerBatchMaxBytes(4<<10), kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond }),
		kgo.MetadataMinAge(10*time.Millisecond)) // kgo refreshes metadata before resending after error 56
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val := make([]byte, 100)
	for i := range n {
		v := append(fmt.Appendf(nil, "%06d", i), val...)
		cl.Produce(ctx, &kgo.Record{Value: v, Partition: 0}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("record %d: %v", i, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := be.records(topic, 0)
	if len(got) != n {
		t.Fatalf("%d records stored, want %d (%d appends, %d refused)", len(got), n, appends.Load(), refusals.Load())
	}
	for i, r := range got {
		if string(r.Value[:6]) != fmt.Sprintf("%06d", i) || r.Sequence != int32(i) {
			t.Fatalf("record at offset %d is %q (sequence %d)", i, r.Value[:6], r.Sequence)
		}
	}
	if refusals.Load() == 0 {
		t.Fatal("no append was refused")
	}
	t.Logf("%d appends, %d refused, stats %+v", appends.Load(), refusals.Load(), s.Stats())
}

// TestProduceTopicCached: a connection producing to one topic looks it up
// about once a second, not once per request (a lookup reads the table's
// metadata from the catalog).
func TestProduceTopicCached(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.addStream("factory.cached", "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	batch := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: []byte("v")})
	for i := range 200 {
		if p := produceOne(rc, "factory.cached", 0, batch); p.ErrorCode != 0 || p.BaseOffset != int64(i) {
			t.Fatalf("produce %d: code %d offset %d", i, p.ErrorCode, p.BaseOffset)
		}
	}
	if n := be.topicCalls.Load(); n > 3 {
		t.Fatalf("%d topic lookups for 200 produce requests", n)
	}
}
