package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/wal"
)

// TestClusterReplicaIncarnation: a two-node cluster with replication
// factor 2 whose owner's WAL waits 30 ms between handing each group to
// its replica and fsyncing it (TRIBUTARY_TEST_TAP_DELAY, test only). Under
// QoS 1 load, the owner n1 is killed with SIGKILL — almost always inside
// that window, with records on n2 that n1 never made durable — and
// restarted, many rounds. Each restart is a new incarnation of n1's WAL,
// and n2 drops what n1 never made durable before storing anything new.
// Then (uploads held back by a long commit interval) both nodes are killed
// and their WALs compared: n1's WAL and n2's replica of it hold exactly
// the same records. Restarted with uploads on, every acknowledged message
// is in the table exactly once with dense offsets.
func TestClusterReplicaIncarnation(t *testing.T) {
	t.Setenv("TRIBUTARY_TEST_HOOKS", "1")
	t.Setenv("TRIBUTARY_TEST_TAP_DELAY", "30ms")
	base := t.TempDir()
	c := &replCluster{t: t, base: base, shared: filepath.Join(base, "shared"), commit: time.Hour, grace: "60s", pinGossip: true,
		nodes: map[string]*proc{}, down: map[string]bool{}}
	c.start("n1")
	c.start("n2", gossipAddr(t, c.node("n1")))
	c.waitAlive("n1", "n2")

	l := newLedger()
	stop := make(chan struct{})
	// life ends when n1 is killed, so that publishes waiting on the dead
	// connection end at once (paho would wait 10s for their PUBACK).
	var lifeMu sync.Mutex
	life, endLife := context.WithCancel(context.Background())
	current := func() context.Context {
		lifeMu.Lock()
		defer lifeMu.Unlock()
		return life
	}
	var wg sync.WaitGroup
	for k := range 8 {
		client := fmt.Sprintf("inc-%d", k)
		wg.Go(func() {
			seq := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx := current()
				c.mu.Lock()
				p, down := c.nodes["n1"], c.down["n1"]
				c.mu.Unlock()
				var cl *paho.Client
				var err error
				if !down {
					cl, err = mqttClient(ctx, p.MQTT, client)
				}
				if down || err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				for {
					select {
					case <-stop:
						cl.Disconnect(&paho.Disconnect{})
						return
					default:
					}
					done, err := publishN(ctx, cl, l, client, seq, 1)
					seq++ // a failed publish keeps its id, unacknowledged
					if err != nil || done != 1 {
						break
					}
				}
				cl.Disconnect(&paho.Disconnect{})
			}
		})
	}
	const rounds = 15
	for round := range rounds {
		before := l.acked()
		waitFor(t, 20*time.Second, fmt.Sprintf("round %d: acknowledgements from n1", round), func() bool { return l.acked() >= before+40 })
		c.kill("n1")
		lifeMu.Lock()
		endLife()
		life, endLife = context.WithCancel(context.Background())
		lifeMu.Unlock()
		c.start("n1", gossipAddr(t, c.node("n2")))
		c.waitAlive("n1", "n2")
	}
	// The last kill stops the load with it: the restarted n1 has nothing
	// new to send, and still tells n2 its new incarnation and durable end.
	before := l.acked()
	waitFor(t, 20*time.Second, "acknowledgements before the last kill", func() bool { return l.acked() >= before+40 })
	close(stop)
	c.kill("n1")
	endLife()
	wg.Wait()
	c.start("n1", gossipAddr(t, c.node("n2")))
	c.waitAlive("n1", "n2")
	n1, n2 := c.node("n1"), c.node("n2")
	// The lag counts from the restarted n1's WAL once its sender exists
	// (within a takeover tick, 250 ms): give it a second, then wait for
	// n2's answer.
	time.Sleep(time.Second)
	waitFor(t, 20*time.Second, "n2 to answer the restarted n1", func() bool {
		return metric(t, n1, "tributary_replication_lag_records") == 0
	})
	dropped := metric(t, n2, "tributary_replica_truncated_records_total")
	t.Logf("%d kills, %d messages acknowledged; n2 dropped %v records n1 never made durable", rounds+1, l.acked(), dropped)
	if dropped == 0 {
		t.Fatalf("no kill landed between a send and its fsync in %d rounds (n2 dropped nothing):\n%s", rounds, c.logs())
	}
	c.kill("n2")
	c.kill("n1")
	compareReplica(t, filepath.Join(base, "n1", "wal", "wal.db"), filepath.Join(base, "n2", "replicas", "n1", "wal.db"))

	// Uploads on: every acknowledged message reaches the table once.
	c.commit = 200 * time.Millisecond
	c.start("n1")
	c.start("n2", gossipAddr(t, c.node("n1")))
	c.checkExactlyOnce(l.ackedIDs())
}

// compareReplica opens an owner's WAL and a replica's copy of it (both
// nodes killed) and checks that they hold the same records.
func compareReplica(t *testing.T, ownerPath, replicaPath string) {
	t.Helper()
	ow, err := wal.Open(wal.Options{Path: ownerPath, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ow.Close()
	rw, err := wal.Open(wal.Options{Path: replicaPath, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	total := 0
	for _, op := range ow.Partitions() {
		rp, ok := rw.Partition(op.Stream, op.Partition)
		if !ok {
			t.Fatalf("the replica has no %s/%d (owner holds [%d, %d))", op.Stream, op.Partition, op.Released, op.Next)
		}
		if rp.Next != op.Next {
			t.Fatalf("%s/%d: owner's next offset %d, replica's %d", op.Stream, op.Partition, op.Next, rp.Next)
		}
		from := max(op.Released, rp.Released)
		want, err := ow.Read(op.Stream, op.Partition, from, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rw.Read(op.Stream, op.Partition, from, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s/%d from %d: replica holds %d records, owner %d", op.Stream, op.Partition, from, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s/%d offset %d: replica %+v, owner %+v", op.Stream, op.Partition, want[i].Offset, got[i], want[i])
			}
		}
		total += len(want)
	}
	if total == 0 {
		t.Fatal("nothing to compare: the owner's WAL is empty")
	}
	t.Logf("owner and replica WALs agree on %d records", total)
}
