//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// benchStreams is how many concurrent produce streams the HTTP and gRPC
// loads use (kgo pipelines batches on one connection).
const benchStreams = 4

// httpProduceLoad streams 1 KiB records on benchStreams chunked POSTs for
// d and returns the records acknowledged (report 200) per second.
func httpProduceLoad(t *testing.T, addr, stream string, d time.Duration) float64 {
	t.Helper()
	val := strings.Repeat("a", 1024)
	rec := []byte(`{"value":{"type":"STRING","data":"` + val + `"}}`)
	var acked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range benchStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, pw := io.Pipe()
			go func() {
				deadline := start.Add(d)
				for time.Now().Before(deadline) {
					if _, err := pw.Write(rec); err != nil {
						return
					}
				}
				pw.Close()
			}()
			resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", addr, stream), "application/json", pr)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			dec := json.NewDecoder(resp.Body)
			for {
				var r struct {
					ErrorCode int `json:"error_code"`
				}
				if dec.Decode(&r) != nil {
					return
				}
				if r.ErrorCode != 200 {
					t.Errorf("report %d", r.ErrorCode)
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(acked.Load()) / time.Since(start).Seconds()
}

// grpcBatch is how many records a benchmark ProduceRequest carries (a
// client batching as kgo does).
const grpcBatch = 100

// grpcProduceLoad is httpProduceLoad over gRPC (h2c) Produce streams,
// grpcBatch records per request.
func grpcProduceLoad(t *testing.T, addr, stream string, d time.Duration) float64 {
	t.Helper()
	c := pbconnect.NewProduceServiceClient(h2c(), "http://"+addr, connect.WithGRPC())
	val := []byte(strings.Repeat("a", 1024))
	var acked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range benchStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := c.Produce(context.Background())
			go func() {
				deadline := start.Add(d)
				for i := 0; time.Now().Before(deadline); i++ {
					req := &pb.ProduceRequest{}
					if i == 0 {
						req.Stream = stream
					}
					for range grpcBatch {
						req.Records = append(req.Records, &pb.ProduceRecord{Value: val})
					}
					if st.Send(req) != nil {
						return
					}
				}
				st.CloseRequest()
			}()
			for {
				r, err := st.Receive()
				if err != nil {
					return
				}
				for _, res := range r.Results {
					if res.Error != nil {
						t.Errorf("produce: %v", res.Error)
						return
					}
				}
				acked.Add(int64(len(r.Results)))
			}
		}()
	}
	wg.Wait()
	return float64(acked.Load()) / time.Since(start).Seconds()
}

// sseRead reads n records of stream from offset 0 as Server-Sent Events
// and returns the key and value MB/s.
func sseRead(t *testing.T, addr, stream string, n int) float64 {
	t.Helper()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v1/streams/%s/partitions/0/records?offset=0&max_bytes=4194304&max_records=10000", addr, stream), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, bytes := 0, 0
	err = readEvents(resp.Body, func(ev sseEvent) bool {
		var r struct {
			Offset int64 `json:"offset"`
			Value  data  `json:"value"`
		}
		if err := json.Unmarshal([]byte(ev.data), &r); err != nil || r.Offset != int64(got) {
			t.Fatalf("event %d: %v offset %d", got, err, r.Offset)
		}
		bytes += len(r.Value.bytes(t))
		got++
		return got < n
	})
	if err != nil || got < n {
		t.Fatalf("sse: %v after %d", err, got)
	}
	return float64(bytes) / (1 << 20) / time.Since(start).Seconds()
}

