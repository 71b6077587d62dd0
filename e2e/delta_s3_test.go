package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
	"github.com/tributary-io/tributary/uplink"
)

// TestDeltaS3PutIfAbsent: on a real S3 server (versitygw) a Delta commit
// is a conditional put (If-None-Match: *): of 16 writers racing for one
// version exactly one wins, the others read ErrExists and nothing else;
// and an edge whose warehouse is on that server keeps a [iceberg, delta]
// stream's Delta log beside the table, read back through the S3 store.
func TestDeltaS3PutIfAbsent(t *testing.T) {
	endpoint := startVersity(t)
	ctx := context.Background()
	b, err := uplink.OpenBucket(ctx, "s3://"+s3Bucket+"/race", tables.StoreOptions{S3: tables.S3Options{
		Endpoint: endpoint, Region: "us-east-1", PathStyle: true, AccessKeyID: s3Access, SecretAccessKey: s3Secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.DeltaStore()
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := st.PutIfAbsent(ctx, "t/_delta_log/00000000000000000000.json", []byte(fmt.Sprint(i)))
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, delta.ErrExists):
				t.Errorf("writer %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d writers won version 0 on S3, want 1", wins.Load())
	}

	dir := t.TempDir()
	cfg := s3EdgeConfig(t, dir, endpoint)
	raw, _ := os.ReadFile(cfg)
	raw = bytes.Replace(raw, []byte(`stream: factory.telemetry}`), []byte(`stream: factory.telemetry, payload: infer, formats: [iceberg, delta]}`), 1)
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("formats: [iceberg, delta]")) {
		t.Fatalf("the route was not given formats: %s", raw)
	}
	p := startEdge(t, dir, cfg)
	publishPayloads(t, p.MQTT, "s3-delta", jsonPayloads(`{"device":"m","a":%d}`, 0, 25))
	wh, err := uplink.OpenBucket(ctx, "s3://"+s3Bucket+"/warehouse", tables.StoreOptions{S3: tables.S3Options{
		Endpoint: endpoint, Region: "us-east-1", PathStyle: true, AccessKeyID: s3Access, SecretAccessKey: s3Secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	dt := delta.NewTable(wh.DeltaStore(), "factory/telemetry")
	var s *delta.Snapshot
	waitFor(t, 60*time.Second, "the Delta log on S3 covers 25 rows", func() bool {
		s, err = dt.Snapshot(ctx)
		if err != nil {
			return false
		}
		var sum int64
		for _, tx := range s.Txns {
			sum += tx.Version
		}
		return sum >= 25
	})
	p.stop()
	rows, err := dt.Rows(ctx, s)
	if err != nil || len(rows) != 25 {
		t.Fatalf("%d Delta rows on S3, want 25: %v", len(rows), err)
	}
	recs := readTableProps(t, dir, "factory.telemetry", s3Props(endpoint))
	if len(recs) != 25 {
		t.Fatalf("%d Iceberg rows, want 25", len(recs))
	}
	tbl := loadSQLiteTable(t, dir+"/catalog.db", "factory.telemetry", s3Props(endpoint))
	marks := tables.HighWaters(tbl)
	for part, m := range marks {
		if v, _ := s.TxnVersion(tables.DeltaAppID("factory.telemetry", part)); v != m {
			t.Fatalf("partition %d: Delta txn %d, Iceberg mark %d", part, v, m)
		}
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != len(s.Files) {
		t.Fatalf("Iceberg lists %d files, Delta %d", len(tasks), len(s.Files))
	}
	for _, task := range tasks {
		_, rel, _ := strings.Cut(task.File.FilePath(), "/warehouse/factory/telemetry/")
		if _, ok := s.Files[rel]; !ok {
			t.Fatalf("Iceberg file %s is not in the Delta log (%v)", task.File.FilePath(), s.Paths())
		}
	}
}
