package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/replica"
	"github.com/tributary-io/tributary/wal"
)

// TestReplicationRefusePolicy: with replication_policy refuse, a node
// refuses (for replication, never as a full WAL) before its replicas run and while it is
// alone, and accepts once a second node is there to hold a copy.
func TestReplicationRefusePolicy(t *testing.T) {
	cfg := testNodeConfig(t, "r1")
	cfg.Cluster.ReplicationPolicy = "refuse"
	ctx := context.Background()
	n, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	rec := func() *tributary.Record {
		return &tributary.Record{Stream: "factory.telemetry", Topic: "factory/x", Value: []byte("v"), Source: "mqtt"}
	}
	if err := n.ingest.Append(ctx, rec()); !errors.Is(err, replica.ErrNotReplicated) || errors.Is(err, wal.ErrBudgetExceeded) || tributary.ReasonOf(err) != tributary.ReasonReplication {
		t.Fatalf("append before start: %v", err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.ingest.Append(ctx, rec()); !errors.Is(err, replica.ErrNotReplicated) {
		t.Fatalf("append while alone: %v", err)
	}
	if st := n.WAL().Stats(); st.AppendedRecords != 0 || st.BudgetRejections != 0 {
		t.Fatalf("while refusing for replication: %d records appended, %d budget rejections", st.AppendedRecords, st.BudgetRejections)
	}
	startTestNode(t, "r2", n.GossipAddr())
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := n.ingest.Append(ctx, rec())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refusing with a second node: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := n.replicaStats(); st.Degraded || st.ReplicatedRecords < 1 {
		t.Fatalf("replica stats %+v", st)
	}
	// Confirm (the MQTT front door's answer to the re-send of a publish
	// stored but refused) waits for a stored record's replicas again: here
	// they hold it, so it returns nil, without appending.
	stored := rec()
	if err := n.ingest.Append(ctx, stored); err != nil {
		t.Fatal(err)
	}
	next, _ := n.WAL().Partition("factory.telemetry", stored.Partition)
	if err := n.ingest.Confirm(ctx, stored); err != nil {
		t.Fatalf("confirm of a replicated record: %v", err)
	}
	if again, _ := n.WAL().Partition("factory.telemetry", stored.Partition); again.Next != next.Next {
		t.Fatalf("confirm appended: next offset %d, then %d", next.Next, again.Next)
	}
	// The Kafka produce path replicates too.
	before := n.replicaStats().ReplicatedRecords
	p, err := n.ingest.partition(ctx, "factory.telemetry")
	if err != nil {
		t.Fatal(err)
	}
	batch := &wal.Batch{Stream: "factory.telemetry", Partition: p, Topic: "factory.telemetry", Source: "kafka",
		Records: kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: []byte("k1")}, kafkatest.Rec{Value: []byte("k2")})}
	appended := make(chan error, 1)
	n.kb.AppendAsync(ctx, nil, batch, func(err error) { appended <- err })
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if got := n.replicaStats().ReplicatedRecords; got < before+2 {
		t.Fatalf("replicated %d records before the produce, %d after", before, got)
	}
	// A batch whose replication wait ends after the WAL stored it (here
	// its context is cancelled at once) is reported with ErrAfterAppend,
	// and only then is it in the WAL: Kafka answers it as stored
	// (NOT_ENOUGH_REPLICAS_AFTER_APPEND) and deduplicates its retry.
	st0, _ := n.WAL().Partition("factory.telemetry", p)
	cctx, cancel := context.WithCancel(ctx)
	batch.Records = kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: []byte("k3")})
	n.kb.AppendAsync(cctx, nil, batch, func(err error) { appended <- err })
	cancel()
	err = <-appended
	st1, _ := n.WAL().Partition("factory.telemetry", p)
	t.Logf("append with its context cancelled: %v", err)
	switch stored := st1.Next > st0.Next; {
	case err == nil && stored:
	case err != nil && stored && errors.Is(err, tributary.ErrAfterAppend) && errors.Is(err, context.Canceled):
	case err != nil && !stored && !errors.Is(err, tributary.ErrAfterAppend):
	default:
		t.Fatalf("append error %v with the WAL going from %d to %d", err, st0.Next, st1.Next)
	}
}
