package pulsar

import (
	"bytes"
	"context"
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
