package uplink

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
)

// failAfterDLQ fails the first n CommitAppends, after the dead letters of
// the batch were committed: the crash between the two commits.
type failAfterDLQ struct {
	Committer
	fail atomic.Int32
}

var errInjected = errors.New("injected: catalog gone after the dead letters")

func (c *failAfterDLQ) CommitAppend(ctx context.Context, stream string, a []tables.PartitionAppend, s map[string]string) (tables.CommitResult, error) {
	if c.fail.Add(-1) >= 0 {
		return tables.CommitResult{}, errInjected
	}
	return c.Committer.CommitAppend(ctx, stream, a, s)
}

// TestTypedDeadLettersOnce: a typed stream's batch whose dead letters are
// committed but whose own commit fails is redone by the next pass (with
// more records by then): the stream table has every record once, the
// dead-letter table every dead letter once, and the counters count each
// once.
func TestTypedDeadLettersOnce(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	fc := &failAfterDLQ{Committer: e.cat}
	fc.fail.Store(2)
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: t.TempDir(),
		Payloads: map[string]typed.Policy{stream: {Mode: typed.Infer}}}, e.wal, fc, e.bucket)
	want := appendVals(t, e.wal, stream, p, 0, "bad", 3) // not JSON: dead letters
	for range 2 {
		if err := u.SyncAll(ctx); !errors.Is(err, errInjected) {
			t.Fatalf("pass: %v", err)
		}
		want = append(want, appendVals(t, e.wal, stream, p, 0, "worse", 2)...)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, e.cat, stream, map[int32][][]byte{p: want})
	dl, err := e.cat.ScanSorted(ctx, tables.DLQStream(stream), tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dl), len(want))
	}
	for i, r := range dl {
		if r.Offset != int64(i) || string(r.Value) != string(want[i]) {
			t.Fatalf("dead letter %d: offset %d value %q", i, r.Offset, r.Value)
		}
	}
	if st := u.Stats(); st.DeadLetters[stream] != int64(len(want)) {
		t.Errorf("Stats.DeadLetters = %v, want %d", st.DeadLetters, len(want))
	}
}

// syncBuffer is a log destination safe for the uplink's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDeadLettersExplained: committed dead letters are logged with the
// stream, the offset and the reason — one line per stream at most every
// DeadLetterLogEvery — and the latest are in Stats with their reasons.
func TestDeadLettersExplained(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const stream = "f.s"
	p, _ := e.cat.AllocatePartition(ctx, stream, "n1")
	var logs syncBuffer
	u := New(Config{Node: "n1", Logger: slog.New(slog.NewTextHandler(&logs, nil)), QuarantineDir: t.TempDir(),
		Payloads: map[string]typed.Policy{stream: {Mode: typed.Infer}}}, e.wal, e.cat, e.bucket)
	appendVals(t, e.wal, stream, p, 0, "bad", 2)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(logs.String(), "dead letter")
	if lines != 1 || !strings.Contains(logs.String(), "stream=f.s") || !strings.Contains(logs.String(), "offset=0") ||
		!strings.Contains(logs.String(), "reason=") || !strings.Contains(logs.String(), "not JSON") || !strings.Contains(logs.String(), "more_not_logged=1") {
		t.Fatalf("log:\n%s", logs.String())
	}
	appendVals(t, e.wal, stream, p, 0, "worse", 1)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "dead letter"); n != 1 {
		t.Errorf("%d log lines within %s, want 1:\n%s", n, DeadLetterLogEvery, logs.String())
	}
	notes := u.Stats().LatestDeadLetters
	if len(notes) != 3 || notes[0].Offset != 2 || notes[2].Offset != 0 || notes[0].Stream != stream || !strings.Contains(notes[0].Error, "not JSON") {
		t.Fatalf("latest dead letters %+v", notes)
	}
}
