package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
)

// deltaEdge starts an edge node whose factory.telemetry stream (MQTT
// route and, through uplink.formats, Kafka) is typed and has formats
// [iceberg, delta], with a Delta checkpoint every 2 versions.
func deltaEdge(t *testing.T, dir string) *proc {
	t.Helper()
	return startEdge(t, dir, deltaEdgeConfig(t, dir, 2))
}

// deltaEdgeConfig writes deltaEdge's config with a checkpoint every
// interval versions and returns its path.
func deltaEdgeConfig(t *testing.T, dir string, interval int) string {
	t.Helper()
	return deltaNodeConfig(t, dir, "delta-1", dir, interval)
}

// deltaNodeConfig is deltaEdgeConfig for node id, whose catalog and
// warehouse are in shared (two nodes may share them).
func deltaNodeConfig(t *testing.T, dir, id, shared string, interval int) string {
	t.Helper()
	cfg := edgeConfig(t, dir, id, fmt.Sprintf("catalog:\n  uri: sqlite://%[1]s/catalog.db\n  warehouse: file://%[1]s/warehouse\nkafka:\n  addr: 127.0.0.1:0\n", shared))
	raw, _ := os.ReadFile(cfg)
	raw = bytes.Replace(raw, []byte(`stream: factory.telemetry}`), []byte(`stream: factory.telemetry, payload: infer, formats: [iceberg, delta]}`), 1)
	raw = bytes.Replace(raw, []byte("  commit_interval: 200ms"), []byte(fmt.Sprintf("  commit_interval: 200ms\n  formats: [iceberg, delta]\n  delta_checkpoint_interval: %d", interval)), 1)
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func deltaTable(dir, stream string) *delta.Table {
	ns, name, _ := strings.Cut(stream, ".")
	return delta.NewTable(delta.DirStore{Root: filepath.Join(dir, "warehouse")}, ns+"/"+name)
}

// waitDelta waits until the stream's Delta log holds n rows' worth of
// files (by its txns) and returns its snapshot.
func waitDelta(t *testing.T, dir, stream string, n int64) *delta.Snapshot {
	t.Helper()
	var s *delta.Snapshot
	waitFor(t, 30*time.Second, fmt.Sprintf("the Delta log of %s covers %d rows", stream, n), func() bool {
		var err error
		s, err = deltaTable(dir, stream).Snapshot(context.Background())
		if err != nil {
			return false
		}
		var sum int64
		for _, tx := range s.Txns {
			sum += tx.Version
		}
		return sum >= n
	})
	return s
}

// TestDeltaBesideIceberg: MQTT and Kafka into a typed [iceberg, delta]
// stream whose payloads gain a field mid-run. Both logs list the same
// files; the Delta reader, the Iceberg scan (iceberg-go) and DuckDB over
// exactly the files the Delta log lists agree row for row; checkpoints
// are written and the reader starts from one.
func TestDeltaBesideIceberg(t *testing.T) {
	dir := t.TempDir()
	p := deltaEdge(t, dir)
	const stream = "factory.telemetry"
	publishPayloads(t, p.MQTT, "delta-a", jsonPayloads(`{"device":"m","a":%d}`, 0, 20))
	waitRows(t, dir, stream, 20)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic(stream))
	if err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 40; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf(`{"device":"k","a":%d}`, i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	waitRows(t, dir, stream, 40)
	publishPayloads(t, p.MQTT, "delta-b", jsonPayloads(`{"device":"m","a":%d,"b":"x"}`, 40, 20)) // a schema change mid-run
	waitRows(t, dir, stream, 60)
	s := waitDelta(t, dir, stream, 60)
	if m, _ := scrapeMetrics(t, p); m["tributary_uplink_delta_commits_total"] < 1 || m["tributary_uplink_delta_checkpoints_total"] < 1 || m["tributary_uplink_delta_failures_total"] != 0 {
		t.Errorf("Delta metrics: commits %v, checkpoints %v, failures %v", m["tributary_uplink_delta_commits_total"], m["tributary_uplink_delta_checkpoints_total"], m["tributary_uplink_delta_failures_total"])
	}
	p.stop()

	dt := deltaTable(dir, stream)
	s, err = dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Both logs list the same files.
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), stream, nil)
	iceFiles := map[string]bool{}
	for _, f := range snapshotFiles(t, tbl) {
		iceFiles[f] = true
	}
	var deltaFiles []string
	for _, rel := range s.Paths() {
		f := filepath.Join(dir, "warehouse", "factory", "telemetry", rel)
		if !iceFiles[f] {
			t.Fatalf("Delta lists %s, the Iceberg snapshot does not (%v)", f, iceFiles)
		}
		deltaFiles = append(deltaFiles, f)
	}
	if len(deltaFiles) != len(iceFiles) {
		t.Fatalf("Delta lists %d files, Iceberg %d", len(deltaFiles), len(iceFiles))
	}
	// And by a replay of the JSON commits that shares no code with our
	// Delta package: the same files, rows per file and marks.
	checkDeltaMatchesIceberg(t, tbl, filepath.Join(dir, "warehouse", "factory", "telemetry"), stream)
	if s.Protocol.MinReaderVersion != 1 || s.Protocol.MinWriterVersion != 2 || s.Metadata.Configuration["delta.appendOnly"] != "true" || len(s.Metadata.PartitionColumns) != 0 {
		t.Fatalf("protocol %+v, metaData configuration %v, partition columns %v", s.Protocol, s.Metadata.Configuration, s.Metadata.PartitionColumns)
	}
	if _, ok := s.Schema.Field("b"); !ok {
		t.Fatalf("Delta schema lacks the column added mid-run: %s", s.Schema)
	}
	// Row for row: Delta reader against iceberg-go.
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	recs := readTable(t, dir, stream)
	if len(rows) != 60 || len(recs) != 60 {
		t.Fatalf("Delta %d rows, Iceberg %d, want 60", len(rows), len(recs))
	}
	deltaRow := deltaRowsByOffset(t, rows)
	for _, rec := range recs {
		r, ok := deltaRow(rec)
		if !ok || !bytes.Equal(r[tables.ColValue].([]byte), rec.Value) || r[tables.ColSource] != rec.Source {
			t.Fatalf("offset %d@%d: Delta row %v, Iceberg %q from %s", rec.Offset, rec.Partition, r, rec.Value, rec.Source)
		}
	}
	// DuckDB over exactly the Delta log's files.
	got := duckQuery(t, `SELECT count(*) AS n, count(b) AS with_b, count(DISTINCT "offset" || '@' || "partition") AS distinct_pos, sum(a) AS sum_a FROM FILES`, deltaFiles)
	if len(got) != 1 || fmt.Sprint(got[0]["n"]) != "60" || fmt.Sprint(got[0]["with_b"]) != "20" || fmt.Sprint(got[0]["distinct_pos"]) != "60" || fmt.Sprint(got[0]["sum_a"]) != "1770" {
		t.Fatalf("duckdb over the Delta files: %v", got)
	}
	var sumA float64
	withB := 0
	for _, r := range rows {
		sumA += r["a"].(float64)
		if r["b"] != nil {
			withB++
		}
	}
	if sumA != 1770 || withB != 20 {
		t.Fatalf("Delta reader: sum(a) %v, %d rows with b", sumA, withB)
	}
	// Checkpoints written and used; the checkpoint equals the commits.
	if s.Version >= 2 && s.Checkpoint < 0 {
		t.Fatalf("version %d without a checkpoint", s.Version)
	}
	if lc, err := dt.LastCheckpoint(ctx); s.Version >= 2 && (err != nil || lc.Version != s.Checkpoint) {
		t.Fatalf("_last_checkpoint %+v, %v; the replay used %d", lc, err, s.Checkpoint)
	}
	j, err := dt.ReplayCommits(ctx)
	if err != nil || len(j.Files) != len(s.Files) || j.Version != s.Version {
		t.Fatalf("the JSON commits replay to %d files at %d (%v), the checkpoint path to %d at %d", len(j.Files), j.Version, err, len(s.Files), s.Version)
	}
}

