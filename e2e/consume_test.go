package e2e

// Kafka consumers reading the stream tables through the cloud consume
// server that `tributary dev` runs in-process (--cloud-kafka-addr).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// delivered is one record as a consumer got it.
type delivered struct {
	partition int32
	offset    int64
	key       []byte
	keyNull   bool
	value     []byte
	headers   []tributary.Header
	noHeaders bool // the client does not report headers (kcat format)
}

func fromKgo(r *kgo.Record) delivered {
	d := delivered{partition: r.Partition, offset: r.Offset, key: r.Key, keyNull: r.Key == nil, value: r.Value}
	for _, h := range r.Headers {
		d.headers = append(d.headers, tributary.Header{Key: h.Key, Value: h.Value})
	}
	return d
}

// pollKgo polls cl until it has n records or d has passed; fetch errors
// fail the test.
func pollKgo(t *testing.T, cl *kgo.Client, n int, d time.Duration) []delivered {
	t.Helper()
	var got []delivered
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for len(got) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(s string, p int32, err error) {
			if ctx.Err() == nil {
				t.Errorf("kgo fetch %s/%d: %v", s, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, fromKgo(r)) })
	}
	return got
}

// tableByPartition reads the stream through iceberg-go and indexes it.
func tableByPartition(t *testing.T, dir, stream string) map[int32][]*tributary.Record {
	t.Helper()
	rows := readTable(t, dir, stream)
	checkDense(t, rows)
	out := map[int32][]*tributary.Record{}
	for _, r := range rows {
		out[r.Partition] = append(out[r.Partition], r)
	}
	for _, rs := range out {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}
	return out
}

// checkExactlyOnce asserts got holds every row of want exactly once, in
// offset order per partition, byte-exact, at the row's offset.
func checkExactlyOnce(t *testing.T, who string, want map[int32][]*tributary.Record, got []delivered) {
	t.Helper()
	next := map[int32]int64{}
	for _, d := range got {
		rows := want[d.partition]
		if d.offset != next[d.partition] {
			t.Fatalf("%s: partition %d: offset %d, want %d (out of order, lost or duplicated)", who, d.partition, d.offset, next[d.partition])
		}
		next[d.partition]++
		if d.offset >= int64(len(rows)) {
			t.Fatalf("%s: partition %d offset %d beyond the table's %d rows", who, d.partition, d.offset, len(rows))
		}
		r := rows[d.offset]
		if !bytes.Equal(d.value, r.Value) || !bytes.Equal(d.key, r.Key) || d.keyNull != (r.Key == nil) {
			t.Fatalf("%s: %d@%d: key %q value %q, table has key %q value %q", who, d.offset, d.partition, d.key, d.value, r.Key, r.Value)
		}
		if d.noHeaders {
			continue
		}
		if len(d.headers) != len(r.Headers) {
			t.Fatalf("%s: %d@%d: %d headers, table has %d", who, d.offset, d.partition, len(d.headers), len(r.Headers))
		}
		for i, h := range r.Headers {
			if d.headers[i].Key != h.Key || !bytes.Equal(d.headers[i].Value, h.Value) {
				t.Fatalf("%s: %d@%d: header %d differs", who, d.offset, d.partition, i)
			}
		}
	}
	for p, rows := range want {
		if next[p] != int64(len(rows)) {
			t.Fatalf("%s: partition %d: got %d records, table has %d", who, p, next[p], len(rows))
		}
	}
}

// produceKafka produces n records with unique keys and two headers to
// the edge node and waits for every ack.
func produceKafka(t *testing.T, addr, prefix string, n int, onAck func(i int)) {
	t.Helper()
	if err := produceKafkaErr(addr, prefix, n, onAck); err != nil {
		t.Fatal(err)
	}
}

func produceKafkaErr(addr, prefix string, n int, onAck func(i int)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("factory.telemetry"), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		wg.Add(1)
		v := kafkaValue(prefix, i)
		cl.Produce(context.Background(), &kgo.Record{Key: []byte(fmt.Sprintf("%s-%06d", prefix, i)), Value: v,
			Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}}},
			func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				if onAck != nil {
					onAck(i)
				}
			})
	}
	wg.Wait()
	return firstErr
}

// waitRows waits until the stream's table holds n rows.
func waitRows(t *testing.T, dir, stream string, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d rows in %s", n, stream), func() bool {
		return len(readTable(t, dir, stream)) >= n
	})
}

