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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/consume"
	ppulsar "github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
)

// TestBenchPulsarConsume (issue 5, in `make bench`): committed 1 KiB
// records in one table partition, read from earliest by a Shared
// subscription with 1 and with 4 pulsar-client-go consumers (acking every
// message), next to one kgo consumer fetching the same data through the
// Kafka server of the same run; both servers share nothing but the
// catalog (each has its own table reader, so each starts cold).
// TRIBUTARY_BENCH_FETCH_MB sets the data size (default 200);
// TRIBUTARY_BENCH_PULSAR_CPUPROFILE=FILE writes a CPU profile of the
// 1-consumer run (server and client, in this process) to FILE.
func TestBenchPulsarConsume(t *testing.T) {
	mb := benchFetchMB()
	n := mb << 10
	dir := t.TempDir()
	ctx := context.Background()
	uri := "sqlite://" + filepath.Join(dir, "catalog.db")
	cat, err := tables.Open(ctx, tables.Config{URI: uri, Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	const stream = "bench.fetch"
	if _, err := cat.AllocatePartition(ctx, stream, "bench"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prep := time.Now()
	writeBenchTable(t, cat, dir, n, rng, nil)
	t.Logf("prepared %d records (%d MiB) in %s", n, mb, time.Since(prep).Round(time.Millisecond))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	ks, err := consume.NewServer(consume.Config{Config: kafka.Config{Addr: "127.0.0.1:0", Logger: quiet}, OffsetsDB: uri}, cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Start(); err != nil {
		t.Fatal(err)
	}
	defer ks.Close(ctx)
	_, kTotal, kBytes := consumeAll(t, ks.Addr(), stream, n)

	type run struct {
		consumers int
		total     time.Duration
		bytes     int64
	}
	var runs []run
	for _, consumers := range []int{1, 4} {
		ps, err := ppulsar.NewServer(ppulsar.Config{Addr: "127.0.0.1:0", CursorsDB: uri, Logger: quiet}, tables.NewReader(cat, tables.ReaderConfig{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Listen(); err != nil {
			t.Fatal(err)
		}
		file := ""
		if consumers == 1 {
			file = os.Getenv("TRIBUTARY_BENCH_PULSAR_CPUPROFILE")
		}
		stop := cpuProfileTo(t, file)
		total, b := pulsarSharedRead(t, ps.Addr(), fmt.Sprintf("bench-%d", consumers), consumers, n)
		stop()
		ps.Close(ctx)
		runs = append(runs, run{consumers, total, b})
	}

	// The client's own ceiling, as kfake is Kafka's: the same messages
	// served from memory, so the ratio below is what the server side
	// leaves of what pulsar-client-go can take in this process.
	ceil := newPulsarCeiling(t, n)
	cTotal, _ := pulsarSharedRead(t, ceil.Addr(), "ceiling", 1, n)
	ceil.Close()

	var sb strings.Builder
	kMBs := float64(kBytes) / (1 << 20) / kTotal.Seconds()
	fmt.Fprintf(&sb, "\nConsume from earliest, %d × 1 KiB committed records (%d MiB), cold caches\n", n, mb)
	fmt.Fprintf(&sb, "%-40s %12s %10s %10s\n", "consumer", "msgs/s", "MB/s", "total")
	fmt.Fprintf(&sb, "%-40s %12.0f %10.1f %10s\n", "Kafka fetch (kgo, 1 consumer)", float64(n)/kTotal.Seconds(), kMBs, kTotal.Round(time.Millisecond))
	for _, r := range runs {
		mbs := float64(r.bytes) / (1 << 20) / r.total.Seconds()
		fmt.Fprintf(&sb, "%-40s %12.0f %10.1f %10s   (%.2f× Kafka)\n", fmt.Sprintf("Pulsar Shared, %d consumer(s), acking", r.consumers),
			float64(n)/r.total.Seconds(), mbs, r.total.Round(time.Millisecond), mbs/kMBs)
	}
	fmt.Fprintf(&sb, "%-40s %12.0f %10s %10s\n", "pulsar-client-go ceiling (from memory)", float64(n)/cTotal.Seconds(), "", cTotal.Round(time.Millisecond))
	fmt.Fprintf(&sb, "Pulsar Shared, 1 consumer: %.2f× the client's ceiling; the ceiling is %.2f× Kafka fetch\n",
		cTotal.Seconds()/runs[0].total.Seconds(), kTotal.Seconds()/cTotal.Seconds())
	fmt.Fprintf(&sb, "target: Pulsar Shared with 1 consumer >= 0.6× Kafka fetch\n")
	t.Log(sb.String())
	fmt.Print(sb.String())
}

// pulsarSharedRead reads n messages through a Shared subscription of k
// consumers, acking each, and returns the time and the bytes (key +
// payload, as the Kafka figure counts them).
func pulsarSharedRead(t *testing.T, addr, sub string, k, n int) (time.Duration, int64) {
	t.Helper()
	start := time.Now()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + addr, Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var got, bytes atomic.Int64
	var wg sync.WaitGroup
	for range k {
		c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://tributary/bench/fetch", SubscriptionName: sub,
			Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The consumer's channel, not Receive with a timeout per
			// message: that costs a timer and a context per message.
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for got.Load() < int64(n) {
				select {
				case cm := <-c.Chan():
					c.Ack(cm.Message)
					bytes.Add(int64(len(cm.Payload()) + len(cm.Key())))
					got.Add(1)
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() < int64(n) {
		t.Fatalf("pulsar %s: %d of %d messages", sub, got.Load(), n)
	}
	return time.Since(start), bytes.Load()
}
