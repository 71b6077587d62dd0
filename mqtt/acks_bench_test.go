package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/tributary-io/tributary"
)

// nullSink makes every record durable at once (in memory nothing is kept):
// what is left of a publish's cost is the front door's own.
type nullSink struct{}

func (nullSink) Append(context.Context, ...*tributary.Record) error { return nil }

type nullPipelinedSink struct{ nullSink }

func (nullPipelinedSink) AppendPipelined(_ context.Context, _ *tributary.Record, done func(error)) error {
	done(nil)
	return nil
}

// benchPublish sends b.N QoS 1 publishes of 256 bytes on one connection,
// 32 in flight, and reads their PUBACKs; allocs/op is the allocations per
// message of the whole process (server and this small client).
func benchPublish(b *testing.B, sink Sink) {
	s, err := New(Config{TCPAddr: "127.0.0.1:0", NodeID: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sink)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	conn := dialRaw(b, s.Addrs()[ListenerTCP], 5, "bench")
	const window = 32
	var burst bytes.Buffer
	for i := range window {
		burst.Write(rawPublish(5, 1, uint16(i+1), "bench/t", bytes.Repeat([]byte{'x'}, 256)))
	}
	r := bufio.NewReader(conn)
	ack := make([]byte, 4*window)
	b.ReportAllocs()
	b.SetBytes(256)
	b.ResetTimer()
	for n := 0; n < b.N; n += window {
		if _, err := conn.Write(burst.Bytes()); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, ack); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishPipelined is the asynchronous acknowledgement path.
func BenchmarkPublishPipelined(b *testing.B) { benchPublish(b, nullPipelinedSink{}) }

// BenchmarkPublishBlocking is the blocking path (Sink.Append in OnPublish).
func BenchmarkPublishBlocking(b *testing.B) { benchPublish(b, nullSink{}) }