// grpcFetchRead reads n records with gRPC Fetch and returns the MB/s.
func grpcFetchRead(t *testing.T, addr, stream string, n int) float64 {
	t.Helper()
	start := time.Now()
	c := pbconnect.NewReadServiceClient(h2c(), "http://"+addr, connect.WithGRPC())
	st, err := c.Fetch(context.Background(), connect.NewRequest(&pb.FetchRequest{Stream: stream, Offset: 0, MaxRecords: 10000, MaxBytes: 4 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, bytes := 0, 0
	for got < n && st.Receive() {
		for _, r := range st.Msg().Records {
			if r.Offset != int64(got) {
				t.Fatalf("fetch: offset %d, want %d", r.Offset, got)
			}
			bytes += len(r.Value) + len(r.Key)
			got++
		}
	}
	if got < n {
		t.Fatalf("fetch: %v after %d", st.Err(), got)
	}
	return float64(bytes) / (1 << 20) / time.Since(start).Seconds()
}

// TestBenchHTTP: on one `tributary dev`, streamed HTTP produce (Confluent
// REST v3, chunked) and gRPC Produce (h2c) against Kafka produce (kgo,
// acks=all), 1 KiB records; then Server-Sent Events and gRPC Fetch
// against Kafka fetch (kgo) of the same table rows from the in-process
// cloud server. Reported as ratios to Kafka (aim >= 0.5), with the load
// average.
func TestBenchHTTP(t *testing.T) {
	d := benchSeconds()
	dir := t.TempDir()
	p := startDev(t, dir, "--commit-interval", "1s", "--wal-budget", "8GiB")
	kafka := produceLoad(t, p.Kafka, d).recs
	httpRate := httpProduceLoad(t, p.HTTP, "bench.http", d)
	grpcRate := grpcProduceLoad(t, p.HTTP, "bench.grpc", d)

	// Reads of the same rows: the first n of the Kafka-produced stream.
	n := 200000
	var hw struct {
		Partitions []struct {
			Latest int64 `json:"latest_offset"`
		} `json:"partitions"`
	}
	// Reads run once everything produced is in the tables (the uplink is
	// idle), so no read competes with Parquet encoding.
	var status struct {
		WAL struct {
			Records int64 `json:"records"`
		} `json:"wal"`
	}
	waitFor(t, 5*time.Minute, "the WAL drained into the tables", func() bool {
		return getJSON(t, "http://"+p.HTTP+"/status", &status) == 200 && status.WAL.Records == 0 &&
			getJSON(t, "http://"+p.CloudHTTP+"/v1/streams/factory.telemetry/partitions", &hw) == 200 &&
			len(hw.Partitions) == 1 && hw.Partitions[0].Latest >= int64(n)
	})
	_, kTotal, kBytes := consumeAll(t, p.CloudKafka, "factory.telemetry", n)
	kafkaMBs := float64(kBytes) / (1 << 20) / kTotal.Seconds()
	sseMBs := sseRead(t, p.CloudHTTP, "factory.telemetry", n)
	fetchMBs := grpcFetchRead(t, p.CloudHTTP, "factory.telemetry", n)
	up, _ := exec.Command("uptime").Output()
	var b strings.Builder
	fmt.Fprintf(&b, "\nHTTP and gRPC against Kafka on one tributary dev, 1 KiB records, %s per produce run, %d streams for HTTP and gRPC\n", d, benchStreams)
	fmt.Fprintf(&b, "%-40s %12s %8s\n", "load", "rate", "vs Kafka")
	fmt.Fprintf(&b, "%-40s %9.0f r/s %8s\n", "Kafka produce (kgo, acks=all)", kafka, "1.00")
	fmt.Fprintf(&b, "%-40s %9.0f r/s %8.2f\n", "HTTP produce (streamed, chunked)", httpRate, httpRate/kafka)
	fmt.Fprintf(&b, "%-40s %9.0f r/s %8.2f\n", fmt.Sprintf("gRPC Produce (h2c, %d per request)", grpcBatch), grpcRate, grpcRate/kafka)
	fmt.Fprintf(&b, "%-40s %8.1f MB/s %8s\n", fmt.Sprintf("Kafka fetch (kgo), %d records", n), kafkaMBs, "1.00")
	fmt.Fprintf(&b, "%-40s %8.1f MB/s %8.2f\n", "Server-Sent Events (base64 values)", sseMBs, sseMBs/kafkaMBs)
	fmt.Fprintf(&b, "%-40s %8.1f MB/s %8.2f\n", "gRPC Fetch (h2c)", fetchMBs, fetchMBs/kafkaMBs)
	fmt.Fprintf(&b, "load: %s", up)
	t.Log(b.String())
	fmt.Print(b.String())
}
