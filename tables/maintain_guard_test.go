package tables

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// TestMaintainRefusesForeignLocation: a table whose location is not its own
// folder of the warehouse (the node's data directory, say) is never
// maintained, so nothing there is deleted as an orphan however old.
func TestMaintainRefusesForeignLocation(t *testing.T) {
	ctx := context.Background()
	c, dir := openTestCatalog(t)
	precious := filepath.Join(dir, "wal", "wal.db")
	if err := os.MkdirAll(filepath.Dir(precious), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(precious, []byte("acknowledged records"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(precious, old, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Iceberg().CreateNamespace(ctx, table.Identifier{"evil"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Iceberg().CreateTable(ctx, table.Identifier{"evil", "t"}, InitialSchema(),
		catalog.WithLocation("file://"+dir), catalog.WithProperties(iceberg.Properties{PropOrphanGraceMs: "1"})); err != nil {
		t.Fatal(err)
	}
	_, err := c.Maintain(ctx, "evil.t", MaintainOptions{})
	if !errors.Is(err, ErrForeignLocation) {
		t.Fatalf("maintain: %v, want ErrForeignLocation", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("data directory file gone: %v", err)
	}
	if err := NewMaintainer(c, MaintainerConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).RunOnce(ctx); err == nil {
		t.Fatal("maintainer pass over a foreign table reported no error")
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("data directory file gone after a maintainer pass: %v", err)
	}
}

// TestOrphanGraceFloor: a grace below MinOrphanGrace (a table property of
// 1 ms, or a policy of a second) is raised to the floor, so a recent
// upload is never taken for an orphan.
func TestOrphanGraceFloor(t *testing.T) {
	for _, p := range []struct {
		pol   Policy
		props map[string]string
	}{
		{Policy{}, map[string]string{PropOrphanGraceMs: "1"}},
		{Policy{OrphanGrace: time.Second}, nil},
	} {
		if got := p.pol.withDefaults(p.props).OrphanGrace; got != MinOrphanGrace {
			t.Errorf("policy %+v props %v: grace %s, want %s", p.pol, p.props, got, MinOrphanGrace)
		}
	}
	if got := (Policy{}).withDefaults(map[string]string{PropOrphanGraceMs: "7200000"}).OrphanGrace; got != 2*time.Hour {
		t.Errorf("grace above the floor: %s", got)
	}
}

// TestMaintainDeletesOnlyInsideTable: a client that could commit to the
// backing catalog (here straight to it, below any REST guard) shortens
// the history with the standard Iceberg keys and points a statistics file
// of an old snapshot at a file outside the warehouse, and turns gc off.
// The pass still expires the snapshot and deletes its manifest list in
// the table's folder, but refuses (and counts) the delete outside it: the
// victim survives.
func TestMaintainDeletesOnlyInsideTable(t *testing.T) {
	ctx := context.Background()
	c, dir := openTestCatalog(t)
	const stream = "factory.telemetry"
	victim := filepath.Join(dir, "victim.txt")
	if err := os.WriteFile(victim, []byte("not the table's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		f := writeFile(t, c, stream, testRecords(0, i*3, 3, time.Now().UnixMilli()))
		if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: int64(i * 3), To: int64(i*3 + 3), Files: []FileMeta{f}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	old := tb.Metadata().Snapshots()[0]
	id, _ := ident(stream)
	if _, _, err := c.Iceberg().CommitTable(ctx, id, nil, []table.Update{
		table.NewSetPropertiesUpdate(iceberg.Properties{PropSnapshotMaxAgeMs: "1", PropRetainSnapshots: "1", table.GCEnabledKey: "false"}),
		table.NewSetStatisticsUpdate(table.StatisticsFile{SnapshotID: old.SnapshotID, StatisticsPath: "file://" + victim,
			FileSizeInBytes: 15, BlobMetadata: []table.BlobMetadata{}}),
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // older than the 1 ms the pass keeps
	res, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 1, Holder: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.SnapshotsExpired == 0 {
		t.Fatalf("nothing expired: %+v", res)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("file outside the warehouse deleted by maintenance: %v", err)
	}
	if res.DeletesRefused == 0 || len(res.RefusedPaths) == 0 || res.RefusedPaths[0] != "file://"+victim {
		t.Fatalf("refusal not counted: %d %v", res.DeletesRefused, res.RefusedPaths)
	}
	key, err := c.KeyOf(old.ManifestList)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Warehouse()[len("file://"):], key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the expired snapshot's own manifest list was not deleted: %v", err)
	}
}

// TestHistoryFloors: history.expire.* in a table's properties may keep
// more history than the node's policy, never less.
func TestHistoryFloors(t *testing.T) {
	pol := Policy{SnapshotMaxAge: time.Hour, RetainSnapshots: 50}
	got := pol.withDefaults(map[string]string{PropSnapshotMaxAgeMs: "1", PropRetainSnapshots: "1"})
	if got.SnapshotMaxAge != time.Hour || got.RetainSnapshots != 50 {
		t.Errorf("shortened by the table: %s, %d", got.SnapshotMaxAge, got.RetainSnapshots)
	}
	got = pol.withDefaults(map[string]string{PropSnapshotMaxAgeMs: "7200000", PropRetainSnapshots: "80"})
	if got.SnapshotMaxAge != 2*time.Hour || got.RetainSnapshots != 80 {
		t.Errorf("lengthened by the table: %s, %d", got.SnapshotMaxAge, got.RetainSnapshots)
	}
}

func TestInFolder(t *testing.T) {
	const f = "s3://bucket/wh/ns/t"
	for p, want := range map[string]bool{
		f + "/data/a.parquet":                true,
		f + "/metadata/snap-1.avro":          true,
		f:                                    false,
		f + "x/data/a.parquet":               false,
		f + "/../u/data/a.parquet":           false,
		f + "/data/%2e%2e/%2e%2e/x":          false,
		f + "/./data/a":                      false,
		f + "//data/a":                       false,
		"s3://other/wh/ns/t/data/a.parquet":  false,
		"gs://bucket/wh/ns/t/data/a.parquet": false,
		"/wh/ns/t/data/a.parquet":            false,
		f + "/data/a?x=1":                    false,
		f + `/data\..\..\x`:                  false,
	} {
		if got := InFolder(f, p); got != want {
			t.Errorf("InFolder(%s): %v, want %v", p, got, want)
		}
	}
	if !InFolder("file:///tmp/wh/ns/t/", "file:///tmp/wh/ns/t/data/x") || !InFolder("file:///tmp/wh/ns/t", "/tmp/wh/ns/t/data/x") ||
		InFolder("file:///tmp/wh/ns/t", "/tmp/wh/ns/u/data/x") || InFolder("file:///tmp/wh/ns/t", "/tmp/wh/ns/t/../u/x") ||
		InFolder("file:///tmp/wh/ns/t", "tmp/wh/ns/t/data/x") || InFolder("file://host/tmp/wh/ns/t", "/tmp/wh/ns/t/data/x") {
		t.Error("file URLs and local paths")
	}
}

// TestNewestMirrorMetadataKept: among orphan candidates, the newest
// metadata file an external catalog wrote for the table's mirror
// (package federation; SeaweedFS names them vN.metadata.json) is kept,
// older ones and Tributary's own unreferenced files are not.
func TestNewestMirrorMetadataKept(t *testing.T) {
	loc := "s3://lake/factory/telemetry"
	files := []table.OrphanFile{{Path: loc + "/metadata/v9.metadata.json"}, {Path: loc + "/metadata/v10.metadata.json"},
		{Path: loc + "/metadata/00003-6f1c.metadata.json"}, {Path: loc + "/data/v11.metadata.json.parquet"}, {Path: loc + "/metadata/v2.metadata.json"}}
	if got := newestMirrorMetadata(files); got != loc+"/metadata/v10.metadata.json" {
		t.Fatalf("kept %q, want v10", got)
	}
	if got := newestMirrorMetadata(files[2:4]); got != "" {
		t.Fatalf("kept %q of files no mirror wrote", got)
	}
}
