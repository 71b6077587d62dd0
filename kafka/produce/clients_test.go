package produce

// Integration tests against real Kafka clients: franz-go kgo (idempotent
// producer), librdkafka through the kcat binary, and sarama.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// genRecord returns the i-th test record: every 10th has a null key, every
// 7th an empty value, every 5th no headers, some headers have empty or nil
// values and repeated keys.
func genRecord(i int) kafkatest.Rec {
	r := kafkatest.Rec{Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte(fmt.Sprintf("value-%d-\x00\xff-%s", i, strings.Repeat("x", i%50)))}
	if i%10 == 0 {
		r.Key = nil
	}
	if i%7 == 0 {
		r.Value = []byte{}
	}
	if i%5 != 0 {
		r.Headers = []tributary.Header{{Key: "h1", Value: []byte(fmt.Sprint(i))}, {Key: "empty", Value: []byte{}}, {Key: "h1", Value: []byte{0, 1, 2}}}
	}
	return r
}

// checkRecords asserts the partition holds exactly want, in order, at
// offsets 0..len-1, byte-exact.
func checkRecords(t *testing.T, got []*tributary.Record, want []kafkatest.Rec, clientID string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("backend has %d records, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, g.Offset)
		}
		if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) {
			t.Fatalf("record %d key %q (nil %v), want %q (nil %v)", i, g.Key, g.Key == nil, w.Key, w.Key == nil)
		}
		if g.Value == nil || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("record %d value %q (nil %v), want %q", i, g.Value, g.Value == nil, w.Value)
		}
		if len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d headers %v, want %v", i, g.Headers, w.Headers)
		}
		for j := range g.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d %v, want %v", i, j, g.Headers[j], w.Headers[j])
			}
		}
		if g.Source != "kafka" || g.Topic != g.Stream || (clientID != "" && g.ClientID != clientID) {
			t.Fatalf("record %d envelope source=%q topic=%q stream=%q client=%q", i, g.Source, g.Topic, g.Stream, g.ClientID)
		}
	}
}

func TestKgoIdempotentProducer(t *testing.T) {
	const n = 10000
	codecs := []struct {
		name  string
		codec *kgo.CompressionCodec // nil: kgo's default
	}{
		{"defaults", nil},
		{"none", ptr(kgo.NoCompression())},
		{"zstd", ptr(kgo.ZstdCompression())},
		{"lz4", ptr(kgo.Lz4Compression())},
		{"gzip", ptr(kgo.GzipCompression())},
		{"snappy", ptr(kgo.SnappyCompression())},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			be := newFakeBackend("edge-1")
			topic := "factory.kgo_" + c.name
			be.addStream(topic, "edge-1")
			s := startServer(t, Config{}, be)
			opts := []kgo.Opt{
				kgo.SeedBrokers(s.Addr()),
				kgo.ClientID("kgo-test"),
				kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()),
			}
			if c.codec != nil {
				opts = append(opts, kgo.ProducerBatchCompression(*c.codec))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			want := make([]kafkatest.Rec, n)
			errs := make(chan error, 1)
			for i := range n {
				want[i] = genRecord(i)
				r := &kgo.Record{Key: want[i].Key, Value: want[i].Value, Partition: 0}
				for _, h := range want[i].Headers {
					r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
				}
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			got := be.records(topic, 0)
			checkRecords(t, got, want, "kgo-test")
			for i, g := range got {
				if g.ProducerID <= 1000 || g.Sequence != int32(i) || g.ProducerEpoch != 0 {
					t.Fatalf("record %d producer %d/%d/%d", i, g.ProducerID, g.ProducerEpoch, g.Sequence)
				}
				if g.ProducerTimestamp == 0 || g.ProducerTimestamp > time.Now().UnixMilli() {
					t.Fatalf("record %d producer timestamp %d", i, g.ProducerTimestamp)
				}
			}
			if st := s.Stats(); st.ProducedRecords != n || st.PartitionErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestKcatProducer(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat (librdkafka) is required for this test: install the Debian package kcat (/usr/bin/kcat): %v", err)
	}
	for _, codec := range []string{"zstd", "lz4", "gzip", "snappy"} {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			be := newFakeBackend("edge-1")
			topic := "factory.kcat_" + codec
			be.addStream(topic, "edge-1")
			s := startServer(t, Config{}, be)
			var in bytes.Buffer
			var want []kafkatest.Rec
			hdrs := []tributary.Header{{Key: "site", Value: []byte("plant-7")}, {Key: "line", Value: []byte("a=b")}}
			for i := range 200 {
				k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d \t %s", i, strings.Repeat("é", i%9))
				fmt.Fprintf(&in, "%s|%s\n", k, v)
				want = append(want, kafkatest.Rec{Key: []byte(k), Value: []byte(v), Headers: hdrs})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, kcat, "-b", s.Addr(), "-P", "-t", topic, "-p", "0", "-z", codec,
				"-K", "|", "-H", "site=plant-7", "-H", "line=a=b", "-X", "enable.idempotence=true", "-c", "200")
			cmd.Stdin = &in
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("kcat: %v\n%s", err, out.String())
			}
			checkRecords(t, be.records(topic, 0), want, "")
		})
	}
}

func TestSaramaSyncProducer(t *testing.T) {
	be := newFakeBackend("edge-1")
	topic := "factory.sarama"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{}, be)
	cfg := sarama.NewConfig()
	cfg.ClientID = "sarama-test"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Compression = sarama.CompressionSnappy
	cfg.Metadata.Retry.Max = 2
	p, err := sarama.NewSyncProducer([]string{s.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var want []kafkatest.Rec
	for i := range 100 {
		r := genRecord(i + 1)
		want = append(want, r)
		m := &sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.ByteEncoder(r.Value)}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		part, off, err := p.SendMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		if part != 0 || off != int64(i) {
			t.Fatalf("message %d: partition %d offset %d", i, part, off)
		}
	}
	checkRecords(t, be.records(topic, 0), want, "sarama-test")
}

func TestMain(m *testing.M) {
	sarama.Logger = nopLogger{}
	os.Exit(m.Run())
}

type nopLogger struct{}

func (nopLogger) Print(...any)          {}
func (nopLogger) Printf(string, ...any) {}
func (nopLogger) Println(...any)        {}

func ptr[T any](v T) *T { return &v }
