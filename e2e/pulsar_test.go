package e2e

// Pulsar consumers (github.com/apache/pulsar-client-go) reading the stream
// tables through the Pulsar server that `tributary dev` runs in-process
// (--pulsar-addr): the four subscription types, redelivery, acks, seeks,
// readers, and cursors that survive a restart.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
)

// pulsarTopic is the Pulsar topic of stream factory.telemetry.
const pulsarTopic = "persistent://tributary/factory/telemetry"

func pulsarClient(t *testing.T, addr string) pulsar.Client {
	t.Helper()
	return pulsarClientWith(t, pulsar.ClientOptions{URL: "pulsar://" + addr})
}

// pulsarClientWith is pulsarClient with opts (URL, TLS), and the tests'
// timeouts and quiet logger.
func pulsarClientWith(t *testing.T, opts pulsar.ClientOptions) pulsar.Client {
	t.Helper()
	opts.OperationTimeout, opts.ConnectionTimeout, opts.Logger = 15*time.Second, 5*time.Second, pulsarlog.DefaultNopLogger()
	cl, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// pulsarRows writes rows through the edge: n MQTT messages (no key, two
// user properties) and m Kafka records whose keys repeat over 16 values
// (two headers each), and waits until they are in the table after the
// `before` rows already there. It returns the table's rows of partition 0
// (dev writes one partition) by offset.
func pulsarRows(t *testing.T, p *proc, dir string, before, n, m int) []*tributary.Record {
	t.Helper()
	ctx := context.Background()
	mc, err := mqttClient(ctx, p.MQTT, "pulsar-mqtt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishN(ctx, mc, newLedger(), "pulsar-mqtt", before, n); err != nil {
		t.Fatal(err)
	}
	mc.Disconnect(&paho.Disconnect{ReasonCode: 0})
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic("factory.telemetry"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range m {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("key-%02d", i%16)), Value: kafkaValue("pulsar", i),
			Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}}})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dir, "factory.telemetry", before+n+m)
	rows := tableByPartition(t, dir, "factory.telemetry")
	if len(rows) != 1 {
		t.Fatalf("want one partition, table has %d", len(rows))
	}
	return rows[0]
}

// checkPulsarMessage checks a message against its row: id (ledger 1,
// entry = offset, partition 0), broker-entry index = offset, payload,
// key, properties = headers, producer name = node, publish time.
func checkPulsarMessage(t *testing.T, who string, rows []*tributary.Record, m pulsar.Message) int64 {
	t.Helper()
	id := m.ID()
	off := id.EntryID()
	if id.LedgerID() != 1 || id.PartitionIdx() != 0 || off < 0 || off >= int64(len(rows)) {
		t.Fatalf("%s: message id %v: want ledger 1, partition 0, an entry below %d", who, id, len(rows))
	}
	r := rows[off]
	if idx := m.Index(); idx == nil || *idx != uint64(off) {
		t.Fatalf("%s: offset %d: broker entry index %v", who, off, idx)
	}
	if !bytes.Equal(m.Payload(), r.Value) {
		t.Fatalf("%s: offset %d: payload %q, table has %q", who, off, m.Payload(), r.Value)
	}
	if m.Key() != string(r.Key) {
		t.Fatalf("%s: offset %d: key %q, table has %q", who, off, m.Key(), r.Key)
	}
	props := map[string]string{}
	for _, h := range r.Headers {
		props[h.Key] = string(h.Value)
	}
	if got := m.Properties(); len(got) != len(props) || !maps.Equal(got, props) {
		t.Fatalf("%s: offset %d: properties %v, table has %v", who, off, got, props)
	}
	if m.ProducerName() != r.Node || m.PublishTime().UnixMilli() != r.Timestamp/1000 {
		t.Fatalf("%s: offset %d: producer %q publish %v, table has %q %v", who, off, m.ProducerName(), m.PublishTime(), r.Node, time.UnixMicro(r.Timestamp))
	}
	return off
}

// pulsarConsumeAll receives from every consumer until want messages arrived in
// total, acking each; it returns each consumer's offsets in arrival order.
func pulsarConsumeAll(t *testing.T, who string, rows []*tributary.Record, cs []pulsar.Consumer, want int) [][]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make([][]int64, len(cs))
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return total >= want
			}
			pulsarReceive(ctx, c, done, func(m pulsar.Message) {
				off := checkPulsarMessage(t, who, rows, m)
				if err := c.Ack(m); err != nil {
					t.Errorf("%s: ack %d: %v", who, off, err)
				}
				mu.Lock()
				got[i] = append(got[i], off)
				total++
				mu.Unlock()
			})
		}()
	}
	wg.Wait()
	if total < want {
		t.Fatalf("%s: received %d of %d messages", who, total, want)
	}
	return got
}

