package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// TestCloudProduceBadInput: bad input to the cloud write path over
// Kafka, HTTP and gRPC, as on the edge — a batch over the cap, a record
// batch with a corrupt CRC, a stream that does not exist (auto_create
// off) — each gets its protocol's clear error, and what was accepted
// before and after is in the table once, offsets dense.
func TestCloudProduceBadInput(t *testing.T) {
	dir := t.TempDir()
	const stream = "factory.cloudbad"
	httpOn := "http:\n  addr: 127.0.0.1:0\n"
	// a creates the stream (auto_create); b, with auto_create off, takes
	// the bad input.
	a := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "a", "", httpOn))
	cfgB := cloudProduceConfig(t, dir, "", "b", "", httpOn)
	acks := &cpAcks{m: map[string]int64{}}
	good := func(who string, p *proc, k int) {
		t.Helper()
		vs := make([]string, k)
		for i := range vs {
			vs[i] = fmt.Sprintf("%s-%03d", who, i)
		}
		got, err := cpHTTPProduce(p.CloudHTTP, stream, vs)
		if rest := acks.keep(t, vs, got); err != nil || len(rest) > 0 {
			t.Fatalf("%s: %d not acknowledged: %v", who, len(rest), err)
		}
	}
	good("before", a, 20)
	a.stop()
	raw, err := os.ReadFile(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgB, []byte(strings.Replace(string(raw), "auto_create: true", "auto_create: false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startProc(t, dir, "cloud", "-config", cfgB)
	grpcC := pbconnect.NewProduceServiceClient(h2c(), "http://"+b.CloudHTTP, connect.WithGRPC())
	part := cloudPartition(t, b.CloudKafka, stream)

	t.Run("kafka", func(t *testing.T) {
		batch := rawBatch(-1, -1, -1, "k1", "k2")
		bad := append([]byte(nil), batch...)
		bad[len(bad)-1] ^= 0xff
		if _, code := produceRawTo(t, b.CloudKafka, stream, part, bad); code != 2 {
			t.Errorf("corrupt CRC: error code %d, want CORRUPT_MESSAGE (2)", code)
		}
		big := rawBatch(-1, -1, -1, strings.Repeat("k", 1100<<10))
		if _, code := produceRawTo(t, b.CloudKafka, stream, part, big); code != 10 {
			t.Errorf("batch over max_batch_bytes: error code %d, want MESSAGE_TOO_LARGE (10)", code)
		}
		if _, code := produceRawTo(t, b.CloudKafka, "factory.nosuch", 0, batch); code != 3 {
			t.Errorf("unknown stream: error code %d, want UNKNOWN_TOPIC_OR_PARTITION (3)", code)
		}
		off, code := produceRawTo(t, b.CloudKafka, stream, part, batch)
		if code != 0 {
			t.Fatalf("good batch after the bad ones: error code %d", code)
		}
		acks.add(t, "value of k1", off)
		acks.add(t, "value of k2", off+1)
	})

	t.Run("http", func(t *testing.T) {
		post := func(topic, body string) int {
			resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", b.CloudHTTP, topic), "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := post("factory.nosuch", `{"value":{"type":"STRING","data":"x"}}`); code != http.StatusNotFound {
			t.Errorf("unknown stream: %d, want 404", code)
		}
		if code := post(stream, fmt.Sprintf(`{"value":{"type":"STRING","data":%q}}`, strings.Repeat("x", 5<<20))); code != http.StatusRequestEntityTooLarge {
			t.Errorf("record over max_record_bytes: %d, want 413", code)
		}
		if code := post(stream, `{"value":`); code != http.StatusBadRequest {
			t.Errorf("malformed record: %d, want 400", code)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		if _, err := cpGRPCProduce(grpcC, "factory.nosuch", []string{"x"}); err == nil || !strings.Contains(err.Error(), "not_found") {
			t.Errorf("unknown stream: %v, want NOT_FOUND", err)
		}
		if _, err := cpGRPCProduce(grpcC, stream, []string{strings.Repeat("x", 5<<20)}); err == nil || !strings.Contains(err.Error(), "invalid_argument") {
			t.Errorf("record over max_record_bytes: %v, want INVALID_ARGUMENT", err)
		}
	})
	good("after", b, 20)
	n := len(acks.m)
	checkCloudTable(t, b.CloudKafka, stream, n, acks.byOffset(t), func() []*tributary.Record { return readTable(t, dir, stream) })
	b.stop()
}

// cloudPartition is stream's partition in a cloud server's Metadata.
func cloudPartition(t *testing.T, addr, stream string) int32 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(stream)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata of %s: %v %+v", stream, err, resp)
	}
	return resp.Topics[0].Partitions[0].Partition
}
