//go:build bench

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/consume"
	"github.com/tributary-io/tributary/tables"
)

// Consume-side benchmarks (issue 4), in `make bench`:
//
//	TestBenchFetchThroughput  a kgo consumer reads committed 1 KiB records
//	                          from the table through the cloud server, and
//	                          the same records from franz-go's kfake (in
//	                          memory); MB/s of both, their ratio, each
//	                          against the disk's direct sequential write
//	                          bandwidth measured in the same run, and the
//	                          time to the first record from earliest.
//	                          1000 MiB by default (the 1 GB);
//	                          TRIBUTARY_BENCH_FETCH_MB sets another size.
//	TestBenchTailLatency      10,000 msg/s of MQTT QoS 1 into `tributary
//	                          dev`; a group consumer tails the stream.
//
// TRIBUTARY_BENCH_FETCH_MB sets the data size (default 200 for the
// Pulsar benchmark; TestBenchFetchThroughput defaults to 640, what a ~60 s
// setup fits on a 2-core machine; 1000 for 1 GB).
// TRIBUTARY_BENCH_CPUPROFILE=FILE writes a CPU profile of the
// tributary fetch (server and kgo client, in this process) to FILE.

func benchFetchMB() int { return benchFetchMBOr(200) }

func benchFetchMBOr(def int) int {
	if n, err := strconv.Atoi(os.Getenv("TRIBUTARY_BENCH_FETCH_MB")); err == nil && n > 0 {
		return n
	}
	return def
}

const benchRecordsPerFile = 65536

func benchRecord(off int64, rng *rand.Rand) *tributary.Record {
	v := make([]byte, 1024)
	for i := range v {
		v[i] = byte(rng.UintN(256))
	}
	copy(v, fmt.Sprintf("rec-%012d|", off))
	return &tributary.Record{Stream: "bench.fetch", Partition: 0, Offset: off, Timestamp: time.Now().UnixMicro(),
		Topic: "bench.fetch", Key: []byte(fmt.Sprintf("k%d", off)), Value: v, Source: "kafka", ClientID: "bench", Node: "bench"}
}

// consumeAll reads n records of topic from addr from the start and
// returns the time to the first record and the total time.
func consumeAll(t *testing.T, addr, topic string, n int) (ttfb, total time.Duration, bytes int64) {
	t.Helper()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got := 0
	next := int64(0)
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records", addr, got, n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("%s: %v", addr, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if got == 0 {
				ttfb = time.Since(start)
			}
			if r.Offset != next {
				t.Fatalf("%s: offset %d, want %d", addr, r.Offset, next)
			}
			next++
			got++
			bytes += int64(len(r.Value) + len(r.Key))
		})
	}
	return ttfb, time.Since(start), bytes
}

// writeBenchTable commits n benchRecords to partition 0 of bench.fetch,
// benchRecordsPerFile per data file, calling each with every record.
func writeBenchTable(t *testing.T, cat *tables.Catalog, dir string, n int, rng *rand.Rand, each func(*tributary.Record)) {
	t.Helper()
	for from := 0; from < n; from += benchRecordsPerFile {
		recs := make([]*tributary.Record, min(benchRecordsPerFile, n-from))
		for i := range recs {
			recs[i] = benchRecord(int64(from+i), rng)
			if each != nil {
				each(recs[i])
			}
		}
		tabletest.Commit(t, cat, "bench.fetch", recs)
	}
}

