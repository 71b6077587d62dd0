package e2e

// A fetch starting inside a stored record batch. The cloud consume server
// serves whole batches, encoded once per row group and cached, from the
// one holding the fetch offset — as a Kafka broker does — so the first
// batch of the response starts before the offset asked for and each
// client must skip the records before it. kgo, kcat (librdkafka) and
// sarama consumers starting inside a batch get exactly the records from
// their offset on.

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

func TestConsumeFromInsideStoredBatch(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	produceKafka(t, p.Kafka, "mid", 3000, nil)
	waitRows(t, dir, "factory.telemetry", 3000)
	all := tableByPartition(t, dir, "factory.telemetry")
	var part int32 = -1
	for q, rows := range all {
		if part < 0 || len(rows) > len(all[part]) {
			part = q
		}
	}
	rows := all[part]
	end := int64(len(rows))

	// Find a stored batch of several records and an offset inside it.
	rc := kafkatest.Dial(t, p.CloudKafka)
	var start int64 = -1
	for probe := end / 3; probe < end && start < 0; probe++ {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(11)
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "factory.telemetry"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = part, probe, 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := rc.RoundTrip(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
		var b kmsg.RecordBatch
		if err := b.ReadFrom(resp.RecordBatches); err != nil {
			t.Fatalf("fetch %d: %v (error code %d)", probe, err, resp.ErrorCode)
		}
		if b.FirstOffset > probe || b.FirstOffset+int64(b.NumRecords) <= probe {
			t.Fatalf("fetch %d: batch %d+%d does not hold the offset", probe, b.FirstOffset, b.NumRecords)
		}
		if b.NumRecords >= 3 {
			start = b.FirstOffset + int64(b.NumRecords)/2
			t.Logf("partition %d: stored batch %d+%d, consuming from %d", part, b.FirstOffset, b.NumRecords, start)
		} else {
			probe = b.FirstOffset + int64(b.NumRecords) - 1
		}
	}
	if start < 0 {
		t.Fatal("no stored batch of 3 or more records")
	}
	check := func(who string, got []delivered) {
		t.Helper()
		if int64(len(got)) != end-start {
			t.Fatalf("%s: %d records from %d, want %d", who, len(got), start, end-start)
		}
		for i, d := range got {
			r := rows[start+int64(i)]
			if d.partition != part || d.offset != start+int64(i) || !bytes.Equal(d.value, r.Value) || !bytes.Equal(d.key, r.Key) {
				t.Fatalf("%s: record %d is %d@%d, want %d@%d with the table's key and value", who, i, d.offset, d.partition, r.Offset, part)
			}
			if !d.noHeaders && len(d.headers) != len(r.Headers) {
				t.Fatalf("%s: offset %d: %d headers, want %d", who, d.offset, len(d.headers), len(r.Headers))
			}
		}
	}

	// kgo, with small fetches so that many responses start inside a batch.
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.FetchMaxPartitionBytes(4<<10),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"factory.telemetry": {part: kgo.NewOffset().At(start)}}))
	if err != nil {
		t.Fatal(err)
	}
	check("kgo", pollKgo(t, cl, int(end-start), 20*time.Second))
	cl.Close()

	// kcat (librdkafka).
	check("kcat", kcatConsume(t, context.Background(), 20*time.Second, "-b", p.CloudKafka, "-C", "-t", "factory.telemetry",
		"-p", fmt.Sprint(part), "-o", fmt.Sprint(start), "-e", "-q"))

	// sarama partition consumer.
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_1_0_0
	sc.Consumer.Fetch.Default = 4 << 10
	c, err := sarama.NewConsumer([]string{p.CloudKafka}, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("factory.telemetry", part, start)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var sg []delivered
	timeout := time.After(20 * time.Second)
	for int64(len(sg)) < end-start {
		select {
		case m := <-pc.Messages():
			d := delivered{partition: m.Partition, offset: m.Offset, key: m.Key, keyNull: m.Key == nil, value: m.Value}
			for _, h := range m.Headers {
				d.headers = append(d.headers, tributary.Header{Key: string(h.Key), Value: h.Value})
			}
			sg = append(sg, d)
		case err := <-pc.Errors():
			t.Fatalf("sarama: %v", err)
		case <-timeout:
			t.Fatalf("sarama: %d of %d records", len(sg), end-start)
		}
	}
	check("sarama", sg)
}
