package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
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

// TestCloudProduceACL: on a cloud server with authentication and ACLs, a
// principal with only the consume right on a stream is refused produce
// over Kafka (TOPIC_AUTHORIZATION_FAILED), HTTP (403) and gRPC
// (PERMISSION_DENIED), and nothing of its lands; a principal with the
// produce right writes.
func TestCloudProduceACL(t *testing.T) {
	dir, secDir := t.TempDir(), t.TempDir()
	const stream = "factory.cloudacl"
	users := filepath.Join(secDir, "passwd")
	for _, u := range []string{"writer", "reader"} {
		if err := auth.SetPassword(users, u, []byte(pw(u))); err != nil {
			t.Fatal(err)
		}
	}
	sec := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
security:
  allow_anonymous: false
  users_file: %s
  acl:
    - {principal: writer, allow: [produce, consume], streams: ["factory.*"]}
    - {principal: reader, allow: [consume], streams: ["factory.*"]}
`, users)
	c := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "c", "", sec))
	kafkaAs := func(u string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.CloudKafka), kgo.AllowAutoTopicCreation(), kgo.RecordRetries(2),
			kgo.SASL(plain.Auth{User: u, Pass: pw(u)}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	acks := &cpAcks{m: map[string]int64{}}
	httpAs := func(u, v string) int {
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", c.CloudHTTP, stream),
			strings.NewReader(fmt.Sprintf(`{"value":{"type":"STRING","data":%q}}`, v)))
		req.SetBasicAuth(u, pw(u))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r httpReport
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Offset == nil {
				t.Fatalf("report: %v", err)
			}
			acks.add(t, v, *r.Offset)
		}
		return resp.StatusCode
	}
	grpcAs := func(u string) pbconnect.ProduceServiceClient {
		hc := h2c()
		tr := hc.Transport
		hc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.SetBasicAuth(u, pw(u))
			return tr.RoundTrip(r)
		})
		return pbconnect.NewProduceServiceClient(hc, "http://"+c.CloudHTTP, connect.WithGRPC())
	}
	if r := kafkaAs("writer").ProduceSync(context.Background(), &kgo.Record{Topic: stream, Value: []byte("w-kafka")})[0]; r.Err != nil {
		t.Fatalf("writer over Kafka: %v", r.Err)
	} else {
		acks.add(t, "w-kafka", r.Record.Offset)
	}
	if r := kafkaAs("reader").ProduceSync(context.Background(), &kgo.Record{Topic: stream, Value: []byte("r-kafka")})[0]; !errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
		t.Errorf("reader over Kafka: %v, want TOPIC_AUTHORIZATION_FAILED", r.Err)
	}
	if code := httpAs("reader", "r-http"); code != http.StatusForbidden {
		t.Errorf("reader over HTTP: %d, want 403", code)
	}
	if code := httpAs("writer", "w-http"); code != http.StatusOK {
		t.Errorf("writer over HTTP: %d, want 200", code)
	}
	if _, err := cpGRPCProduce(grpcAs("reader"), stream, []string{"r-grpc"}); err == nil || !strings.Contains(err.Error(), "permission_denied") {
		t.Errorf("reader over gRPC: %v, want PERMISSION_DENIED", err)
	}
	got, err := cpGRPCProduce(grpcAs("writer"), stream, []string{"w-grpc"})
	if rest := acks.keep(t, []string{"w-grpc"}, got); err != nil || len(rest) > 0 {
		t.Fatalf("writer over gRPC: %v", err)
	}
	waitFor(t, 60*time.Second, "the table commits the writer's records", func() bool { return len(readTable(t, dir, stream)) >= len(acks.m) })
	rows := readTable(t, dir, stream)
	if len(rows) != len(acks.m) {
		t.Fatalf("%d rows, want the %d the writer produced", len(rows), len(acks.m))
	}
	for _, r := range rows {
		if off, ok := acks.m[string(r.Value)]; !ok || off != r.Offset {
			t.Fatalf("row %q at %d: not the writer's acknowledged record", r.Value, r.Offset)
		}
	}
	c.stop()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
