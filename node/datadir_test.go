package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/wal"
)

// TestDataDirHeld: a second node on a data directory another one holds
// fails saying so, naming the directory, instead of "open wal: timeout".
func TestDataDirHeld(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{NodeID: "a", DataDir: dir}
	ctx := context.Background()
	first, err := New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(ctx)
	_, err = New(ctx, cfg, nil)
	if err == nil || !errors.Is(err, wal.ErrLocked) || !strings.Contains(err.Error(), "another process holds DATA_DIR ("+dir+")") {
		t.Fatalf("second node on %s: %v", dir, err)
	}
}