// pulsarReceive calls fn with each message c receives until done() or
// until ctx ends.
func pulsarReceive(ctx context.Context, c pulsar.Consumer, done func() bool, fn func(pulsar.Message)) {
	for !done() {
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		m, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		fn(m)
	}
}

// pulsarCheckOnce asserts every offset below n was received exactly once.
func pulsarCheckOnce(t *testing.T, who string, got [][]int64, n int) {
	t.Helper()
	seen := make([]int, n)
	for _, offs := range got {
		for _, o := range offs {
			seen[o]++
		}
	}
	for o, k := range seen {
		if k != 1 {
			t.Fatalf("%s: offset %d received %d times", who, o, k)
		}
	}
}

// pulsarConsumers subscribes k consumers with o as it is (its initial
// position included).
func pulsarConsumers(t *testing.T, cl pulsar.Client, o pulsar.ConsumerOptions, k int) []pulsar.Consumer {
	t.Helper()
	var cs []pulsar.Consumer
	for range k {
		c := mustSubscribe(t, cl, o)
		t.Cleanup(c.Close)
		cs = append(cs, c)
	}
	return cs
}

// pulsarSubscribe subscribes from the earliest message.
func pulsarSubscribe(t *testing.T, cl pulsar.Client, o pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	o.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	return mustSubscribe(t, cl, o)
}

// mustSubscribe subscribes to pulsarTopic unless o names a topic.
func mustSubscribe(t *testing.T, cl pulsar.Client, o pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	if o.Topic == "" {
		o.Topic = pulsarTopic
	}
	c, err := cl.Subscribe(o)
	if err != nil {
		t.Fatalf("subscribe %s (%v): %v", o.SubscriptionName, o.Type, err)
	}
	return c
}