func TestBenchFetchThroughput(t *testing.T) {
	mb := benchFetchMBOr(1000)
	n := mb << 10 // 1 KiB records
	dir := t.TempDir()
	ctx := context.Background()
	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.AllocatePartition(ctx, "bench.fetch", "bench"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "bench.fetch"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.DefaultProduceTopic("bench.fetch"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	prep := time.Now()
	writeBenchTable(t, cat, dir, n, rng, func(r *tributary.Record) {
		prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Partition: 0}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("kfake produce: %v", err)
			}
		})
	})
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	t.Logf("prepared %d records (%d MiB) in the table and in kfake in %s", n, mb, time.Since(prep).Round(time.Millisecond))

	cs, err := consume.NewServer(consume.Config{Config: kafka.Config{Addr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, OffsetsDB: "sqlite://" + filepath.Join(dir, "catalog.db")}, cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Start(); err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)

	disk := measureDirectWrite(t, dir)
	stop := cpuProfileTo(t, os.Getenv("TRIBUTARY_BENCH_CPUPROFILE"))
	tTTFB, tTotal, tBytes := consumeAll(t, cs.Addr(), "bench.fetch", n)
	stop()
	// Warm: the same consumer again, served from the batch cache as far
	// as it holds the data (256 MiB by default).
	_, wTotal, wBytes := consumeAll(t, cs.Addr(), "bench.fetch", n)
	fTTFB, fTotal, fBytes := consumeAll(t, fake.ListenAddrs()[0], "bench.fetch", n)
	tMBs := float64(tBytes) / (1 << 20) / tTotal.Seconds()
	fMBs := float64(fBytes) / (1 << 20) / fTotal.Seconds()
	wMBs := float64(wBytes) / (1 << 20) / wTotal.Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, "\nKafka fetch, one kgo consumer from earliest, %d × 1 KiB records (%d MiB), default fetch sizes\n", n, mb)
	disk = (disk + measureDirectWrite(t, dir)) / 2 // before and after: the disk is shared
	fmt.Fprintf(&b, "disk: direct sequential write (O_DIRECT, 4 MiB writes) %.0f MB/s, mean of before and after the runs\n", disk)
	fmt.Fprintf(&b, "%-34s %10s %8s %12s %10s\n", "server", "MB/s", "x disk", "first record", "total")
	fmt.Fprintf(&b, "%-34s %10.1f %8.2f %12s %10s\n", "tributary cloud (Parquet, cold)", tMBs, tMBs*1.048576/disk, tTTFB.Round(time.Millisecond), tTotal.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-34s %10.1f %8.2f %12s %10s\n", "tributary cloud (again, warm)", wMBs, wMBs*1.048576/disk, "", wTotal.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-34s %10.1f %8.2f %12s %10s\n", "kfake (memory)", fMBs, fMBs*1.048576/disk, fTTFB.Round(time.Millisecond), fTotal.Round(time.Millisecond))
	fmt.Fprintf(&b, "ratio tributary/kfake: %.2f cold, %.2f warm (target >= 0.8 cold)\n", tMBs/fMBs, wMBs/fMBs)
	t.Log(b.String())
	fmt.Print(b.String())
}

// TestBenchTailLatency: 100 MQTT devices × 100 msg/s (QoS 1) into
// `tributary dev` (commit interval 200 ms) while a kgo group consumer
// tails the stream through the in-process cloud server. The latency of a
// record is its delivery time minus its acceptance timestamp (the
// timestamp column: set when the edge accepted it, just before the fsync
// and the PUBACK), so it slightly over-states PUBACK → delivery.
func TestBenchTailLatency(t *testing.T) {
	d := benchSeconds()
	dir := t.TempDir()
	p := startDev(t, dir)
	load(t, p.MQTT, 1, 2, 10, time.Second, nil) // creates the stream
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumerGroup("bench-tail"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lat []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { lat = append(lat, now.Sub(r.Timestamp)) })
		}
	}()
	time.Sleep(2 * time.Second) // joined and tailing
	sum := load(t, p.MQTT, 1, 100, 100, d, nil)
	time.Sleep(3 * time.Second)
	cancel()
	<-done
	if len(lat) == 0 {
		t.Fatal("nothing delivered")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))].Round(time.Millisecond) }
	s := fmt.Sprintf("\nTail latency, %0.f msg/s MQTT QoS 1 (acked %d) for %s, commit interval 200 ms: accepted -> Kafka delivery over %d records: p50 %s, p99 %s, max %s\n",
		sum.MsgsPerSec(), sum.Acked, d, len(lat), q(0.5), q(0.99), q(1))
	t.Log(s)
	fmt.Print(s)
}

// cpuProfileTo writes this process's CPU profile to file (none if file is
// "") until the returned stop is called.
func cpuProfileTo(t *testing.T, file string) (stop func()) {
	t.Helper()
	if file == "" {
		return func() {}
	}
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}
}
