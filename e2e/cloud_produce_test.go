package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
)

// The stream the cloud-produce tests write, and each producer's records.
const cpStream, cpPerProducer = "factory.cloudprod", 1500

// cloudProduceConfig is a cloud server on dir's catalog (or the
// PostgreSQL database dsn) and warehouse with the cloud write path on;
// more is YAML to add: lines of the catalog section, then top-level
// sections.
func cloudProduceConfig(t *testing.T, dir, dsn, name string, more ...string) string {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	uri := ""
	if dsn != "" {
		uri = "\n  uri: " + dsn
	}
	more = append(more, "", "")
	if more[0] != "" {
		uri += "\n" + more[0]
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`role: cloud
data_dir: %[1]s
catalog:
  addr: 127.0.0.1:0%[3]s
kafka:
  addr: 127.0.0.1:0
pulsar:
  addr: ""
maintenance:
  enabled: false
cloud_produce:
  enabled: true
  server_id: %[2]s
  auto_create: true
  commit_interval: 200ms
  grace: 1s
`, dir, name, uri)+more[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCloudProduce: two cloud servers on one catalog and warehouse, two
// kgo idempotent producers (lz4) writing one stream, one of them through
// a server that is killed with SIGKILL mid-produce (its producer goes on
// through the other). Every record is acknowledged, a kgo consumer reads
// every one at once (from the sequenced WAL objects) exactly once at
// dense offsets, and iceberg-go reads the same from the table once it is
// committed.
func TestCloudProduce(t *testing.T) { cloudProduce(t, "") }

// TestCloudProducePostgres is TestCloudProduce with the catalog (and the
// state database the servers sequence in) on PostgreSQL.
func TestCloudProducePostgres(t *testing.T) { cloudProduce(t, startPostgres(t)) }

func cloudProduce(t *testing.T, dsn string) {
	dir := t.TempDir()
	a := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, dsn, "a"))
	b := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, dsn, "b"))
	read := func() []*tributary.Record {
		if dsn != "" {
			return readTablePostgres(t, dsn, cpStream)
		}
		return readTable(t, dir, cpStream)
	}
	type acked struct {
		value  string
		offset int64
		took   time.Duration
	}
	var mu sync.Mutex
	var acks []acked
	produce := func(cl *kgo.Client, who string, onAcked func(int)) {
		var wg sync.WaitGroup
		n := 0
		for i := 0; i < cpPerProducer; i++ {
			wg.Add(1)
			start := time.Now()
			v := fmt.Sprintf("%s-%05d", who, i)
			cl.Produce(context.Background(), &kgo.Record{Topic: cpStream, Value: []byte(v)}, func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("produce %s: %v", v, err)
					return
				}
				mu.Lock()
				acks = append(acks, acked{v, r.Offset, time.Since(start)})
				n++
				if onAcked != nil {
					onAcked(n)
				}
				mu.Unlock()
			})
			if i%100 == 99 {
				// Pace the producer so that the kill lands mid-produce.
				if err := cl.Flush(context.Background()); err != nil {
					t.Error(err)
					break
				}
			}
		}
		wg.Wait()
	}
	client := func(seeds ...string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
			kgo.AllowAutoTopicCreation(), kgo.RecordRetries(1000), kgo.RetryTimeout(2*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	p1, p2 := client(a.CloudKafka, b.CloudKafka), client(b.CloudKafka)
	var killed sync.Once
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		produce(p1, "p1", func(n int) {
			if n == 400 {
				killed.Do(func() { go a.kill() })
			}
		})
	}()
	go func() { defer wg.Done(); produce(p2, "p2", nil) }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Each value acknowledged once, at distinct offsets.
	byOffset := map[int64]string{}
	for _, k := range acks {
		if v, ok := byOffset[k.offset]; ok && v != k.value {
			t.Fatalf("offset %d acknowledged for %s and %s", k.offset, v, k.value)
		}
		byOffset[k.offset] = k.value
	}
	lat := make([]time.Duration, 0, len(acks))
	for _, k := range acks {
		if k.value[:2] == "p2" {
			lat = append(lat, k.took)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("cloud produce acknowledgement latency (file://, 250ms flush, catalog %s): p50 %v p99 %v over %d records",
		map[bool]string{true: "postgres", false: "sqlite"}[dsn != ""], lat[len(lat)/2], lat[len(lat)*99/100], len(lat))

	// A consumer reads them at once, before (or while) the table commits;
	// the table holds them exactly once once committed.
	checkCloudTable(t, b.CloudKafka, cpStream, 2*cpPerProducer, byOffset, read)
	b.stop()
}

// checkCloudRows: n rows at offsets 0..n-1 of one partition, each value
// once, each acknowledged value at its acknowledged offset.
func checkCloudRows(t *testing.T, who string, got []delivered, acked map[int64]string, n int, of func(delivered) (int64, string)) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s: %d rows, want %d", who, len(got), n)
	}
	seen := map[string]int64{}
	for i, d := range got {
		off, v := of(d)
		if off != int64(i) || d.partition != got[0].partition {
			t.Fatalf("%s: row %d at partition %d offset %d: not dense", who, i, d.partition, off)
		}
		if o, dup := seen[v]; dup {
			t.Fatalf("%s: %s at offsets %d and %d", who, v, o, off)
		}
		seen[v] = off
		if w, ok := acked[off]; ok && w != v {
			t.Fatalf("%s: offset %d holds %s, acknowledged for %s", who, off, v, w)
		}
	}
}
