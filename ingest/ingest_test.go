package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// newTestIngest is an Ingest over a real WAL, catalog (SQLite) and
// owner book in a temporary directory.
func newTestIngest(t *testing.T, cfg Config) (*Ingest, *wal.WAL) {
	t.Helper()
	dir := t.TempDir()
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	w, err := wal.Open(wal.Options{Path: filepath.Join(dir, "wal.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cfg.Node = "edge-1"
	book := owner.New(cfg.Node, w, cat, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return New(cfg, w, book, cat), w
}

func rec(stream string) *tributary.Record {
	return &tributary.Record{Stream: stream, Topic: "t", Value: []byte("v"), Source: "mqtt"}
}

// stored is the number of records the WAL holds of stream's partitions.
func stored(w *wal.WAL, stream string) int64 {
	var n int64
	for _, p := range w.Partitions() {
		if p.Stream == stream {
			n += p.Next - p.Released
		}
	}
	return n
}

// TestAdmission: the dead-letter rule, auto-creation off (only the
// configured streams and existing ones), and the cap on streams a
// client's writes may create, sent the worst: many more new streams than
// the cap, of which only the cap's worth are created and nothing of the
// refused ones is stored.
func TestAdmission(t *testing.T) {
	ctx := context.Background()
	t.Run("dead letter", func(t *testing.T) {
		in, w := newTestIngest(t, Config{AutoCreate: true, Streams: []string{"a.b_dlq"}})
		for _, err := range []error{in.Append(ctx, tributary.WriteTo(-1, rec("a.b_dlq"))), in.Ensure(ctx, "a.b_dlq")} {
			if !errors.Is(err, tributary.ErrUnknownStream) {
				t.Fatalf("dead-letter stream: %v", err)
			}
		}
		if n := stored(w, "a.b_dlq"); n != 0 {
			t.Fatalf("%d dead-letter records stored", n)
		}
	})
	t.Run("no auto-creation", func(t *testing.T) {
		in, w := newTestIngest(t, Config{Streams: []string{"mqtt.default"}})
		if err := in.Append(ctx, tributary.WriteTo(-1, rec("plant.new"))); !errors.Is(err, tributary.ErrUnknownStream) {
			t.Fatalf("unknown stream: %v", err)
		}
		if err := in.Append(ctx, tributary.WriteTo(-1, rec("mqtt.default"))); err != nil {
			t.Fatalf("configured stream: %v", err)
		}
		if stored(w, "plant.new") != 0 || stored(w, "mqtt.default") != 1 {
			t.Fatalf("stored %d of the unknown stream, %d of the configured one", stored(w, "plant.new"), stored(w, "mqtt.default"))
		}
	})
	t.Run("cap", func(t *testing.T) {
		const max = 3
		in, w := newTestIngest(t, Config{AutoCreate: true, MaxStreams: max})
		created := 0
		for i := range 3 * max {
			s := fmt.Sprintf("plant.s%d", i)
			err := in.Append(ctx, tributary.WriteTo(-1, rec(s)))
			switch {
			case err == nil:
				created++
			case errors.Is(err, tributary.ErrStreamLimit):
				if stored(w, s) != 0 {
					t.Fatalf("%s refused at the cap but stored", s)
				}
			default:
				t.Fatal(err)
			}
		}
		if created != max {
			t.Fatalf("created %d streams, cap %d", created, max)
		}
		if err := in.Append(ctx, tributary.WriteTo(-1, rec("plant.s0"))); err != nil {
			t.Fatalf("an existing stream at the cap: %v", err)
		}
	})
}

// TestChosenPartition: a partition this node does not write is refused
// (ErrFenced) with nothing stored; its own is written.
func TestChosenPartition(t *testing.T) {
	ctx := context.Background()
	in, w := newTestIngest(t, Config{AutoCreate: true})
	own := rec("plant.line")
	if err := in.Append(ctx, tributary.WriteTo(-1, own)); err != nil {
		t.Fatal(err)
	}
	if err := in.Append(ctx, tributary.WriteTo(own.Partition+7, rec("plant.line"))); !errors.Is(err, tributary.ErrFenced) {
		t.Fatalf("a partition of nobody: %v", err)
	}
	if err := in.Append(ctx, tributary.WriteTo(own.Partition, rec("plant.line"))); err != nil {
		t.Fatalf("its own partition, chosen: %v", err)
	}
	if n := stored(w, "plant.line"); n != 2 {
		t.Fatalf("stored %d records, want 2", n)
	}
}

// TestDoneAfterSubmit: done is called exactly once and never from
// inside Submit (tributary.Appender), also when the WAL refuses the write inside the call
// (an invalid batch, a closed WAL); a write after a refused one is
// refused with ErrPredecessorFailed, at once or from done.
func TestDoneAfterSubmit(t *testing.T) {
	ctx := context.Background()
	in, w := newTestIngest(t, Config{AutoCreate: true})
	if err := in.Append(ctx, tributary.WriteTo(-1, rec("plant.line"))); err != nil {
		t.Fatal(err)
	}
	p, _, err := in.book.Own(ctx, "plant.line")
	if err != nil {
		t.Fatal(err)
	}
	submit := func(wr *tributary.Write, wait tributary.Wait) (tributary.Ticket, error, chan error) {
		var calls atomic.Int32
		got := make(chan error, 2)
		tk, err := in.Submit(ctx, wr, wait, func(err error) {
			// Called from inside Submit iff Submit is on done's stack
			// (a flag set after Submit returns races with a done that
			// rightly runs on the committer at that moment).
			buf := make([]byte, 64<<10)
			if st := string(buf[:runtime.Stack(buf, false)]); strings.Contains(st, "ingest.(*Ingest).Submit(") {
				t.Errorf("done called from inside Submit:\n%s", st)
			}
			if calls.Add(1) > 1 {
				t.Error("done called twice")
			}
			got <- err
		})
		return tk, err, got
	}
	batch := func(b []byte) *tributary.Write {
		return &tributary.Write{Batch: &tributary.Batch{Stream: "plant.line", Partition: p, Topic: "plant.line", Source: "kafka", Records: b}, Chosen: true}
	}
	good := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, kafkatest.Rec{Value: []byte("k1")}, kafkatest.Rec{Value: []byte("k2")})

	// A batch the WAL stores, counted.
	wr := batch(good)
	_, err, got := submit(wr, tributary.Durable)
	if err != nil || <-got != nil || wr.Batch.Offset != 1 {
		t.Fatalf("batch: %v, offset %d", err, wr.Batch.Offset)
	}
	// One the WAL refuses inside its call, and one chained after it.
	bad, err, got := submit(batch([]byte("not a batch")), tributary.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err == nil {
		t.Fatal("an invalid batch was stored")
	}
	wr = batch(good)
	wr.After = bad
	if _, err, got = submit(wr, tributary.Durable); err != nil || !errors.Is(<-got, tributary.ErrPredecessorFailed) {
		t.Fatalf("after a refused batch: %v", err)
	}
	// Refused before the WAL: the ticket still names it.
	wr = batch(good)
	wr.Batch.Partition = p + 7
	refusedAtOnce, err, _ := submit(wr, tributary.Durable)
	if !errors.Is(err, tributary.ErrFenced) {
		t.Fatalf("a partition of nobody: %v", err)
	}
	wr = batch(good)
	wr.After = refusedAtOnce
	if _, err, _ := submit(wr, tributary.Durable); !errors.Is(err, tributary.ErrPredecessorFailed) {
		t.Fatalf("after a write refused at once: %v", err)
	}
	// Queued records are counted once committed.
	if _, err, got := submit(tributary.WriteTo(-1, rec("plant.line")), tributary.Queued); err != nil || <-got != nil {
		t.Fatalf("queued: %v", err)
	}
	if cs := in.Counts(); len(cs) != 2 || cs[0].Messages+cs[1].Messages != 4 {
		t.Fatalf("counts %+v", cs)
	}
	// A closed WAL refuses inside its call.
	w.Close()
	for _, wait := range []tributary.Wait{tributary.Durable, tributary.Queued} {
		if _, err, got := submit(tributary.WriteTo(-1, rec("plant.line")), wait); err != nil || <-got == nil {
			t.Fatalf("wait %d: a closed WAL took a write (%v)", wait, err)
		}
	}
}

// TestRecordsTicket: the Ticket of a records write that follows none
// names it (tributary.Appender: "The Ticket names w"), so a write made
// after it is refused when the WAL refused it, and nothing of it is
// stored. The first write goes to a partition sealed above its epoch,
// which the WAL refuses in its committer (ErrFenced); the second, to
// another stream, would be stored on its own.
func TestRecordsTicket(t *testing.T) {
	ctx := context.Background()
	in, w := newTestIngest(t, Config{AutoCreate: true})
	p, epoch, err := in.book.Own(ctx, "plant.sealed")
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Apply(ctx, wal.Op{Kind: wal.OpSeal, Stream: "plant.sealed", Partition: p, Epoch: epoch + 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := in.Ensure(ctx, "plant.other"); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	tk, err := in.Submit(ctx, tributary.WriteTo(-1, rec("plant.sealed")), tributary.Durable, func(err error) { first <- err })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-first; !errors.Is(err, tributary.ErrFenced) {
		t.Fatalf("append to a sealed partition: %v", err)
	}
	second := make(chan error, 1)
	wr := tributary.WriteTo(-1, rec("plant.other"))
	wr.After = tk
	if _, err := in.Submit(ctx, wr, tributary.Durable, func(err error) { second <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, tributary.ErrPredecessorFailed) {
		t.Fatalf("after a refused records write: %v, want ErrPredecessorFailed", err)
	}
	if n := stored(w, "plant.other"); n != 0 {
		t.Fatalf("%d records stored after a refused predecessor", n)
	}
}
