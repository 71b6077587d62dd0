package pulsar

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// TestServerWithPulsarClient reads through pulsar-client-go, linked into
// the same binary as this package's protobuf types (their registrations
// must not collide).
func TestServerWithPulsarClient(t *testing.T) {
	s, recs := testServer(t, 5, Config{})
	cl, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: "pulsar://" + s.Addr(), Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, err := cl.Subscribe(pulsarclient.ConsumerOptions{Topic: testTopic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsarclient.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, r := range recs {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID().EntryID() != int64(i) || !bytes.Equal(m.Payload(), r.Value) || m.Key() != string(r.Key) {
			t.Fatalf("message %d: id %v payload %q key %q", i, m.ID(), m.Payload(), m.Key())
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProduceWithPulsarClient: pulsar-client-go producers, batched (lz4)
// and not, through the write path: every message id's entry (plus its
// batch index) is the record's offset, the values in send order.
func TestProduceWithPulsarClient(t *testing.T) {
	be := newTestProduce(t, t.TempDir(), nil)
	s, _ := testServer(t, 1, Config{Produce: be})
	cl, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: "pulsar://" + s.Addr(), Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := map[int64]string{}
	for _, batched := range []bool{false, true} {
		p, err := cl.CreateProducer(pulsarclient.ProducerOptions{Topic: testTopic, DisableBatching: !batched,
			CompressionType: pulsarclient.LZ4, BatchingMaxPublishDelay: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{}, 50)
		for i := 0; i < 50; i++ {
			v := fmt.Sprintf("batched=%v %d", batched, i)
			p.SendAsync(ctx, &pulsarclient.ProducerMessage{Payload: []byte(v), Key: "k"}, func(id pulsarclient.MessageID, _ *pulsarclient.ProducerMessage, err error) {
				if err != nil {
					t.Errorf("%s: %v", v, err)
				} else {
					want[id.EntryID()+int64(max(id.BatchIdx(), 0))] = v
				}
				done <- struct{}{}
			})
		}
		for i := 0; i < 50; i++ {
			<-done
		}
		p.Close()
	}
	recs, err := be.tail.Read(ctx, "factory.telemetry", 0, 0, 1<<20)
	if err != nil || len(recs) != 100 || len(want) != 100 {
		t.Fatalf("%d records, %d acknowledged, %v", len(recs), len(want), err)
	}
	for _, r := range recs {
		if want[r.Offset] != string(r.Value) || string(r.Key) != "k" {
			t.Fatalf("offset %d holds %q, acknowledged for %q", r.Offset, r.Value, want[r.Offset])
		}
	}
}
