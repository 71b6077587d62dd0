package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// cpAcks are the acknowledged records of a cloud-produce test: value →
// offset, each value acknowledged once.
type cpAcks struct {
	mu sync.Mutex
	m  map[string]int64
}

func (a *cpAcks) add(t *testing.T, v string, off int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, dup := a.m[v]; dup {
		t.Errorf("%s acknowledged twice, at %d and %d", v, o, off)
	}
	a.m[v] = off
}

// keep adds the values of vs acknowledged in got (value → offset) and
// returns the others.
func (a *cpAcks) keep(t *testing.T, vs []string, got map[string]int64) (rest []string) {
	for _, v := range vs {
		if off, ok := got[v]; ok {
			a.add(t, v, off)
		} else {
			rest = append(rest, v)
		}
	}
	return rest
}

// byOffset is offset → value, failing on an offset acknowledged twice.
func (a *cpAcks) byOffset(t *testing.T) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for v, o := range a.m {
		if w, dup := out[o]; dup {
			t.Fatalf("offset %d acknowledged for %s and %s", o, w, v)
		}
		out[o] = v
	}
	return out
}

// cpHTTPProduce posts values as one streamed Confluent REST v3 request
// (concatenated records) to a cloud server's HTTP port and returns the
// values whose report says 200, with their offsets, and an error for the
// request or the first refused record.
func cpHTTPProduce(addr, stream string, values []string) (map[string]int64, error) {
	var body strings.Builder
	for _, v := range values {
		fmt.Fprintf(&body, "{\"value\":{\"type\":\"STRING\",\"data\":%q}}\n", v)
	}
	resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", addr, stream), "application/json",
		strings.NewReader(body.String()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	out := map[string]int64{}
	var first error
	for i := 0; ; i++ {
		var r httpReport
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return out, fmt.Errorf("reports: %v in %q", err, b)
		}
		switch {
		case i >= len(values):
			return out, fmt.Errorf("%d reports for %d records", i+1, len(values))
		case r.ErrorCode == http.StatusOK && r.Offset != nil && r.TopicName == stream:
			out[values[i]] = *r.Offset
		case first == nil:
			first = fmt.Errorf("record %d: %d %s", i, r.ErrorCode, r.Message)
		}
	}
	return out, first
}

// cpGRPCProduce sends values on one ProduceService stream, per requests
// of 25, with the generated client; it returns the acknowledged values
// and offsets, and an error for the stream or the first refused record.
func cpGRPCProduce(c pbconnect.ProduceServiceClient, stream string, values []string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := c.Produce(ctx)
	var sent [][]string
	for i := 0; i < len(values); i += 25 {
		req := &pb.ProduceRequest{Id: uint64(len(sent)), Stream: stream}
		vs := values[i:min(i+25, len(values))]
		for _, v := range vs {
			req.Records = append(req.Records, &pb.ProduceRecord{Value: []byte(v)})
		}
		if err := st.Send(req); err != nil {
			return nil, fmt.Errorf("send: %w", err)
		}
		sent = append(sent, vs)
	}
	if err := st.CloseRequest(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var first error
	for range sent {
		r, err := st.Receive()
		if err != nil {
			return out, fmt.Errorf("receive: %w", err)
		}
		vs := sent[r.Id]
		if r.Error != nil && first == nil {
			first = fmt.Errorf("request %d: %v", r.Id, r.Error)
		}
		for j, res := range r.Results {
			if res.Error == nil && j < len(vs) {
				out[vs[j]] = res.Offset
			} else if first == nil {
				first = fmt.Errorf("request %d record %d: %v", r.Id, j, res.Error)
			}
		}
	}
	return out, first
}

// checkCloudTable reads the n records of stream back with a Kafka
// consumer of kafkaAddr (at once, from the sequenced WAL objects) and
// with iceberg-go once the table committed them (read): dense offsets of
// one partition, every value once, every acknowledged value at its
// acknowledged offset.
func checkCloudTable(t *testing.T, kafkaAddr, stream string, n int, acked map[int64]string, read func() []*tributary.Record) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics(stream), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := pollKgo(t, cons, n, 60*time.Second)
	checkCloudRows(t, "kgo consumer", got, acked, n, func(d delivered) (int64, string) { return d.offset, string(d.value) })
	waitFor(t, 60*time.Second, "the table commits every record", func() bool { return len(read()) >= n })
	rows := read()
	ds := make([]delivered, len(rows))
	for i, r := range rows {
		ds[i] = delivered{partition: r.Partition, offset: r.Offset, value: r.Value}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].offset < ds[j].offset })
	checkCloudRows(t, "iceberg-go", ds, acked, n, func(d delivered) (int64, string) { return d.offset, string(d.value) })
}

