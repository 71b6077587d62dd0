package tables

import (
	"context"
	"path/filepath"
	"testing"
)

// TestMetadataLocations: one query answers each stream table's current
// metadata location, as LoadTable reads it; a REST catalog answers nil.
func TestMetadataLocations(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Open(ctx, Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "wh")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, s := range []string{"factory.telemetry", "plant.events"} {
		if _, err := c.EnsureTable(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AllocatePartition(ctx, "plant.events", "n1"); err != nil { // a commit moves the location
		t.Fatal(err)
	}
	locs, err := c.MetadataLocations(ctx)
	if err != nil || len(locs) != 2 {
		t.Fatalf("locations %v, %v", locs, err)
	}
	for s, loc := range locs {
		tbl, err := c.LoadTable(ctx, s)
		if err != nil || tbl.MetadataLocation() != loc {
			t.Fatalf("%s: location %q, LoadTable %q (%v)", s, loc, tbl.MetadataLocation(), err)
		}
	}
	if l, err := (&Catalog{}).MetadataLocations(ctx); l != nil || err != nil {
		t.Fatalf("without a database: %v %v", l, err)
	}
}
