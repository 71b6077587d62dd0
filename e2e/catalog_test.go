package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
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
	all := readTableREST(t, p.Catalog, "factory.telemetry")
	checkRows(t, l, all)
	if len(all) != 25 {
		t.Fatalf("%d rows through the REST catalog, want 25", len(all))
	}
	p.stop()
}

// readTableREST reads a stream's table through an Iceberg REST catalog
// with iceberg-go's REST client.
func readTableREST(t *testing.T, addr, stream string) []*tributary.Record {
	t.Helper()
	return readTableURI(t, "http://"+addr, stream)
}

// readTableURI is readTableREST on a catalog URI, with iceberg-go's REST
// catalog options (rest.WithTLSConfig for https://).
func readTableURI(t *testing.T, uri, stream string, opts ...rest.Option) []*tributary.Record {
	t.Helper()
	ctx := context.Background()
	cat, err := rest.NewCatalog(ctx, "tributary", uri, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ns, name, _ := strings.Cut(stream, ".")
	tbl, err := cat.LoadTable(ctx, table.Identifier{ns, name})
	if err != nil {
		t.Fatal(err)
	}
	return scanAll(t, tbl)
}
