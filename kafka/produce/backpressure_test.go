package produce

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestBackpressureRetriedByClients checks the claim behind the choice of
// KAFKA_STORAGE_ERROR for an exhausted WAL budget: kgo's idempotent producer
// librdkafka and sarama retry it, and once the budget frees up every record lands
// exactly once.
func TestBackpressureRetriedByClients(t *testing.T) {
	t.Run("kgo", func(t *testing.T) {
		be := newFakeBackend("edge-1")
		be.addStream("factory.bp", "edge-1")
		be.budget.Store(true)
		s := startServer(t, Config{BackpressureThrottle: 100 * time.Millisecond}, be)
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.DefaultProduceTopic("factory.bp"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
			// kgo refreshes metadata before retrying KAFKA_STORAGE_ERROR; its
			// default minimum metadata age (5s) would slow the test down.
			kgo.MetadataMinAge(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var errs []error
		var mu sync.Mutex
		for i := range 50 {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		testkit.Eventually(t, 10*time.Second, "refusals", func() bool { return s.Stats().Backpressure >= 2 })
		be.budget.Store(false)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("kgo gave up: %v", errs[0])
		}
		got := be.records("factory.bp", 0)
		if len(got) != 50 {
			t.Fatalf("%d records, want 50", len(got))
		}
		for i, r := range got {
			if string(r.Value) != fmt.Sprint(i) {
				t.Fatalf("record %d = %q", i, r.Value)
			}
		}
	})
	t.Run("sarama", func(t *testing.T) {
		be := newFakeBackend("edge-1")
		be.addStream("factory.bps", "edge-1")
		be.budget.Store(true)
		s := startServer(t, Config{BackpressureThrottle: 100 * time.Millisecond}, be)
		go func() {
			for s.Stats().Backpressure < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			be.budget.Store(false)
		}()
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		cfg.Producer.Retry.Backoff = 20 * time.Millisecond
		cfg.Producer.Retry.Max = 50
		p, err := sarama.NewSyncProducer([]string{s.Addr()}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if _, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: "factory.bps", Value: sarama.StringEncoder("x")}); err != nil || off != 0 {
			t.Fatalf("offset %d: %v", off, err)
		}
		if got := be.records("factory.bps", 0); len(got) != 1 {
			t.Fatalf("%d records", len(got))
		}
	})
	t.Run("kcat", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatalf("kcat (librdkafka) is required for this test: install the Debian package kcat: %v", err)
		}
		be := newFakeBackend("edge-1")
		be.addStream("factory.bpk", "edge-1")
		be.budget.Store(true)
		s := startServer(t, Config{BackpressureThrottle: 100 * time.Millisecond}, be)
		go func() {
			for s.Stats().Backpressure < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			be.budget.Store(false)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, "-b", s.Addr(), "-P", "-t", "factory.bpk", "-p", "0",
			"-X", "enable.idempotence=true", "-X", "retry.backoff.ms=20", "-X", "message.timeout.ms=20000")
		cmd.Stdin = bytes.NewBufferString("a\nb\nc\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		got := be.records("factory.bpk", 0)
		if len(got) != 3 || string(got[0].Value) != "a" || string(got[2].Value) != "c" {
			t.Fatalf("records %v\n%s", got, out)
		}
	})
}

// TestConcurrentProducers runs several idempotent kgo producers on one
// partition at once: every producer's records land exactly once and in its
// order, offsets stay dense.
func TestConcurrentProducers(t *testing.T) {
	be := newFakeBackend("edge-1")
	be.addStream("factory.many", "edge-1")
	s := startServer(t, Config{}, be)
	const producers, n = 4, 1000
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.DefaultProduceTopic("factory.many"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range n {
				cl.Produce(ctx, &kgo.Record{Key: []byte{byte(p)}, Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
					if err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	got := be.records("factory.many", 0)
	if len(got) != producers*n {
		t.Fatalf("%d records, want %d", len(got), producers*n)
	}
	next := make([]int, producers)
	for i, r := range got {
		p := int(r.Key[0])
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprint(next[p]) {
			t.Fatalf("offset %d: producer %d value %q, want %d", r.Offset, p, r.Value, next[p])
		}
		next[p]++
	}
}
