package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
)

// TestRESTCatalogServesTables: the Iceberg REST catalog of `tributary dev`
// gives iceberg-go's REST client the stream's table, and a scan through it
// returns the rows MQTT published.
func TestRESTCatalogServesTables(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	cl, err := mqttClient(ctx, p.MQTT, "rest-check")
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	if _, err := publishN(ctx, cl, l, "rest-check", 0, 25); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "rows committed", func() bool { return walDrained(t, p) })
	cat, err := rest.NewCatalog(ctx, "tributary", "http://"+p.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	all := scanAll(t, tbl)
	checkRows(t, l, all)
	if len(all) != 25 {
		t.Fatalf("%d rows through the REST catalog, want 25", len(all))
	}
	p.stop()
}
