package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestCloudProduceStateOutage: a cloud server whose state database
// (PostgreSQL, state.uri; the catalog stays on SQLite) stops and starts
// again, then is slow (a transaction holds the stream's partition row).
// While it is down every protocol answers its retriable refusal — HTTP
// 503 with Retry-After, gRPC UNAVAILABLE, Kafka KAFKA_STORAGE_ERROR —
// and once it is back producing resumes; while it is slow the produce
// buffer fills to cloud_produce.max_buffered_bytes and further produces
// are refused (HTTP 429, gRPC RESOURCE_EXHAUSTED) rather than held, the
// buffered-bytes metric never above the cap. Producers resend what was
// refused: every record is acknowledged once and the table holds each
// exactly once at its acknowledged offset, offsets dense.
func TestCloudProduceStateOutage(t *testing.T) {
	pg := testkit.StartPostgres(t)
	dir := t.TempDir()
	const stream, capBytes = "factory.cloudstate", 48 << 10
	a := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, "", "a", "",
		fmt.Sprintf("  orphan_grace: 10s\n  flush_bytes: 16KiB\n  max_buffered_bytes: %d\nhttp:\n  addr: 127.0.0.1:0\nstate:\n  uri: %s\n", capBytes, pg.DSN)))
	acks := &cpAcks{m: map[string]int64{}}
	var pmu sync.Mutex
	var pending []string // produced, refused: resent at the end
	n := 0
	values := func(who string, k int) []string {
		pmu.Lock()
		defer pmu.Unlock()
		vs := make([]string, k)
		for i := range vs {
			vs[i] = fmt.Sprintf("%s-%05d-%s", who, n, strings.Repeat("v", 1000))
			n++
		}
		return vs
	}
	// record keeps what was acknowledged and returns the rest, pending.
	record := func(vs []string, got map[string]int64) []string {
		rest := acks.keep(t, vs, got)
		pmu.Lock()
		pending = append(pending, rest...)
		pmu.Unlock()
		return rest
	}
	grpcC := pbconnect.NewProduceServiceClient(h2c(), "http://"+a.CloudHTTP, connect.WithGRPC())
	kc, err := kgo.NewClient(kgo.SeedBrokers(a.CloudKafka), kgo.DisableIdempotentWrite(), kgo.AllowAutoTopicCreation(),
		kgo.RecordRetries(2), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kafkaProduce := func(vs []string) (map[string]int64, error) {
		var rs []*kgo.Record
		for _, v := range vs {
			rs = append(rs, &kgo.Record{Topic: stream, Value: []byte(v)})
		}
		out := map[string]int64{}
		res := kc.ProduceSync(context.Background(), rs...)
		for _, r := range res {
			if r.Err == nil {
				out[string(r.Record.Value)] = r.Record.Offset
			}
		}
		return out, res.FirstErr()
	}
	// httpOne posts one record: its status and Retry-After.
	httpOne := func(v string) (int, string) {
		resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", a.CloudHTTP, stream), "application/json",
			strings.NewReader(fmt.Sprintf(`{"value":{"type":"STRING","data":%q}}`, v)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			var off int64
			if _, err := fmt.Sscanf(string(b[strings.Index(string(b), `"offset":`)+len(`"offset":`):]), "%d", &off); err != nil {
				t.Fatalf("report %s: %v", b, err)
			}
			record([]string{v}, map[string]int64{v: off})
		} else {
			record([]string{v}, nil)
		}
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}

	t.Run("available", func(t *testing.T) {
		for who, send := range map[string]func([]string) (map[string]int64, error){
			"http":  func(vs []string) (map[string]int64, error) { return cpHTTPProduce(a.CloudHTTP, stream, vs) },
			"grpc":  func(vs []string) (map[string]int64, error) { return cpGRPCProduce(grpcC, stream, vs) },
			"kafka": kafkaProduce,
		} {
			vs := values(who, 20)
			got, err := send(vs)
			if rest := record(vs, got); err != nil || len(rest) > 0 {
				t.Fatalf("%s: %d not acknowledged: %v", who, len(rest), err)
			}
		}
	})

	t.Run("down", func(t *testing.T) {
		pg.Stop()
		if code, ra := httpOne(values("http1", 1)[0]); code != http.StatusServiceUnavailable || ra == "" {
			t.Errorf("HTTP produce with the state database down: %d, Retry-After %q; want 503 with Retry-After", code, ra)
		}
		vs := values("http", 10)
		if got, err := cpHTTPProduce(a.CloudHTTP, stream, vs); len(record(vs, got)) == 0 || err == nil || !strings.Contains(err.Error(), ": 503 ") {
			t.Errorf("HTTP stream with the state database down: %v, want per-record 503", err)
		}
		vs = values("grpc", 10)
		if got, err := cpGRPCProduce(grpcC, stream, vs); len(record(vs, got)) == 0 || err == nil || !strings.Contains(err.Error(), "unavailable") {
			t.Errorf("gRPC with the state database down: %v, want UNAVAILABLE", err)
		}
		vs = values("kafka", 10)
		if got, err := kafkaProduce(vs); len(record(vs, got)) == 0 || !errors.Is(err, kerr.KafkaStorageError) {
			t.Errorf("Kafka with the state database down: %v, want KAFKA_STORAGE_ERROR", err)
		}
		pg.Start()
	})

	t.Run("slow", func(t *testing.T) {
		db, err := sql.Open("pgx", pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var tx *sql.Tx
		waitFor(t, 30*time.Second, "the state database back", func() bool {
			tx, err = db.Begin()
			return err == nil
		})
		if _, err := tx.Exec(`SELECT next_offset FROM tributary_cw_partitions WHERE stream = $1 FOR UPDATE`, stream); err != nil {
			t.Fatal(err)
		}
		// Producers keep sending while every flush waits on the row.
		var wg sync.WaitGroup
		var mu sync.Mutex
		refused := map[string]int{}
		stop := make(chan struct{})
		defer func() { close(stop); wg.Wait() }()
		// A flush that waits past half the orphan grace is refused as
		// unavailable too; a full buffer refuses at once.
		run := func(who string, send func([]string) (map[string]int64, error), want, unavailable string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				vs := values(who, 24)
				got, err := send(vs)
				record(vs, got)
				if err != nil {
					mu.Lock()
					switch m := err.Error(); {
					case strings.Contains(m, want):
						refused[who]++
					case strings.Contains(m, unavailable):
					default:
						t.Errorf("%s refused with %v, want %s", who, err, want)
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		wg.Add(3)
		go run("http-slow", func(vs []string) (map[string]int64, error) { return cpHTTPProduce(a.CloudHTTP, stream, vs) }, ": 429 ", ": 503 ")
		go run("http-slow2", func(vs []string) (map[string]int64, error) { return cpHTTPProduce(a.CloudHTTP, stream, vs) }, ": 429 ", ": 503 ")
		go run("grpc-slow", func(vs []string) (map[string]int64, error) { return cpGRPCProduce(grpcC, stream, vs) }, "resource_exhausted", `"unavailable"`)
		maxHeld := 0.0
		waitFor(t, 30*time.Second, "produces refused by back-pressure", func() bool {
			if h := metricValue(t, a, "tributary_cloud_produce_buffered_bytes"); h > maxHeld {
				maxHeld = h
			}
			mu.Lock()
			defer mu.Unlock()
			return refused["http-slow"]+refused["http-slow2"] >= 3 && refused["grpc-slow"] >= 1
		})
		if maxHeld > capBytes || metricValue(t, a, "tributary_cloud_produce_backpressure_total") == 0 {
			t.Errorf("buffered %v bytes (cap %d), back-pressure refusals %v", maxHeld, capBytes, metricValue(t, a, "tributary_cloud_produce_backpressure_total"))
		}
		tx.Rollback()
		t.Logf("slow state database: at most %v bytes buffered (cap %d), refusals %v", maxHeld, capBytes, refused)
	})
	if t.Failed() {
		t.FailNow()
	}

	// Resend what was refused, until all is acknowledged.
	waitFor(t, 60*time.Second, "every refused record resent and acknowledged", func() bool {
		pmu.Lock()
		vs := pending
		pending = nil
		pmu.Unlock()
		for i := 0; i < len(vs); i += 20 {
			got, _ := cpHTTPProduce(a.CloudHTTP, stream, vs[i:min(i+20, len(vs))])
			record(vs[i:min(i+20, len(vs))], got)
		}
		pmu.Lock()
		defer pmu.Unlock()
		return len(pending) == 0
	})
	if len(acks.m) != n {
		t.Fatalf("%d records acknowledged, want %d", len(acks.m), n)
	}
	checkCloudTable(t, a.CloudKafka, stream, n, acks.byOffset(t), func() []*tributary.Record { return readTable(t, dir, stream) })
	a.stop()
}

// metricValue is the value of an unlabelled metric on p's /metrics (the
// cloud server's catalog port).
func metricValue(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.Catalog + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s on %s/metrics", name, p.Catalog)
	return 0
}