// TestDeltaBadLogKeepsIceberg: a corrupt entry at the Delta log's next
// version makes the Delta side fail with a clear error while the stream
// keeps committing to Iceberg; repaired, the Delta log catches up with
// nothing lost.
func TestDeltaBadLogKeepsIceberg(t *testing.T) {
	dir := t.TempDir()
	p := deltaEdge(t, dir)
	const stream = "factory.telemetry"
	publishPayloads(t, p.MQTT, "bad-a", jsonPayloads(`{"device":"m","a":%d}`, 0, 10))
	s := waitDelta(t, dir, stream, 10)
	dt := deltaTable(dir, stream)
	bad := filepath.Join(dir, "warehouse", "factory", "telemetry", "_delta_log", delta.CommitName(s.Version+1))
	if err := os.WriteFile(bad, []byte(`{"add":{"path":"x.parquet"`), 0o644); err != nil {
		t.Fatal(err)
	}
	publishPayloads(t, p.MQTT, "bad-b", jsonPayloads(`{"device":"m","a":%d}`, 10, 30))
	waitRows(t, dir, stream, 40) // Iceberg keeps committing
	waitFor(t, 30*time.Second, "the Delta failure logged", func() bool {
		l := p.logs()
		return strings.Contains(l, "the Delta log was not brought up") && strings.Contains(l, "corrupt")
	})
	if m, _ := scrapeMetrics(t, p); m["tributary_uplink_delta_failures_total"] < 1 {
		t.Errorf("tributary_uplink_delta_failures_total = %v while the Delta log is bad", m["tributary_uplink_delta_failures_total"])
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	waitDelta(t, dir, stream, 40)
	p.stop()
	s, err := dt.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := dt.Rows(context.Background(), s)
	if err != nil || len(rows) != 40 {
		t.Fatalf("%d Delta rows after the repair, want 40: %v", len(rows), err)
	}
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), stream, nil)
	checkDeltaMatchesIceberg(t, tbl, filepath.Join(dir, "warehouse", "factory", "telemetry"), stream)
}

