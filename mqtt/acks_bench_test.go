package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

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
func benchPublish(b *testing.B, sink testSink, window int) {
	_, pipelined := sink.(pipelinedSink)
	s, err := New(Config{TCPAddr: "127.0.0.1:0", NodeID: "n", BlockingAcks: !pipelined,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, appender(sink))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	conn := dialRaw(b, s.Addrs()[ListenerTCP], 5, "bench")
	var burst bytes.Buffer
	for i := range window {
		burst.Write(rawPublish(5, 1, uint16(i+1), "bench/t", bytes.Repeat([]byte{'x'}, 256)))
	}
	r := bufio.NewReader(conn)
	ack := make([]byte, 4*window)
	b.ReportAllocs()
	b.SetBytes(256)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for n := 0; n < b.N; n += window {
		if _, err := conn.Write(burst.Bytes()); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, ack); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1000, "cpu-µs/msg")
}

// BenchmarkPublishPipelined is the asynchronous acknowledgement path, with
// 32 and with 1 message in flight; cpu-µs/msg is the process's CPU time
// (user and system: both sides of the socket) per message.
func BenchmarkPublishPipelined(b *testing.B) {
	b.Run("inflight32", func(b *testing.B) { benchPublish(b, nullPipelinedSink{}, 32) })
	b.Run("inflight1", func(b *testing.B) { benchPublish(b, nullPipelinedSink{}, 1) })
}

// BenchmarkPublishBlocking is the blocking path (Append in OnPublish).
func BenchmarkPublishBlocking(b *testing.B) {
	b.Run("inflight32", func(b *testing.B) { benchPublish(b, nullSink{}, 32) })
	b.Run("inflight1", func(b *testing.B) { benchPublish(b, nullSink{}, 1) })
}
