package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
)

// TestDeltaMaintainBothLogs: an [iceberg, delta] stream written in
// several commits, then `tributary tables maintain` (compaction and
// snapshot expiry down to one snapshot): the Delta log records the
// rewrite (removes and a dataChange-false add) and lists exactly the
// Iceberg files again, by our reader and by an independent replay of the
// JSON commits; the Delta reader and the Iceberg scan agree row for row;
// every file either log still references exists; `tables scan --format
// delta` prints what the Iceberg scan prints, and describe shows the
// Delta txns beside the marks.
func TestDeltaMaintainBothLogs(t *testing.T) {
	dir := t.TempDir()
	p := deltaEdge(t, dir)
	const stream = "factory.telemetry"
	for i := 0; i < 4; i++ {
		publishPayloads(t, p.MQTT, fmt.Sprintf("dm-%d", i), jsonPayloads(`{"device":"m","a":%d}`, i*10, 10))
		waitRows(t, dir, stream, (i+1)*10)
	}
	waitDelta(t, dir, stream, 40)
	p.stop()
	ctx := context.Background()
	dt := deltaTable(dir, stream)
	before, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Files) < 2 {
		t.Fatalf("%d files before maintenance: nothing to compact", len(before.Files))
	}
	out, err := exec.Command(binPath, "tables", "maintain", stream, "--data", dir, "--snapshot-max-age", "1ms", "--retain-snapshots", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("tables maintain: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Delta log at version") {
		t.Errorf("tables maintain says nothing of the Delta log:\n%s", out)
	}
	s, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) >= len(before.Files) || len(s.Tombstones) < 2 {
		t.Fatalf("after maintenance: %d live files (%d before), %d removes\n%s", len(s.Files), len(before.Files), len(s.Tombstones), out)
	}
	for _, a := range s.Files {
		if a.DataChange {
			t.Fatalf("a compacted file's add has dataChange true: %+v", a)
		}
	}
	for _, r := range s.Tombstones {
		if r.DataChange || r.DeletionTimestamp == nil {
			t.Fatalf("a compaction's remove: %+v", r)
		}
	}
	root := filepath.Join(dir, "warehouse", "factory", "telemetry")
	for path := range s.Referenced(time.Now(), delta.FileRetention(s.Metadata)) {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
			t.Fatalf("a file the Delta log references is gone: %v", err)
		}
	}
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), stream, nil)
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Fatalf("%d Iceberg snapshots after expiry, want 1\n%s", n, out)
	}
	checkDeltaMatchesIceberg(t, tbl, root, stream)
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	recs := readTable(t, dir, stream)
	if len(rows) != 40 || len(recs) != 40 {
		t.Fatalf("Delta %d rows, Iceberg %d, want 40", len(rows), len(recs))
	}
	deltaRow := deltaRowsByOffset(t, rows)
	for _, rec := range recs {
		r, ok := deltaRow(rec)
		if !ok || string(r[tables.ColValue].([]byte)) != string(rec.Value) || r["a"] == nil {
			t.Fatalf("offset %d@%d: Delta row %v, Iceberg %q", rec.Offset, rec.Partition, r, rec.Value)
		}
	}
	scan := func(args ...string) string {
		out, err := exec.Command(binPath, append([]string{"tables", "scan", stream, "--data", dir, "--json", "--limit", "0"}, args...)...).Output()
		if err != nil {
			t.Fatalf("tables scan %v: %v", args, err)
		}
		return string(out)
	}
	if ice, dl := scan(), scan("--format", "delta"); ice != dl || strings.Count(dl, "\n") != 40 {
		t.Fatalf("tables scan:\n%s\ntables scan --format delta:\n%s", ice, dl)
	}
	desc, err := exec.Command(binPath, "tables", "describe", stream, "--data", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	for pt, h := range tables.HighWaters(tbl) {
		if want := fmt.Sprintf("%s: %d  iceberg %d\n", tables.DeltaAppID(stream, pt), h, h); !strings.Contains(string(desc), want) {
			t.Fatalf("describe lacks %q:\n%s", want, desc)
		}
	}
}

// TestDeltaTwoEdgesOneLog (issue 30, test 3): two edge nodes on one
// catalog and warehouse commit their partitions of one [iceberg, delta]
// stream to one Delta log at the same time, each put-if-absent of the
// next version racing the other's (the loser reloads and decides again):
// every version is written once (the commits are dense), both nodes'
// commits land, no file is lost or added twice, each partition's txn is
// its Iceberg mark, and the Delta reader gives the Iceberg rows exactly.
func TestDeltaTwoEdgesOneLog(t *testing.T) {
	shared := t.TempDir()
	const stream = "factory.telemetry"
	var nodes []*proc
	for _, id := range []string{"dl-1", "dl-2"} {
		dir := mkdir(t, filepath.Join(shared, id))
		nodes = append(nodes, startEdge(t, dir, deltaNodeConfig(t, dir, id, shared, 3)))
	}
	const rounds, per = 6, 15
	for round := range rounds {
		var wg sync.WaitGroup
		for i, p := range nodes {
			wg.Go(func() {
				publishPayloads(t, p.MQTT, fmt.Sprintf("dl%d", i), jsonPayloads(fmt.Sprintf(`{"device":"n%d","a":%%d}`, i), round*per, per))
			})
		}
		wg.Wait()
	}
	for _, p := range nodes {
		waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	}
	waitDelta(t, shared, stream, 2*rounds*per)
	for _, p := range nodes {
		p.stop()
	}
	ctx := context.Background()
	root := filepath.Join(shared, "warehouse", "factory", "telemetry")
	tbl := loadSQLiteTable(t, filepath.Join(shared, "catalog.db"), stream, nil)
	l := checkDeltaMatchesIceberg(t, tbl, root, stream) // dense versions, no file twice, txn = mark
	if len(l.Txns) != 2 {
		t.Fatalf("Delta txns %v: want one per node's partition", l.Txns)
	}
	engines := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(root, "_delta_log"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			raw, _ := os.ReadFile(filepath.Join(root, "_delta_log", e.Name()))
			for _, id := range []string{"dl-1", "dl-2"} {
				if strings.Contains(string(raw), `"engineInfo":"tributary/`+id+`"`) {
					engines[id] = true
				}
			}
		}
	}
	if len(engines) != 2 {
		t.Fatalf("commits by %v: want both nodes", engines)
	}
	dt := deltaTable(shared, stream)
	s, err := dt.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	recs := readTable(t, shared, stream)
	if len(rows) != 2*rounds*per || len(recs) != 2*rounds*per {
		t.Fatalf("Delta %d rows, Iceberg %d, want %d", len(rows), len(recs), 2*rounds*per)
	}
	deltaRow := deltaRowsByOffset(t, rows)
	for _, rec := range recs {
		r, ok := deltaRow(rec)
		if !ok || string(r[tables.ColValue].([]byte)) != string(rec.Value) {
			t.Fatalf("offset %d@%d: Delta row %v, Iceberg %q", rec.Offset, rec.Partition, r, rec.Value)
		}
	}
}
