package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink"
)

// TestGCSMaintenance and TestAzureMaintenance: a maintenance pass on a table
// whose warehouse is on each emulator compacts the edge's small files into
// one (rows unchanged, read back through the store's FileIO), and orphan
// cleanup lists the store and keeps a fresh unreferenced file (an upload in
// progress; the grace cannot be under 1h, so deleting an old one is proven
// on file:// by tables.TestOrphanCleanup).
func TestGCSMaintenance(t *testing.T) {
	endpoint := startFakeGCS(t)
	storeMaintain(t, "gs://"+gcsBucket+"/warehouse", gcsStorage(endpoint), gcsProps(endpoint),
		tables.StoreOptions{GCS: tables.GCSOptions{Endpoint: endpoint, Anonymous: true}})
}

func TestAzureMaintenance(t *testing.T) {
	endpoint := startAzurite(t)
	storeMaintain(t, "abfss://"+azContainer+"@"+azAccount+".dfs.core.windows.net/warehouse", azureStorage(endpoint),
		azureProps(endpoint), tables.StoreOptions{Azure: tables.AzureOptions{Endpoint: endpoint, Key: azKey}})
}

func storeMaintain(t *testing.T, warehouse, storage string, props map[string]string, stores tables.StoreOptions) {
	dir := t.TempDir()
	cfg := edgeConfig(t, dir, "store-maint", fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: %s\n%s", dir, warehouse, storage))
	p := startEdge(t, dir, cfg)
	ctx := context.Background()
	mc, err := mqttClient(ctx, p.MQTT, "maint-mqtt")
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	for i := range 4 { // four commits, four small files
		if _, err := publishN(ctx, mc, l, "maint-mqtt", i*50, 50); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, fmt.Sprintf("%d rows", (i+1)*50), func() bool {
			return len(readTableProps(t, dir, "factory.telemetry", props)) >= (i+1)*50
		})
	}
	mc.Disconnect(&paho.Disconnect{})
	p.stop()

	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + dir + "/catalog.db", Warehouse: warehouse, Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	b, err := uplink.OpenBucket(ctx, warehouse, stores)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	orphan := "factory/telemetry/data/upload-in-progress.parquet"
	if err := b.WriteAll(ctx, orphan, []byte("not yet committed")); err != nil {
		t.Fatal(err)
	}
	res, err := cat.Maintain(ctx, "factory.telemetry", tables.MaintainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactInputs < 4 || res.CompactGroups != 1 {
		t.Fatalf("compaction replaced %d files by %d, want >= 4 by 1: %+v", res.CompactInputs, res.CompactGroups, res)
	}
	if res.OrphansFound != 0 {
		t.Fatalf("%d orphans found, want 0 (the unreferenced file is fresh): %+v", res.OrphansFound, res)
	}
	if ok, err := b.Bucket().Exists(ctx, orphan); err != nil || !ok {
		t.Fatalf("fresh unreferenced file gone: %v %v", ok, err)
	}
	rows := readTableProps(t, dir, "factory.telemetry", props)
	if len(rows) != 200 {
		t.Fatalf("%d rows after compaction, want 200", len(rows))
	}
	checkDense(t, rows)
	checkRows(t, l, rows)
	t.Logf("compacted %d files into %d; %d snapshots expired", res.CompactInputs, res.CompactGroups, res.SnapshotsExpired)
}