// TestPulsarConsume: rows written through MQTT and Kafka at the edge,
// consumed through the four subscription types, redelivered, acked
// cumulatively, sought back by id and by time, read by a reader, and
// compared with what Kafka consumers read at the same offsets.
func TestPulsarConsume(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const nMQTT, nKafka = 200, 400
	const total = nMQTT + nKafka
	rows := pulsarRows(t, p, dir, 0, nMQTT, nKafka)
	cl := pulsarClient(t, p.Pulsar)

	t.Run("metadata", func(t *testing.T) {
		parts, err := cl.TopicPartitions(pulsarTopic)
		if err != nil || !slices.Equal(parts, []string{pulsarTopic + "-partition-0"}) {
			t.Fatalf("partitions %v, %v", parts, err)
		}
		if _, err := cl.TopicPartitions("persistent://tributary/factory/nope"); err == nil {
			t.Fatal("an unknown stream has partitions")
		}
		if _, err := cl.TopicPartitions("persistent://public/default/telemetry"); err == nil {
			t.Fatal("a topic outside the catalog has partitions")
		}
		_, err = cl.CreateProducer(pulsar.ProducerOptions{Topic: pulsarTopic})
		if err == nil {
			t.Fatal("producer created on the read-only server")
		}
	})

	t.Run("exclusive", func(t *testing.T) {
		c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "ex", Type: pulsar.Exclusive})
		defer c.Close()
		if _, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "ex", Type: pulsar.Exclusive}); err == nil {
			t.Fatal("a second consumer joined an Exclusive subscription")
		}
		got := pulsarConsumeAll(t, "exclusive", rows, []pulsar.Consumer{c}, total)
		pulsarCheckOnce(t, "exclusive", got, total)
		if !slices.IsSorted(got[0]) {
			t.Fatal("exclusive: out of order")
		}
	})

	t.Run("shared", func(t *testing.T) {
		cs := pulsarConsumers(t, cl, pulsar.ConsumerOptions{SubscriptionName: "sh", Type: pulsar.Shared, ReceiverQueueSize: 20,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}, 3)
		got := pulsarConsumeAll(t, "shared", rows, cs, total)
		pulsarCheckOnce(t, "shared", got, total)
		for i, g := range got {
			if len(g) == 0 {
				t.Errorf("shared: consumer %d got nothing", i)
			}
		}
	})

	t.Run("failover", func(t *testing.T) {
		active := make(chan int, 8)
		var cs []pulsar.Consumer
		for i := range 2 {
			c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "fo", Type: pulsar.Failover, AckWithResponse: true,
				Name: fmt.Sprintf("fo-%d", i), EventListener: &failoverListener{i: i, ch: active}})
			defer c.Close()
			cs = append(cs, c)
		}
		// Take half from whichever consumer is active, then kill it.
		first := pulsarConsumeAll(t, "failover", rows, cs, total/2)
		var act int
		for i, g := range first {
			if len(g) > 0 {
				act = i
			}
		}
		if len(first[1-act]) != 0 {
			t.Fatalf("failover: both consumers received (%d, %d)", len(first[0]), len(first[1]))
		}
		cs[act].Close()
		rest := pulsarConsumeAll(t, "failover", rows, []pulsar.Consumer{cs[1-act]}, total-len(first[act]))
		pulsarCheckOnce(t, "failover", [][]int64{first[act], rest[0]}, total)
	})

	t.Run("nack", func(t *testing.T) {
		c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "nack", Type: pulsar.Shared, NackRedeliveryDelay: 100 * time.Millisecond})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := checkPulsarMessage(t, "nack", rows, m)
		c.Nack(m)
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("nacked offset %d never redelivered: %v", first, err)
			}
			off := checkPulsarMessage(t, "nack", rows, m)
			c.Ack(m)
			if off == first {
				if m.RedeliveryCount() < 1 {
					t.Fatalf("redelivered offset %d has redelivery count %d", off, m.RedeliveryCount())
				}
				break
			}
		}
	})

	t.Run("cumulative_and_seek", func(t *testing.T) {
		c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "cum", Type: pulsar.Exclusive, AckWithResponse: true})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var last pulsar.Message
		for range 100 {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			last = m
		}
		if err := c.AckCumulative(last); err != nil {
			t.Fatal(err)
		}
		c.Close()
		c = pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "cum", Type: pulsar.Exclusive})
		defer c.Close()
		next := func() int64 {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return checkPulsarMessage(t, "seek", rows, m)
		}
		if off := next(); off != 100 {
			t.Fatalf("after a cumulative ack of 99 the subscription resumed at %d", off)
		}
		if err := c.Seek(pulsar.NewMessageID(1, 10, -1, 0)); err != nil {
			t.Fatal(err)
		}
		if off := next(); off != 10 {
			t.Fatalf("seek to 10: next is %d", off)
		}
		at := time.UnixMilli(rows[450].Timestamp / 1000)
		want := int64(slices.IndexFunc(rows, func(r *tributary.Record) bool { return r.Timestamp >= at.UnixMicro() }))
		if err := c.SeekByTime(at); err != nil {
			t.Fatal(err)
		}
		if off := next(); off != want {
			t.Fatalf("seek to %v: next is %d, want %d", at, off, want)
		}
	})

	// A seek on one consumer of a Shared subscription rewinds the whole
	// subscription: the server closes every consumer (as Pulsar does), so
	// none keeps messages from before the seek, and every offset from the
	// seek point on is delivered again to one of them.
	t.Run("shared_seek", func(t *testing.T) {
		cs := pulsarConsumers(t, cl, pulsar.ConsumerOptions{SubscriptionName: "shared-seek", Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}, 2)
		pulsarConsumeAll(t, "shared-seek before", rows, cs, 300)
		if err := cs[0].Seek(pulsar.NewMessageID(1, 100, -1, 0)); err != nil {
			t.Fatal(err)
		}
		// Messages the client had queued before its consumer was closed may
		// still come out (duplicates are allowed); what must hold is that
		// every offset from 100 on arrives.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		seen := map[int64]bool{}
		missing := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for o := int64(100); o < total; o++ {
				if !seen[o] {
					n++
				}
			}
			return n
		}
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pulsarReceive(ctx, c, func() bool { return missing() == 0 }, func(m pulsar.Message) {
					off := checkPulsarMessage(t, "shared-seek after", rows, m)
					c.Ack(m)
					mu.Lock()
					seen[off] = true
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
		if n := missing(); n > 0 {
			t.Fatalf("%d offsets from 100 on not delivered after the seek to 100", n)
		}
	})

	t.Run("reader", func(t *testing.T) {
		r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: pulsarTopic + "-partition-0", StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var got []int64
		for r.HasNext() {
			m, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, checkPulsarMessage(t, "reader", rows, m))
		}
		pulsarCheckOnce(t, "reader", [][]int64{got}, total)
		if !slices.IsSorted(got) {
			t.Fatal("reader: out of order")
		}
	})

	t.Run("same_as_kafka", func(t *testing.T) {
		kc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"factory.telemetry": {0: kgo.NewOffset().At(0)}}))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		byKafka := map[int64][]byte{}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for len(byKafka) < total && ctx.Err() == nil {
			kc.PollFetches(ctx).EachRecord(func(r *kgo.Record) { byKafka[r.Offset] = r.Value })
		}
		c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "vs-kafka", Type: pulsar.Exclusive})
		defer c.Close()
		for range total {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			off := m.ID().EntryID()
			if v, ok := byKafka[off]; !ok || !bytes.Equal(v, m.Payload()) {
				t.Fatalf("offset %d: Pulsar payload %q, Kafka %q", off, m.Payload(), v)
			}
			c.Ack(m)
		}
	})

	// Key_Shared last: its three consumers all join before the rows they
	// read are written (initial position latest), so no consumer joins
	// while keys are in flight and each key stays on one consumer.
	t.Run("key_shared", func(t *testing.T) {
		cs := pulsarConsumers(t, cl, pulsar.ConsumerOptions{SubscriptionName: "ks", Type: pulsar.KeyShared, ReceiverQueueSize: 20,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest}, 3)
		const more = 300
		rows := pulsarRows(t, p, dir, total, 60, more-60)
		got := pulsarConsumeAll(t, "key_shared", rows, cs, more)
		seen := make([][]int64, len(got))
		owner := map[string]int{}
		for i, g := range got {
			for _, off := range g {
				if off < total {
					t.Fatalf("key_shared: offset %d from before the subscription", off)
				}
				seen[i] = append(seen[i], off-total)
				k := string(rows[off].Key)
				if o, ok := owner[k]; ok && o != i {
					t.Fatalf("key_shared: key %q on consumers %d and %d", k, o, i)
				}
				owner[k] = i
			}
		}
		pulsarCheckOnce(t, "key_shared", seen, more)
		busy := 0
		for _, g := range got {
			if len(g) > 0 {
				busy++
			}
		}
		if busy < 2 {
			t.Fatalf("key_shared: 17 keys went to %d of 3 consumers", busy)
		}
	})
}

