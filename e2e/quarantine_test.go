package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/uplink/quarantine"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// TestQuarantineStaleReplay: records that a take-over moves out of a
// node's WAL (a node taking back a partition it lost, whose WAL still
// holds records of its earlier ownership: owner.Book.Claim) are not
// dropped silently: `tributary quarantine list` shows them with the
// reason, and `tributary quarantine replay` produces them again to their
// stream through an edge node's Kafka listener, byte for byte.
func TestQuarantineStaleReplay(t *testing.T) {
	ctx := context.Background()
	old := t.TempDir() // the data directory of the node that lost its partition
	w, err := wal.Open(wal.Options{Path: filepath.Join(old, "wal.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(old, "catalog.db"), Warehouse: "file://" + filepath.Join(old, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	book := owner.New("a", w, cat, slog.New(slog.NewTextHandler(io.Discard, nil)))
	book.UseQuarantine(quarantine.New(filepath.Join(old, "quarantine")))
	const stream = "plant.quarantined"
	p, epoch, err := book.Own(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range 5 {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("stale-%d", i)
		want[k] = v
		if err := w.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{{Stream: stream, Partition: p, Epoch: epoch, Topic: stream, Source: "kafka",
			Key: []byte(k), Value: []byte(v), Headers: []tributary.Header{{Key: "h", Value: []byte(k)}}}}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cat.TakeOver(ctx, stream, p, "a", "b"); err != nil {
		t.Fatal(err)
	}
	book.Fenced(stream, p)
	book.Claim(stream, p)() // a takes it back: its stale records leave the WAL
	if st, ok := w.Partition(stream, p); ok && st.Next > st.Released {
		t.Fatalf("stale records still in the WAL: %+v", st)
	}

	out, err := exec.Command(binPath, "quarantine", "list", "--data", old).CombinedOutput()
	if err != nil {
		t.Fatalf("quarantine list: %v\n%s", err, out)
	}
	if !bytes.Contains(out, fmt.Appendf(nil, "stream %s partition %d offsets 0-4 (5 records)", stream, p)) || !bytes.Contains(out, []byte("reason: stale")) {
		t.Fatalf("quarantine list:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(old, "quarantine", "*"+quarantine.FileSuffix))
	if len(files) != 1 {
		t.Fatalf("quarantine files %v", files)
	}

	dir := t.TempDir()
	dev := startDev(t, dir)
	out, err = exec.Command(binPath, "quarantine", "replay", "--data", old, "--kafka", dev.Kafka, files[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "5 records replayed") {
		t.Fatalf("quarantine replay: %v\n%s", err, out)
	}
	dev.stop()
	rows := readTable(t, dir, stream)
	if len(rows) != 5 {
		t.Fatalf("%d rows after the replay, want 5", len(rows))
	}
	for _, r := range rows {
		if want[string(r.Key)] != string(r.Value) || len(r.Headers) != 1 || string(r.Headers[0].Value) != string(r.Key) {
			t.Fatalf("replayed row %+v", r)
		}
		delete(want, string(r.Key))
	}
}