// TestCloudProduceHTTPGRPC: HTTP (Confluent REST v3, net/http) and gRPC
// ProduceService (the generated client) producers write one stream
// through two cloud servers sharing a catalog (SQLite state) and a
// warehouse, all four at once, so the two servers sequence one
// partition concurrently. Every record is acknowledged once; a Kafka
// consumer and iceberg-go read every one exactly once at its
// acknowledged offset, offsets dense (interleaved, no gap, no duplicate).
func TestCloudProduceHTTPGRPC(t *testing.T) {
	dir := t.TempDir()
	const stream = "factory.cloudhttp"
	httpOn := "http:\n  addr: 127.0.0.1:0\n"
	a := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "a", "", httpOn))
	b := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "b", "", httpOn))
	acks := &cpAcks{m: map[string]int64{}}
	const rounds, per = 12, 50
	var wg sync.WaitGroup
	run := func(who string, send func([]string) (map[string]int64, error)) {
		defer wg.Done()
		for r := range rounds {
			vs := make([]string, per)
			for i := range vs {
				vs[i] = fmt.Sprintf("%s-%02d-%03d", who, r, i)
			}
			got, err := send(vs)
			if err != nil {
				t.Errorf("%s round %d: %v", who, r, err)
				return
			}
			prev := int64(-1)
			for _, v := range vs {
				off, ok := got[v]
				if !ok || off <= prev {
					t.Errorf("%s: %s acknowledged %v at %d after %d", who, v, ok, off, prev)
					return
				}
				prev = off
				acks.add(t, v, off)
			}
		}
	}
	grpcOf := func(p *proc) pbconnect.ProduceServiceClient {
		return pbconnect.NewProduceServiceClient(h2c(), "http://"+p.CloudHTTP, connect.WithGRPC())
	}
	wg.Add(4)
	go run("http-a", func(vs []string) (map[string]int64, error) { return cpHTTPProduce(a.CloudHTTP, stream, vs) })
	go run("http-b", func(vs []string) (map[string]int64, error) { return cpHTTPProduce(b.CloudHTTP, stream, vs) })
	go run("grpc-a", func(vs []string) (map[string]int64, error) { return cpGRPCProduce(grpcOf(a), stream, vs) })
	go run("grpc-b", func(vs []string) (map[string]int64, error) { return cpGRPCProduce(grpcOf(b), stream, vs) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	n := 4 * rounds * per
	if len(acks.m) != n {
		t.Fatalf("%d records acknowledged, want %d", len(acks.m), n)
	}
	checkCloudTable(t, a.CloudKafka, stream, n, acks.byOffset(t), func() []*tributary.Record { return readTable(t, dir, stream) })
	a.stop()
	b.stop()
}

// TestCloudProduceStoreOutage: the object store (versitygw, the
// warehouse) is killed while HTTP and gRPC producers write to a cloud
// server, and started again. Produces during the outage are refused —
// the flush's put fails, nothing of it is sequenced — and the producers
// resend what was refused until all is acknowledged. Nothing acknowledged
// is lost and nothing is in the table twice: dense offsets, every value
// once at its acknowledged offset.
func TestCloudProduceStoreOutage(t *testing.T) {
	s3 := startVersityGW(t)
	dir := t.TempDir()
	const stream = "factory.cloudoutage"
	storage := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
storage:
  s3:
    endpoint: %s
    region: us-east-1
    path_style: true
    access_key_id: %s
    secret_access_key: %s
`, s3.url, s3Access, s3Secret)
	a := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "a", "  warehouse: s3://"+s3Bucket+"/warehouse", storage))
	acks := &cpAcks{m: map[string]int64{}}
	var refusedMu sync.Mutex
	refused := 0
	var firstRefusal error
	const total, per = 600, 20
	var wg sync.WaitGroup
	// Each producer resends what was not acknowledged until all is.
	run := func(who string, send func([]string) (map[string]int64, error)) {
		defer wg.Done()
		pending := make([]string, total)
		for i := range pending {
			pending[i] = fmt.Sprintf("%s-%04d", who, i)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for len(pending) > 0 && time.Now().Before(deadline) {
			vs := pending[:min(per, len(pending))]
			got, err := send(vs)
			rest := acks.keep(t, vs, got)
			if err != nil {
				refusedMu.Lock()
				refused++
				if firstRefusal == nil {
					firstRefusal = fmt.Errorf("%s: %w", who, err)
				}
				if m := err.Error(); !strings.Contains(m, ": 503 ") && !strings.Contains(m, "unavailable") {
					t.Errorf("%s: refused with %v, want the protocol's retriable unavailable", who, err)
				}
				refusedMu.Unlock()
				time.Sleep(50 * time.Millisecond) // a producer's retry backoff
			}
			pending = append(rest, pending[len(vs):]...)
		}
		if len(pending) > 0 {
			t.Errorf("%s: %d records never acknowledged", who, len(pending))
		}
	}
	wg.Add(2)
	go run("http", func(vs []string) (map[string]int64, error) { return cpHTTPProduce(a.CloudHTTP, stream, vs) })
	go run("grpc", func(vs []string) (map[string]int64, error) {
		return cpGRPCProduce(pbconnect.NewProduceServiceClient(h2c(), "http://"+a.CloudHTTP, connect.WithGRPC()), stream, vs)
	})
	ackedN := func() int { acks.mu.Lock(); defer acks.mu.Unlock(); return len(acks.m) }
	waitFor(t, 60*time.Second, "records acknowledged before the outage", func() bool { return ackedN() >= 200 })
	s3.stop()
	before := ackedN()
	waitFor(t, 60*time.Second, "produces refused during the outage", func() bool {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		return refused >= 4
	})
	during := ackedN() - before
	s3.start()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("object store outage: %d acknowledged before it, %d during it (flushes that were put before the kill), %d refused requests (the first: %v)", before, during, refused, firstRefusal)
	n := 2 * total
	if len(acks.m) != n {
		t.Fatalf("%d records acknowledged, want %d", len(acks.m), n)
	}
	checkCloudTable(t, a.CloudKafka, stream, n, acks.byOffset(t),
		func() []*tributary.Record { return readTableProps(t, dir, stream, s3Props(s3.url)) })
	a.stop()
}