// TestDeltaCrashBetweenCommits: kill -9 rounds where the crash falls
// between the Iceberg commit and the Delta one (the Delta commit of the
// round is removed after the kill, as if the process had died before its
// put: the binary has no pause to inject, and a commit not yet put is
// exactly a missing log entry). On each restart the lagging Delta log
// catches up from the marks; at the end each log has every acknowledged
// row once and both list the same files.
func TestDeltaCrashBetweenCommits(t *testing.T) {
	dir := t.TempDir()
	cfg := deltaEdgeConfig(t, dir, 1000) // no checkpoint covers the commit removed
	const stream = "factory.telemetry"
	root := filepath.Join(dir, "warehouse", "factory", "telemetry")
	total := 0
	for round := 0; round < 3; round++ {
		p := startEdge(t, dir, cfg)
		publishPayloads(t, p.MQTT, fmt.Sprint("crash-", round), jsonPayloads(`{"device":"m","a":%d}`, total, 20))
		total += 20
		waitRows(t, dir, stream, total)
		s := waitDelta(t, dir, stream, int64(total))
		p.kill()
		if s.Version > 0 { // version 0 made the table; later ones are appends
			if err := os.Remove(filepath.Join(root, "_delta_log", delta.CommitName(s.Version))); err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: killed at Delta version %d, its commit removed", round, s.Version)
		}
	}
	p := startEdge(t, dir, cfg)
	s := waitDelta(t, dir, stream, int64(total))
	p.stop()
	t.Logf("caught up at Delta version %d", s.Version)
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), stream, nil)
	l := checkDeltaMatchesIceberg(t, tbl, root, stream)
	var n int64
	for _, c := range l.Files {
		n += c
	}
	rows, err := deltaTable(dir, stream).Rows(context.Background(), s)
	if err != nil || len(rows) != total || n != int64(total) {
		t.Fatalf("Delta: %d rows read, %d by the stats, want %d: %v", len(rows), n, total, err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprint(r[tables.ColPartition], "@", r[tables.ColOffset])
		if seen[k] {
			t.Fatalf("Delta has %s twice", k)
		}
		seen[k] = true
	}
	if recs := readTable(t, dir, stream); len(recs) != total {
		t.Fatalf("Iceberg %d rows, want %d", len(recs), total)
	}
}

// deltaRowsByOffset indexes the Delta reader's rows by partition and
// offset, failing t on a row there twice, and returns the lookup of an
// Iceberg record's row.
func deltaRowsByOffset(t *testing.T, rows []delta.Row) func(*tributary.Record) (delta.Row, bool) {
	t.Helper()
	byPos := map[string]delta.Row{}
	for _, r := range rows {
		k := fmt.Sprint(r[tables.ColPartition], "@", r[tables.ColOffset])
		if _, dup := byPos[k]; dup {
			t.Fatalf("Delta has %s twice", k)
		}
		byPos[k] = r
	}
	return func(rec *tributary.Record) (delta.Row, bool) {
		r, ok := byPos[fmt.Sprint(int64(rec.Partition), "@", rec.Offset)]
		return r, ok
	}
}
