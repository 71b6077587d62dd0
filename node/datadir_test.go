package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
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

// TestConsoleMaintenanceOn: with maintenance on, a stream's console card
// says so before the first pass over it (it said "off" for a minute).
func TestConsoleMaintenanceOn(t *testing.T) {
	cfg := Config{NodeID: "a", DataDir: t.TempDir()}
	cfg.MQTT.Addr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Maintenance.Interval = time.Hour
	ctx := context.Background()
	n, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: "a.b", Value: []byte("x"), Topic: "t", Source: "mqtt"}}}).Err; err != nil {
		t.Fatal(err)
	}
	s := n.consoleSnapshot()
	for _, st := range s.Streams {
		if st.Name == "a.b" {
			if st.Maintenance == nil || !st.Maintenance.LastPass.IsZero() {
				t.Fatalf("maintenance of a.b before its first pass: %+v", st.Maintenance)
			}
			return
		}
	}
	t.Fatalf("no stream a.b in %+v", s.Streams)
}
