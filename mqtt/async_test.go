package mqtt

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/wal"
)

// asyncSink is a memSink that also queues QoS 0 records asynchronously.
type asyncSink struct {
	*memSink
	asyncCalls int
}

func (a *asyncSink) AppendAsync(ctx context.Context, rec *tributary.Record, done func(error)) error {
	a.mu.Lock()
	a.asyncCalls++
	a.mu.Unlock()
	go func() { done(a.Append(ctx, rec)) }()
	return nil
}

// TestQoS0AsyncAppend: QoS 0 publishes go through
// AppendAsync (the read loop does not wait), land in order, and a failed
// one is counted as dropped; QoS 1 still uses the blocking Append.
func TestQoS0AsyncAppend(t *testing.T) {
	sink := &asyncSink{memSink: &memSink{}}
	s, err := New(Config{TCPAddr: "127.0.0.1:0", NodeID: "n", DefaultStream: "a.b",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, appender(sink))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c := dialPaho(t, s.Addrs()[ListenerTCP], "async", nil)
	ctx := context.Background()
	for i := range 50 {
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "x", QoS: 0, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "x", QoS: 1, Payload: []byte("q1")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "50 qos 0 accepted", func() bool { return s.Stats().Accepted[0] == 50 })
	sink.mu.Lock()
	if sink.asyncCalls != 50 || len(sink.recs) != 51 {
		t.Fatalf("async calls %d, records %d", sink.asyncCalls, len(sink.recs))
	}
	sink.mu.Unlock()
	sink.setFail(wal.ErrBudgetExceeded)
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "x", QoS: 0, Payload: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "qos 0 drop counted", func() bool { return s.Stats().DroppedQoS0 == 1 })
}
