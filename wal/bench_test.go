package wal

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tributary-io/tributary"
)

func benchAppend(b *testing.B, batch int) {
	benchAppendSize(b, batch, 256)
}

// benchAppendSize appends with fsync, unless WALBENCH_NOSYNC is set to
// measure the CPU cost apart from the disk (then it also reports the file
// size per record).
func benchAppendSize(b *testing.B, batch, size int) {
	path := filepath.Join(b.TempDir(), "wal.db")
	w, err := Open(Options{Path: path, NoSync: os.Getenv("WALBENCH_NOSYNC") != ""})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	value := make([]byte, size)
	b.SetBytes(int64(len(value) * batch))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		recs := make([]*tributary.Record, batch)
		for pb.Next() {
			for i := range recs {
				recs[i] = &tributary.Record{Stream: "bench.s", Partition: 0, Topic: "t", Value: value, Source: "mqtt"}
				if size > 256 {
					recs[i].Source, recs[i].ProducerID, recs[i].Sequence = "kafka", 7, int32(i)
				}
			}
			if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: recs}).Err; err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	st := w.Stats()
	if fi, err := os.Stat(path); err == nil && os.Getenv("WALBENCH_NOSYNC") != "" {
		// Disk blocks, not the size: the file is pre-sized and grown in
		// large steps, as holes.
		used := fi.Size()
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			used = sys.Blocks * 512
		}
		b.ReportMetric(float64(used)/float64(st.AppendedRecords), "filebytes/rec")
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
	if st.Commits > 0 {
		b.ReportMetric(float64(st.AppendedRecords)/float64(st.Commits), "records/commit")
	}
}

// BenchmarkAppendParallel appends single 256-byte records from GOMAXPROCS×p
// goroutines, with fsync; run with -cpu or SetParallelism to vary load.
func BenchmarkAppendParallel(b *testing.B) {
	for _, p := range []int{1, 16, 64} {
		b.Run(map[int]string{1: "p1", 16: "p16", 64: "p64"}[p], func(b *testing.B) {
			b.SetParallelism(p)
			benchAppend(b, 1)
		})
	}
}

// BenchmarkAppendBatch appends batches of 64 records of 256 bytes.
func BenchmarkAppendBatch(b *testing.B) {
	b.SetParallelism(4)
	benchAppend(b, 64)
}

// BenchmarkAppendKafka appends batches of 1000 records of 1 KiB from four
// goroutines, like Kafka producers sending large batches (MB/s is value
// bytes).
func BenchmarkAppendKafka(b *testing.B) {
	b.SetParallelism(2) // GOMAXPROCS×2 producers
	benchAppendSize(b, 1000, 1024)
}

// BenchmarkAppendRelease is the steady state with an uplink: batches of 64
// records of 256 bytes are appended and, every 16 batches, everything but
// the last batch is released, as after a table commit.
func BenchmarkAppendRelease(b *testing.B) {
	w, err := Open(Options{Path: filepath.Join(b.TempDir(), "wal.db"), NoSync: os.Getenv("WALBENCH_NOSYNC") != ""})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	value := make([]byte, 256)
	recs := make([]*tributary.Record, 64)
	b.SetBytes(int64(len(value) * len(recs)))
	for i := 0; i < b.N; i++ {
		for j := range recs {
			recs[j] = &tributary.Record{Stream: "bench.s", Topic: "t", Value: value, Source: "mqtt"}
		}
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: recs}).Err; err != nil {
			b.Fatal(err)
		}
		if i%16 == 15 {
			if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "bench.s", Partition: 0, Offset: recs[0].Offset}).Err; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendWhileReleasing is the steady state of an edge node under
// load: single-record appends from GOMAXPROCS×16 goroutines (one message
// in flight per connection) while an uplink releases everything appended
// so far every 10 ms. It reports the appends' p99 latency: a release in
// the appends' group commit makes them wait for its chunk deletes.
func BenchmarkAppendWhileReleasing(b *testing.B) {
	w, err := Open(Options{Path: filepath.Join(b.TempDir(), "wal.db"), NoSync: os.Getenv("WALBENCH_NOSYNC") != ""})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	value := make([]byte, 256)
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		defer close(released)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if ps, ok := w.Partition("bench.s", 0); ok {
				if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: "bench.s", Partition: 0, Offset: ps.Next}).Err; err != nil {
					b.Error(err)
					return
				}
			}
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			r := &tributary.Record{Stream: "bench.s", Topic: "t", Value: value, Source: "mqtt"}
			start := time.Now()
			if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	close(stop)
	<-released
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendClosedLoop is N clients with one message in flight each
// and a round trip between an acknowledgement and their next append (the
// network, the client, the front door), as MQTT devices publishing QoS 1
// one at a time. It reports records/s against the commit bound (N ÷ the
// mean commit duration): grouping decides how close it gets.
func BenchmarkAppendClosedLoop(b *testing.B) {
	for _, c := range []struct {
		name    string
		clients int
		rtt     time.Duration
	}{{"c10-rtt0", 10, 0}, {"c10-rtt200us", 10, 200 * time.Microsecond}, {"c10-rtt500us", 10, 500 * time.Microsecond}} {
		b.Run(c.name, func(b *testing.B) {
			w, err := Open(Options{Path: filepath.Join(b.TempDir(), "wal.db")})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			value := make([]byte, 256)
			var next sync.WaitGroup
			var count atomic.Int64
			b.ResetTimer()
			for range c.clients {
				next.Add(1)
				go func() {
					defer next.Done()
					for count.Add(1) <= int64(b.N) {
						r := &tributary.Record{Stream: "bench.s", Topic: "t", Value: value, Source: "mqtt"}
						if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
							b.Error(err)
							return
						}
						if c.rtt > 0 {
							time.Sleep(c.rtt)
						}
					}
				}()
			}
			next.Wait()
			b.StopTimer()
			st := w.Stats()
			var m dto.Metric
			if err := w.metrics.fsync.Write(&m); err != nil {
				b.Fatal(err)
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "records/s")
			if n := m.GetHistogram().GetSampleCount(); n > 0 {
				mean := m.GetHistogram().GetSampleSum() / float64(n)
				b.ReportMetric(mean*1e6, "commit-µs")
				b.ReportMetric(rate/(float64(c.clients)/mean), "x-commit-bound")
				b.ReportMetric(float64(st.AppendedRecords)/float64(st.Commits), "records/commit")
			}
		})
	}
}
