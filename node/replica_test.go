package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
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
	if err := n.ingest.Append(ctx, tributary.WriteTo(-1, rec())); !errors.Is(err, replica.ErrNotReplicated) || errors.Is(err, wal.ErrBudgetExceeded) || tributary.ReasonOf(err) != tributary.ReasonReplication {
		t.Fatalf("append before start: %v", err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.ingest.Append(ctx, tributary.WriteTo(-1, rec())); !errors.Is(err, replica.ErrNotReplicated) {
		t.Fatalf("append while alone: %v", err)
	}
	if st := n.WAL().Stats(); st.AppendedRecords != 0 || st.BudgetRejections != 0 {
		t.Fatalf("while refusing for replication: %d records appended, %d budget rejections", st.AppendedRecords, st.BudgetRejections)
	}
	startTestNode(t, "r2", n.GossipAddr())
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := n.ingest.Append(ctx, tributary.WriteTo(-1, rec()))
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
	if err := n.ingest.Append(ctx, tributary.WriteTo(-1, stored)); err != nil {
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
	p, _, err := n.book.Own(ctx, "factory.telemetry")
	if err != nil {
		t.Fatal(err)
	}
	batch := &tributary.Batch{Stream: "factory.telemetry", Partition: p, Topic: "factory.telemetry", Source: "kafka",
		Records: kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: []byte("k1")}, kafkatest.Rec{Value: []byte("k2")})}
	appended := make(chan error, 1)
	submit(t, n, ctx, batch, func(err error) { appended <- err })
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
	submit(t, n, cctx, batch, func(err error) { appended <- err })
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

// submit queues a Kafka batch to its partition as the Kafka produce
// server does; a refusal at once goes to done too.
func submit(t *testing.T, n *Node, ctx context.Context, b *tributary.Batch, done func(error)) {
	t.Helper()
	if _, err := n.ingest.Submit(ctx, &tributary.Write{Batch: b, Chosen: true}, tributary.Durable, done); err != nil {
		go done(err)
	}
}

// TestRefuseBeforeAppendWhenReplicaLinkDown: under replication_policy
// refuse, with the replica alive in gossip but its peer link silently cut
// (a proxy in front of its peer port holds every byte), the append
// pending at the cut is refused after it was stored (ErrAfterAppend,
// within 5 s: the link's heartbeat, not the 30 s replication timeout),
// and every later one is refused at admission, before the WAL: nothing
// refused reaches the WAL, hence the table. After the heal the node
// accepts again within 5 s.
func TestRefuseBeforeAppendWhenReplicaLinkDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peerAddr := ln.Addr().String()
	ln.Close()
	proxy := testkit.NewProxy(t, peerAddr)

	ctx := context.Background()
	cfg := testNodeConfig(t, "r1")
	cfg.Cluster.ReplicationPolicy = "refuse"
	cfg.Cluster.ReplicationTimeout = 30 * time.Second
	n, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cfg2 := testNodeConfig(t, "r2", n.GossipAddr())
	cfg2.Cluster.PeerAddr, cfg2.Cluster.PeerAdvertiseAddr = peerAddr, proxy.Addr()
	n2, err := New(ctx, cfg2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close(ctx)
	if err := n2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rec := func() *tributary.Record {
		return &tributary.Record{Stream: "factory.telemetry", Topic: "factory/x", Value: []byte("v"), Source: "mqtt"}
	}
	testkit.Eventually(t, 20*time.Second, "r1 to accept with r2 as its replica", func() bool { return n.ingest.Append(ctx, tributary.WriteTo(-1, rec())) == nil })
	p, _, err := n.book.Own(ctx, "factory.telemetry")
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	cut := time.Now()
	err = n.ingest.Append(ctx, tributary.WriteTo(-1, rec()))
	if !errors.Is(err, replica.ErrNotReplicated) || !errors.Is(err, tributary.ErrAfterAppend) || time.Since(cut) > 5*time.Second {
		t.Fatalf("the append pending at the cut: %v after %s; want refused after its append within 5s", err, time.Since(cut))
	}
	missing := time.Since(cut)
	before, _ := n.WAL().Partition("factory.telemetry", p)
	for i := range 10 {
		err := n.ingest.Append(ctx, tributary.WriteTo(-1, rec()))
		if !errors.Is(err, replica.ErrNotReplicated) || errors.Is(err, tributary.ErrAfterAppend) || tributary.ReasonOf(err) != tributary.ReasonReplication {
			t.Fatalf("append %d with the replica's link down: %v; want refused before the append", i, err)
		}
	}
	if _, err := n.ingest.Submit(ctx, tributary.WriteTo(-1, rec()), tributary.Durable, func(error) { t.Error("a refused pipelined append completed") }); !errors.Is(err, replica.ErrNotReplicated) {
		t.Fatalf("pipelined append with the replica's link down: %v", err)
	}
	if after, _ := n.WAL().Partition("factory.telemetry", p); after.Next != before.Next {
		t.Fatalf("refused records reached the WAL: next %d, was %d", after.Next, before.Next)
	}

	proxy.Heal()
	healed := time.Now()
	testkit.Eventually(t, 15*time.Second, "r1 to accept again after the heal", func() bool { return n.ingest.Append(ctx, tributary.WriteTo(-1, rec())) == nil })
	if took := time.Since(healed); took > 5*time.Second {
		t.Fatalf("accepting again %s after the heal, want within 5s", took)
	}
	t.Logf("replica missing %s after the cut; accepting again %s after the heal", missing.Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
}