// TestConsumeGroupsReadTables: MQTT and Kafka traffic into the edge node,
// then a kgo group consumer, kcat's balanced consumer (-G) and a sarama
// consumer group each read every row exactly once, in offset order,
// byte-exact, at the offsets iceberg-go reads in the offset column.
func TestConsumeGroupsReadTables(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	mc, err := mqttClient(ctx, p.MQTT, "consume-mqtt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishN(ctx, mc, newLedger(), "consume-mqtt", 0, 300); err != nil {
		t.Fatal(err)
	}
	produceKafka(t, p.Kafka, "kgo", 700, nil)
	waitRows(t, dir, "factory.telemetry", 1000)
	want := tableByPartition(t, dir, "factory.telemetry")

	// kgo group consumer.
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumerGroup("g-kgo"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.FetchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	got := pollKgo(t, cl, 1000, 30*time.Second)
	cl.Close()
	checkExactlyOnce(t, "kgo", want, got)

	// kcat balanced consumer.
	kc := kcatConsume(t, ctx, 45*time.Second, "-b", p.CloudKafka, "-G", "g-kcat", "-o", "beginning", "-e", "-q",
		"-X", "auto.offset.reset=earliest", "factory.telemetry")
	checkExactlyOnce(t, "kcat", want, kc)

	// sarama consumer group.
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_1_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	cg, err := sarama.NewConsumerGroup([]string{p.CloudKafka}, "g-sarama", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	h := &saramaHandler{want: 1000, done: make(chan struct{})}
	sctx, scancel := context.WithTimeout(ctx, 45*time.Second)
	defer scancel()
	go func() {
		for sctx.Err() == nil {
			if err := cg.Consume(sctx, []string{"factory.telemetry"}, h); err != nil && sctx.Err() == nil {
				t.Logf("sarama consume: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	select {
	case <-h.done:
	case <-sctx.Done():
		t.Fatalf("sarama got %d of 1000 records", h.count())
	}
	scancel()
	checkExactlyOnce(t, "sarama", want, h.sorted())
}

// parseKcat parses "%p %o %K:%k %S:%s\n" records.
// kcatConsume runs kcat with args (a consumer that ends at the end of
// the data, -e) within timeout, printing partition, offset, key and value
// with their sizes so that binary payloads parse exactly, and returns what
// it delivered.
func kcatConsume(t *testing.T, ctx context.Context, timeout time.Duration, args ...string) []delivered {
	t.Helper()
	kctx, kcancel := context.WithTimeout(ctx, timeout)
	defer kcancel()
	cmd := exec.CommandContext(kctx, kcatPath(t), append([]string{"-f", "%p %o %K:%k %S:%s\n"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v: %s", err, stderr.String())
	}
	kc, err := parseKcat(out)
	if err != nil {
		t.Fatalf("kcat output: %v", err)
	}
	return kc
}

func parseKcat(b []byte) ([]delivered, error) {
	var out []delivered
	r := bufio.NewReader(bytes.NewReader(b))
	readUntil := func(delim byte) (int64, error) {
		s, err := r.ReadString(delim)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(s[:len(s)-1], 10, 64)
	}
	readN := func(n int64) ([]byte, error) {
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	for {
		if _, err := r.Peek(1); err != nil {
			return out, nil
		}
		var d delivered
		p, err := readUntil(' ')
		if err != nil {
			return nil, err
		}
		o, err := readUntil(' ')
		if err != nil {
			return nil, err
		}
		kl, err := readUntil(':')
		if err != nil {
			return nil, err
		}
		if d.key, err = readN(kl); err != nil {
			return nil, err
		}
		if c, _ := r.ReadByte(); c != ' ' {
			return nil, fmt.Errorf("offset %d: want ' ' after key", o)
		}
		vl, err := readUntil(':')
		if err != nil {
			return nil, err
		}
		if d.value, err = readN(vl); err != nil {
			return nil, err
		}
		if c, _ := r.ReadByte(); c != '\n' {
			return nil, fmt.Errorf("offset %d: want newline after value", o)
		}
		d.partition, d.offset, d.keyNull, d.noHeaders = int32(p), o, kl < 0, true
		if d.value == nil {
			d.value = []byte{}
		}
		out = append(out, d)
	}
}

type saramaHandler struct {
	mu   sync.Mutex
	got  []delivered
	want int
	done chan struct{}
	once sync.Once
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		d := delivered{partition: m.Partition, offset: m.Offset, key: m.Key, keyNull: m.Key == nil, value: m.Value}
		if d.value == nil {
			d.value = []byte{}
		}
		for _, hd := range m.Headers {
			d.headers = append(d.headers, tributary.Header{Key: string(hd.Key), Value: hd.Value})
		}
		s.MarkMessage(m, "")
		h.mu.Lock()
		h.got = append(h.got, d)
		if len(h.got) >= h.want {
			h.once.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

func (h *saramaHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// sorted returns the records in delivery order per partition (partitions
// are claimed concurrently).
func (h *saramaHandler) sorted() []delivered {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]delivered(nil), h.got...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].partition < out[j].partition })
	return out
}

// TestConsumeTailLatency: a group consumer started before the measured
// producer sees each record within 2 s of its PUBACK-equivalent (the
// Kafka produce ack), with the harness's 200 ms commit interval.
func TestConsumeTailLatency(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	produceKafka(t, p.Kafka, "warm", 1, nil) // creates the stream
	waitRows(t, dir, "factory.telemetry", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumerGroup("g-tail"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for n := 0; n < 1; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("warm-up record not consumed")
		}
		n += fs.NumRecords()
	}
	const n = 200
	var mu sync.Mutex
	acked := make([]time.Time, n)
	// The producer sends one record every 10 ms (100/s), so records land
	// in different commits and the latencies spread over the interval.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic("factory.telemetry"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	perr := make(chan error, n)
	go func() {
		for i := range n {
			pcl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("tail-%06d", i)), Value: kafkaValue("tail", i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr <- err
					return
				}
				mu.Lock()
				acked[i] = time.Now()
				mu.Unlock()
			})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var lat []time.Duration
	for len(lat) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d tail records", len(lat), n)
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			i, _ := strconv.Atoi(string(r.Key[len("tail-"):]))
			mu.Lock()
			a := acked[i]
			mu.Unlock()
			if a.IsZero() {
				a = now // delivered before the ack callback ran
			}
			lat = append(lat, now.Sub(a))
		})
	}
	select {
	case err := <-perr:
		t.Fatal(err)
	default:
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("ack -> delivery: p50 %v, p99 %v, max %v", lat[n/2], lat[n*99/100], lat[n-1])
	if lat[n-1] > 2*time.Second {
		t.Fatalf("slowest delivery %v > 2s after the ack", lat[n-1])
	}
}

// TestConsumeResumesAfterRestart: the whole dev process (edge + in-process
// cloud server) is restarted on the same data directory and cloud port
// while a kgo group consumer (committing after each poll) is running; it
// resumes from its committed offsets with no loss and no redelivery.
func TestConsumeResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	cloud := freeLoopbackPort(t)
	p := startDev(t, dir, "--cloud-kafka-addr", cloud)
	produceKafka(t, p.Kafka, "a", 400, nil)
	waitRows(t, dir, "factory.telemetry", 400)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cloud), kgo.ConsumerGroup("g-restart"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.DisableAutoCommit(), kgo.FetchMaxBytes(8<<10), kgo.HeartbeatInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	// got is the delivery sequence with redeliveries removed; a record may
	// be delivered again only if the commit of the poll that first
	// delivered it failed (the last uncommitted poll).
	var got []delivered
	type tp struct {
		p int32
		o int64
	}
	seen, uncommitted := map[tp]bool{}, map[tp]bool{}
	redelivered := 0
	poll := func(until int) {
		for len(got) < until {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("got %d of %d records", len(got), until)
			}
			recs := fs.Records()
			for _, r := range recs {
				k := tp{r.Partition, r.Offset}
				if seen[k] {
					if !uncommitted[k] {
						t.Fatalf("%d@%d redelivered although its commit succeeded", r.Offset, r.Partition)
					}
					redelivered++
					continue
				}
				seen[k] = true
				got = append(got, fromKgo(r))
			}
			if len(recs) > 0 {
				if err := cl.CommitRecords(ctx, recs...); err != nil {
					t.Logf("commit failed (the poll may be redelivered): %v", err)
					for _, r := range recs {
						uncommitted[tp{r.Partition, r.Offset}] = true
					}
				}
			}
		}
	}
	poll(150)
	p.stop()
	p = startDev(t, dir, "--cloud-kafka-addr", cloud)
	produceKafka(t, p.Kafka, "b", 200, nil)
	waitRows(t, dir, "factory.telemetry", 600)
	poll(600)
	t.Logf("%d records redelivered from uncommitted polls", redelivered)
	checkExactlyOnce(t, "kgo across restart", tableByPartition(t, dir, "factory.telemetry"), got)
}

// commitRows writes n rows of partition p of stream, from offset from, as
// one data file committed with its mark — as an edge node's uplink does.
func commitRows(t *testing.T, cat *tables.Catalog, dir, stream string, p int32, from int64, n int) {
	t.Helper()
	recs := make([]*tributary.Record, n)
	for i := range recs {
		off := from + int64(i)
		recs[i] = &tributary.Record{Stream: stream, Partition: p, Offset: off, Timestamp: time.Now().UnixMicro(),
			Topic: stream, Key: []byte(fmt.Sprintf("p%d-%d", p, off)), Value: []byte(fmt.Sprintf("value %d of %d", off, p)),
			Source: "kafka", ClientID: "e2e", Node: fmt.Sprintf("node-%d", p)}
	}
	tabletest.Commit(t, cat, stream, recs)
}

// killableDialer lets a test cut a kgo client off the network as a kill
// would: open connections are closed and new dials fail.
type killableDialer struct {
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func (k *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.killed {
		return nil, errors.New("killed")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err == nil {
		k.conns = append(k.conns, c)
	}
	return c, err
}

func (k *killableDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for _, c := range k.conns {
		c.Close()
	}
}

type splitConsumer struct {
	name   string
	cl     *kgo.Client
	dialer *killableDialer
	mu     sync.Mutex
	owned  map[int32]bool
	got    map[int32][]int64
}

func (c *splitConsumer) assigned() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int32
	for p, ok := range c.owned {
		if ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (c *splitConsumer) count(p int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got[p])
}

// TestConsumeGroupSplitsPartitions: a stream with two partitions (two
// node allocations), two consumers of one group get one partition each;
// killing one moves its partition to the other, which continues from the
// committed offset.
func TestConsumeGroupSplitsPartitions(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream = "factory.split"
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for _, n := range []string{"site-a", "site-b"} {
		if _, err := cat.AllocatePartition(context.Background(), stream, n); err != nil {
			t.Fatal(err)
		}
	}
	commitRows(t, cat, dir, stream, 0, 0, 100)
	commitRows(t, cat, dir, stream, 1, 0, 100)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	newConsumer := func(name string) *splitConsumer {
		c := &splitConsumer{name: name, dialer: &killableDialer{}, owned: map[int32]bool{}, got: map[int32][]int64{}}
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumerGroup("g-split"), kgo.ConsumeTopics(stream),
			kgo.DisableAutoCommit(), kgo.SessionTimeout(4*time.Second), kgo.HeartbeatInterval(300*time.Millisecond),
			kgo.RebalanceTimeout(8*time.Second), kgo.Dialer(c.dialer.dial), kgo.RetryTimeout(2*time.Second),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				c.mu.Lock()
				for _, p := range m[stream] {
					c.owned[p] = true
				}
				c.mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				c.mu.Lock()
				for _, p := range m[stream] {
					c.owned[p] = false
				}
				c.mu.Unlock()
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				c.mu.Lock()
				for _, p := range m[stream] {
					c.owned[p] = false
				}
				c.mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		c.cl = cl
		go func() {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() {
					return
				}
				recs := fs.Records()
				c.mu.Lock()
				for _, r := range recs {
					c.got[r.Partition] = append(c.got[r.Partition], r.Offset)
				}
				c.mu.Unlock()
				if len(recs) > 0 {
					cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
					cl.CommitRecords(cctx, recs...)
					ccancel()
				}
			}
		}()
		return c
	}
	c1 := newConsumer("c1")
	defer c1.cl.Close()
	c2 := newConsumer("c2")
	defer c2.cl.Close()
	waitFor(t, 30*time.Second, "one partition each", func() bool {
		a, b := c1.assigned(), c2.assigned()
		return len(a) == 1 && len(b) == 1 && a[0] != b[0]
	})
	p2 := c2.assigned()[0]
	t.Logf("c1 owns %v, c2 owns %v", c1.assigned(), c2.assigned())
	// New rows of each partition go to its owner.
	commitRows(t, cat, dir, stream, 0, 100, 50)
	commitRows(t, cat, dir, stream, 1, 100, 50)
	waitFor(t, 15*time.Second, "c2 consumes its partition up to 150", func() bool {
		c2.mu.Lock()
		defer c2.mu.Unlock()
		o := c2.got[p2]
		return len(o) > 0 && o[len(o)-1] == 149
	})

	waitFor(t, 10*time.Second, "c2 committed 150", func() bool {
		return c2.cl.CommittedOffsets()[stream][p2].Offset == 150
	})
	c1.mu.Lock()
	k := len(c1.got[p2])
	c1.mu.Unlock()

	c2.dialer.kill()
	waitFor(t, 30*time.Second, "c1 owns both partitions", func() bool { return len(c1.assigned()) == 2 })
	commitRows(t, cat, dir, stream, p2, 150, 50)
	waitFor(t, 15*time.Second, "c1 consumes the moved partition", func() bool {
		c1.mu.Lock()
		defer c1.mu.Unlock()
		o := c1.got[p2]
		return len(o) > 0 && o[len(o)-1] == 199
	})
	// c1 continued c2's partition from c2's committed offset: nothing
	// lost, nothing c2 committed read again.
	c1.mu.Lock()
	moved := append([]int64(nil), c1.got[p2][k:]...)
	c1.mu.Unlock()
	for i, o := range moved {
		if o != 150+int64(i) {
			t.Fatalf("partition %d after the kill: c1 read %v, want 150..199", p2, moved)
		}
	}
	if len(moved) != 50 {
		t.Fatalf("partition %d after the kill: c1 read %d records, want 50", p2, len(moved))
	}
}