type failoverListener struct {
	i  int
	ch chan<- int
}

func (l *failoverListener) BecameActive(pulsar.Consumer, string, int32) {
	select {
	case l.ch <- l.i:
	default:
	}
}
func (l *failoverListener) BecameInactive(pulsar.Consumer, string, int32) {}

// TestPulsarRestartResumes: a Shared subscription consumes part of the
// stream with acknowledgements confirmed by the server (some skipped),
// the dev server restarts on the same port, and the same client resumes:
// nothing acknowledged before the restart comes again, everything else
// arrives.
func TestPulsarRestartResumes(t *testing.T) {
	dir := t.TempDir()
	addr := freeLoopbackPort(t)
	p := startDev(t, dir, "--pulsar-addr", addr)
	const total = 300
	rows := pulsarRows(t, p, dir, 0, 100, 200)
	cl := pulsarClient(t, addr)
	c := pulsarSubscribe(t, cl, pulsar.ConsumerOptions{SubscriptionName: "durable", Type: pulsar.Shared, AckWithResponse: true, ReceiverQueueSize: 10})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked := map[int64]bool{}
	seen := map[int64]bool{}
	for len(seen) < 120 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		off := checkPulsarMessage(t, "before restart", rows, m)
		seen[off] = true
		if off%5 != 3 { // leave every fifth unacknowledged
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
			acked[off] = true
		}
	}
	p.stop()
	startDev(t, dir, "--pulsar-addr", addr)
	for !allAcked(acked, total) {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("after restart: %d of %d offsets, %d acked: %v", len(seen), total, len(acked), err)
		}
		off := checkPulsarMessage(t, "after restart", rows, m)
		if acked[off] {
			t.Fatalf("offset %d acknowledged before the restart was delivered again", off)
		}
		seen[off] = true
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
		acked[off] = true
	}
}

// allAcked: every offset below n has been acknowledged.
func allAcked(acked map[int64]bool, n int) bool {
	for o := range int64(n) {
		if !acked[o] {
			return false
		}
	}
	return true
}

// TestPulsarCloudServer: `tributary cloud` on the data directory of a dev
// node serves the node's committed rows to Pulsar consumers.
func TestPulsarCloudServer(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir, "--pulsar-addr", "")
	if p.Pulsar != "" {
		t.Fatalf("--pulsar-addr \"\" still listens on %s", p.Pulsar)
	}
	rows := pulsarRows(t, p, dir, 0, 50, 50)
	cloud := startProc(t, dir, "cloud", "--data", dir, "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0",
		"--pulsar-addr", "127.0.0.1:0", "--maintenance=false")
	cl := pulsarClient(t, cloud.Pulsar)
	cs := pulsarConsumers(t, cl, pulsar.ConsumerOptions{SubscriptionName: "cloud", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}, 2)
	pulsarCheckOnce(t, "cloud", pulsarConsumeAll(t, "cloud", rows, cs, len(rows)), len(rows))
}
