package wal

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// BenchmarkAppendKafkaBatches appends Kafka record batches of 100 records
// of 1 KiB (one batch entry each) from GOMAXPROCS×32 goroutines, without
// fsync: the WAL's cost per produced byte (MB/s is batch bytes).
func BenchmarkAppendKafkaBatches(b *testing.B) {
	w, err := Open(Options{Path: filepath.Join(b.TempDir(), "wal.db"), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	rs := make([]kafkatest.Rec, 100)
	for i := range rs {
		rs[i] = kafkatest.Rec{Value: bytes.Repeat([]byte{byte(i)}, 1024), TSDelta: int64(i)}
	}
	raw := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1, FirstTS: 1}, rs...)
	b.SetBytes(int64(len(raw)))
	b.SetParallelism(32) // enough appends in flight to fill each group commit
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan error, 1)
		for pb.Next() {
			w.Submit(Op{Kind: OpAppend, Batch: &Batch{Stream: "a.b", Partition: 0, Topic: "a.b", Source: "kafka",
				Records: bytes.Clone(raw)}, Done: func(wr Result) { done <- wr.Err }})
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	st, _ := w.Partition("a.b", 0)
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "a.b", Partition: 0, Offset: st.Next}).Err; err != nil {
		b.Fatal(err)
	}
}
