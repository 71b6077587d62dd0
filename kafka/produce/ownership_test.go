package produce

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// TestOwnershipMovesLeader: Metadata reports each partition's owner as
// leader with the ownership epoch as leader epoch; produce follows the
// owner, and a partition lost between the lookup and the append (the
// backend's ErrNotLeader) is NOT_LEADER_OR_FOLLOWER with nothing appended.
func TestOwnershipMovesLeader(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.brokers = append(be.brokers, Broker{NodeID: "edge-2", Host: "10.0.0.2", Port: 9092})
	be.addStream("o.s", "edge-2", "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	batch := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(2, "v")...)
	leader := func() (int32, int32) {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 9
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("o.s")
		req.Topics = append(req.Topics, rt)
		mp := rc.RoundTrip(req).(*kmsg.MetadataResponse).Topics[0].Partitions[0]
		return mp.Leader, mp.LeaderEpoch
	}
	if l, e := leader(); l != kafka.BrokerID("edge-2") || e != 0 {
		t.Fatalf("before: leader %d epoch %d", l, e)
	}
	if p := produceOne(rc, "o.s", 0, batch); p.ErrorCode != kafka.CodeNotLeaderOrFollower {
		t.Fatalf("produce to edge-2's partition: code %d", p.ErrorCode)
	}

	// edge-1 takes partition 0 over at epoch 1.
	be.mu.Lock()
	be.streams["o.s"][0] = PartitionInfo{Partition: 0, Leader: "edge-1", Epoch: 1}
	be.mu.Unlock()
	if l, e := leader(); l != kafka.BrokerID("edge-1") || e != 1 {
		t.Fatalf("after the take-over: leader %d epoch %d", l, e)
	}
	if p := produceOne(rc, "o.s", 0, batch); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("produce after the take-over: code %d offset %d", p.ErrorCode, p.BaseOffset)
	}

	// Lost again between the lookup and the append.
	be.lost.Store(true)
	p := produceOne(rc, "o.s", 0, batch)
	if p.ErrorCode != kafka.CodeNotLeaderOrFollower || p.ErrorMessage == nil {
		t.Fatalf("produce after losing it: code %d", p.ErrorCode)
	}
	if n := len(be.records("o.s", 0)); n != 2 {
		t.Fatalf("%d records appended, want the 2 of the accepted batch", n)
	}
}

// TestLoadProducerRuns: runs loaded after a take-over deduplicate a retry
// of a batch the previous owner appended, and the producer continues its
// sequence.
func TestLoadProducerRuns(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.addStream("o.s", "edge-1")
	s := startServer(t, Config{}, be)
	// The previous owner appended sequences 0-2 of producer 77 at offsets 10-12.
	s.LoadProducerRuns([]ProducerRun{{Stream: "o.s", Partition: 0, ProducerID: 77, ProducerEpoch: 0, FirstSeq: 0, LastSeq: 2, FirstOffset: 10}})
	rc := kafkatest.Dial(t, s.Addr())
	retry := kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 0, Seq: 0}, recs(3, "r")...)
	if p := produceOne(rc, "o.s", 0, retry); p.ErrorCode != 0 || p.BaseOffset != 10 {
		t.Fatalf("retried batch: code %d offset %d, want the original offset 10", p.ErrorCode, p.BaseOffset)
	}
	if n := len(be.records("o.s", 0)); n != 0 {
		t.Fatalf("retry appended %d records", n)
	}
	if p := produceOne(rc, "o.s", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 0, Seq: 5}, recs(1, "gap")...)); p.ErrorCode != kafka.CodeOutOfOrderSequence {
		t.Fatalf("sequence gap: code %d", p.ErrorCode)
	}
	if p := produceOne(rc, "o.s", 0, kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 0, Seq: 3}, recs(2, "n")...)); p.ErrorCode != 0 {
		t.Fatalf("next batch: code %d", p.ErrorCode)
	}
}

// TestFencedAfterAppend: a batch the WAL stored whose replica then
// reported the partition taken over (replica.ErrFenced after the append)
// is answered NOT_LEADER_OR_FOLLOWER, as a fence before the append is
// (README "Refusal codes"), not NOT_ENOUGH_REPLICAS_AFTER_APPEND: the
// client follows the partition to its new leader.
func TestFencedAfterAppend(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "o.fenced"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	be.fencedAfter.Store(true)
	p := produceOne(rc, topic, 0, kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "f")...))
	if p.ErrorCode != kafka.CodeNotLeaderOrFollower {
		t.Fatalf("code %d (%v), want NOT_LEADER_OR_FOLLOWER (%d)", p.ErrorCode, p.ErrorMessage, kafka.CodeNotLeaderOrFollower)
	}
}
