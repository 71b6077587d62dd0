package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
)

// kafkaSent is what the test produced, by key (every Kafka record has a
// unique key).
type kafkaSent struct {
	mu   sync.Mutex
	recs map[string]*tributary.Record // key -> expected value/headers
	ack  map[string]bool
}

func newKafkaSent() *kafkaSent {
	return &kafkaSent{recs: map[string]*tributary.Record{}, ack: map[string]bool{}}
}

func (k *kafkaSent) add(key string, value []byte, headers []tributary.Header) {
	k.mu.Lock()
	k.recs[key] = &tributary.Record{Key: []byte(key), Value: value, Headers: headers}
	k.mu.Unlock()
}

func (k *kafkaSent) acked(key string) {
	k.mu.Lock()
	k.ack[key] = true
	k.mu.Unlock()
}

func kafkaValue(prefix string, i int) []byte {
	if i%10 == 0 {
		return []byte{} // empty values are kept as empty, not null
	}
	return append([]byte(fmt.Sprintf("%s-%d|", prefix, i)), 0x00, 0x01, 0xfe, byte(i))
}

// checkKafkaRows asserts every Kafka row is one the test sent, byte-exact,
// at most once; every acked one exactly once.
func checkKafkaRows(t *testing.T, k *kafkaSent, rows []*tributary.Record, exactHeaders bool) int {
	t.Helper()
	seen := map[string]int{}
	n := 0
	for _, r := range rows {
		if r.Source != "kafka" {
			continue
		}
		n++
		key := string(r.Key)
		want := k.recs[key]
		if want == nil {
			t.Fatalf("kafka row %d@%d with unknown key %q", r.Offset, r.Partition, r.Key)
		}
		seen[key]++
		if seen[key] > 1 {
			t.Fatalf("key %q appears %d times", key, seen[key])
		}
		if !bytes.Equal(r.Value, want.Value) || r.Topic != "factory.telemetry" {
			t.Fatalf("key %q: value %q topic %q, sent %q", key, r.Value, r.Topic, want.Value)
		}
		if exactHeaders {
			if len(r.Headers) != len(want.Headers) {
				t.Fatalf("key %q: %d headers, sent %d", key, len(r.Headers), len(want.Headers))
			}
			for i := range want.Headers {
				if r.Headers[i].Key != want.Headers[i].Key || !bytes.Equal(r.Headers[i].Value, want.Headers[i].Value) {
					t.Fatalf("key %q header %d differs", key, i)
				}
			}
		}
		if r.ProducerTimestamp == 0 {
			t.Fatalf("key %q: producer timestamp not kept", key)
		}
	}
	for key := range k.ack {
		if seen[key] != 1 {
			t.Fatalf("acknowledged key %q appears %d times", key, seen[key])
		}
	}
	return n
}

// TestKafkaProduce: a kgo idempotent producer (defaults), kcat with zstd and
// with lz4, and sarama each produce 10,000 records (keys, headers, empty
// values) while MQTT traffic goes to the same stream; the table has every
// record exactly once, byte-exact, with dense offsets.
func TestKafkaProduce(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	const topic, n = "factory.telemetry", 10000
	k := newKafkaSent()
	l := newLedger()
	var wg sync.WaitGroup
	errs := make(chan error, 8)

	// MQTT at the same time.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := mqttClient(ctx, p.MQTT, "mqtt-side")
		if err != nil {
			errs <- err
			return
		}
		if _, err := publishN(ctx, cl, l, "mqtt-side", 0, 2000); err != nil {
			errs <- err
		}
	}()

	// kgo, idempotent by default.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
		if err != nil {
			errs <- err
			return
		}
		defer cl.Close()
		var pw sync.WaitGroup
		for i := range n {
			key := fmt.Sprintf("kgo-%06d", i)
			hs := []tributary.Header{{Key: "src", Value: []byte("kgo")}, {Key: "i", Value: []byte(fmt.Sprint(i))}}
			v := kafkaValue("kgo", i)
			k.add(key, v, hs)
			pw.Add(1)
			cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: v, Headers: []kgo.RecordHeader{{Key: "src", Value: []byte("kgo")}, {Key: "i", Value: []byte(fmt.Sprint(i))}}},
				func(r *kgo.Record, err error) {
					defer pw.Done()
					if err != nil {
						errs <- fmt.Errorf("kgo produce %s: %w", r.Key, err)
						return
					}
					k.acked(string(r.Key))
				})
		}
		pw.Wait()
	}()

	// kcat (librdkafka) with zstd and lz4: "key:value" lines, one header.
	for _, codec := range []string{"zstd", "lz4"} {
		var in strings.Builder
		for i := range n {
			key := fmt.Sprintf("kcat-%s-%06d", codec, i)
			v := fmt.Sprintf("kcat %s record %d", codec, i)
			if i%10 == 0 {
				v = ""
			}
			k.add(key, []byte(v), []tributary.Header{{Key: "codec", Value: []byte(codec)}})
			in.WriteString(key + ":" + v + "\n")
		}
		cmd := exec.Command(kcatPath(t), "-b", p.Kafka, "-P", "-t", topic, "-z", codec, "-K:", "-H", "codec="+codec,
			"-X", "enable.idempotence=true", "-X", "linger.ms=5")
		cmd.Stdin = strings.NewReader(in.String())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kcat -z %s: %v\n%s", codec, err, out)
		}
		for i := range n {
			k.acked(fmt.Sprintf("kcat-%s-%06d", codec, i))
		}
	}

	// sarama sync producer, batches of 500.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		pr, err := sarama.NewSyncProducer([]string{p.Kafka}, cfg)
		if err != nil {
			errs <- fmt.Errorf("sarama: %w", err)
			return
		}
		defer pr.Close()
		for start := 0; start < n; start += 500 {
			var msgs []*sarama.ProducerMessage
			for i := start; i < start+500; i++ {
				key := fmt.Sprintf("sarama-%06d", i)
				v := kafkaValue("sarama", i)
				k.add(key, v, []tributary.Header{{Key: "lib", Value: []byte("sarama")}})
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(v),
					Headers: []sarama.RecordHeader{{Key: []byte("lib"), Value: []byte("sarama")}}})
			}
			if err := pr.SendMessages(msgs); err != nil {
				errs <- fmt.Errorf("sarama send: %w", err)
				return
			}
			for _, m := range msgs {
				k.acked(string(m.Key.(sarama.StringEncoder)))
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.stop()
	rows := readTable(t, dir, topic)
	checkDense(t, rows)
	if got := checkKafkaRows(t, k, rows, true); got != 4*n {
		t.Fatalf("%d Kafka rows, want %d", got, 4*n)
	}
	var mqttRows []*tributary.Record
	for _, r := range rows {
		if r.Source == "mqtt" {
			mqttRows = append(mqttRows, r)
		}
	}
	checkRows(t, l, mqttRows)
	if len(mqttRows) != 2000 {
		t.Fatalf("%d MQTT rows, want 2000", len(mqttRows))
	}
}

func kcatPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found (Debian package kcat; `make test` installs it): %v", err)
	}
	return path
}

// TestKafkaCrashIdempotent: a kgo idempotent producer keeps producing while
// the node is killed with SIGKILL (three times, at random moments) and
// restarted on the same address; kgo retries its in-flight batches against
// the restarted node, which deduplicates the ones already durable from the
// producer state it rebuilt. kgo has up to five produce requests in flight
// on its connection, which the node pipelines (counted by
// tributary_kafka_pipelined_requests_total), so the kills land among
// pipelined appends. Every record ends up in the table exactly once.
func TestKafkaCrashIdempotent(t *testing.T) {
	dir := t.TempDir()
	addr := freeLoopbackPort(t)
	p := startDev(t, dir, "--kafka-addr", addr)
	ctx := context.Background()
	k := newKafkaSent()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("factory.telemetry"), kgo.AllowAutoTopicCreation(),
		kgo.RecordRetries(1000), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var pw sync.WaitGroup
	var failMu sync.Mutex
	var failures []error
	stop := make(chan struct{})
	produced := make(chan int, 1)
	go func() {
		i := 0
		defer func() { produced <- i }()
		for ; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("crash-%06d", i)
			v := kafkaValue("crash", i)
			k.add(key, v, nil)
			pw.Add(1)
			cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: v}, func(r *kgo.Record, err error) {
				defer pw.Done()
				if err != nil {
					failMu.Lock()
					failures = append(failures, err)
					failMu.Unlock()
					return
				}
				k.acked(string(r.Key))
			})
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	acked := func() int {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.ack)
	}
	var dups int64
	var pipelined float64 // requests read while an earlier one of the connection waited
	for round := range 3 {
		before := acked()
		waitFor(t, 60*time.Second, "records acknowledged", func() bool { return acked() > before+500 })
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond) // a random kill point
		v, _ := scrapeMetrics(t, p)
		pipelined += v["tributary_kafka_pipelined_requests_total"]
		p.kill()
		time.Sleep(200 * time.Millisecond) // the producer retries against a dead node meanwhile
		p = startDev(t, dir, "--kafka-addr", addr)
		waitFor(t, 60*time.Second, "producing again", func() bool { return acked() > before+1000 })
		dups += status(t, p).Kafka.DuplicateBatch
		t.Logf("round %d: %d acked", round, acked())
	}
	close(stop)
	n := <-produced
	pw.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d records failed, first: %v", len(failures), failures[0])
	}
	waitFor(t, 60*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	p.stop()
	rows := readTable(t, dir, "factory.telemetry")
	checkDense(t, rows)
	if got := checkKafkaRows(t, k, rows, false); got != n {
		t.Fatalf("%d rows, want %d (every record exactly once)", got, n)
	}
	if pipelined == 0 {
		t.Fatal("no produce request was pipelined: the kills did not land among pipelined requests")
	}
	t.Logf("%d records exactly once; %d duplicate batches were answered from rebuilt producer state; %.0f requests pipelined", n, dups, pipelined)
}

func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
