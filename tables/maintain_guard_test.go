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
