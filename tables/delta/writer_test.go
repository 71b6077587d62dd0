package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parquet-go/parquet-go"
)

type testRow struct {
	ID   int64  `parquet:"id"`
	Name string `parquet:"name"`
}

var testSchema = &StructType{Type: "struct", Fields: []StructField{
	{Name: "id", Type: DataType{Primitive: "long"}, Nullable: false, Metadata: map[string]any{}},
	{Name: "name", Type: DataType{Primitive: "string"}, Nullable: true, Metadata: map[string]any{}},
}}

// writeFile writes rows [from, to) as a data file below the table root.
func writeFile(t *testing.T, root, rel string, from, to int64) File {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[testRow](&buf)
	for i := from; i < to; i++ {
		if _, err := w.Write([]testRow{{ID: i, Name: fmt.Sprint("n", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	st := Stats{NumRecords: to - from, MinValues: map[string]any{"id": from}, MaxValues: map[string]any{"id": to - 1}, NullCount: map[string]int64{"id": 0}}
	return File{Path: rel, Size: int64(buf.Len()), ModificationTime: 1, Stats: st.String()}
}

func TestAppendIdempotentWithCheckpoints(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tb := NewTable(DirStore{Root: root}, "")
	o := AppendOptions{Schema: testSchema, CheckpointInterval: 3}
	var next int64
	for i := 0; i < 8; i++ {
		f := writeFile(t, root, fmt.Sprintf("data/f-%d.parquet", i), next, next+5)
		res, err := tb.Append(ctx, []Append{{AppID: "s/0", From: next, To: next + 5, Files: []File{f}}}, o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Version != int64(i) || res.CheckpointErr != nil || res.Checkpoint != (i > 0 && i%3 == 0) {
			t.Fatalf("append %d: %+v", i, res)
		}
		// The same append again is already there: nothing is committed.
		again, err := tb.Append(ctx, []Append{{AppID: "s/0", From: next, To: next + 5, Files: []File{f}}}, o)
		if err != nil || again.Version != -1 || !slices.Equal(again.Already, []string{"s/0"}) {
			t.Fatalf("append %d again: %+v, %v", i, again, err)
		}
		next += 5
	}
	// A gap is stale: the caller must bring the log up first.
	var stale *StaleError
	if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: next + 1, To: next + 2}}, o); !errors.As(err, &stale) || stale.Version != next {
		t.Fatalf("gap: %v", err)
	}
	s, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Checkpoint != 6 || s.Commits != 1 || s.Version != 7 {
		t.Fatalf("checkpoint %d, %d commits after, version %d", s.Checkpoint, s.Commits, s.Version)
	}
	if v, _ := s.TxnVersion("s/0"); v != next {
		t.Fatalf("txn %d, want %d", v, next)
	}
	checkpointEqualsCommits(t, tb, s)
	rows, err := tb.Rows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, r := range rows {
		id := r["id"].(int64)
		if seen[id] || r["name"] != fmt.Sprint("n", id) {
			t.Fatalf("row %v twice or wrong", r)
		}
		seen[id] = true
	}
	if int64(len(seen)) != next {
		t.Fatalf("%d rows, want %d", len(seen), next)
	}
	// Cleanup keeps what replays from the checkpoint.
	if n, err := tb.Cleanup(ctx, 0); err != nil || n != 7 { // versions 0-5 and the version 3 checkpoint
		t.Fatalf("cleanup removed %d: %v", n, err)
	}
	if s2, err := tb.Snapshot(ctx); err != nil || !slices.Equal(s2.Paths(), s.Paths()) {
		t.Fatalf("after cleanup: %v", err)
	}
}

func TestAppendSchemaEvolves(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tb := NewTable(DirStore{Root: root}, "")
	narrow := &StructType{Type: "struct", Fields: testSchema.Fields[:1]}
	f := writeFile(t, root, "a.parquet", 0, 2)
	if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: 0, To: 2, Files: []File{f}}}, AppendOptions{Schema: narrow}); err != nil {
		t.Fatal(err)
	}
	g := writeFile(t, root, "b.parquet", 2, 4)
	if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: 2, To: 4, Files: []File{g}}}, AppendOptions{Schema: testSchema}); err != nil {
		t.Fatal(err)
	}
	s, err := tb.Snapshot(ctx)
	if err != nil || len(s.Schema.Fields) != 2 {
		t.Fatalf("schema %v, %v", s.Schema, err)
	}
	// A schema that drops or retypes a column is refused.
	other := &StructType{Type: "struct", Fields: []StructField{{Name: "id", Type: DataType{Primitive: "string"}}}}
	if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: 4, To: 5}}, AppendOptions{Schema: other}); !errors.Is(err, ErrSchema) {
		t.Fatalf("retyped schema: %v, want ErrSchema", err)
	}
}

func TestAppendRefusesWhatItCannotWrite(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tb := NewTable(DirStore{Root: root}, "")
	put := func(v int64, body string) {
		if err := tb.Store().PutIfAbsent(ctx, tb.logKey(CommitName(v)), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	put(0, `{"protocol":{"minReaderVersion":1,"minWriterVersion":7,"writerFeatures":["identityColumns"]}}`+"\n"+
		`{"metaData":{"id":"x","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":[],"configuration":{}}}`)
	if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: 0, To: 1}}, AppendOptions{Schema: testSchema}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("writer 7: %v, want ErrUnsupported", err)
	}
	put(1, `{"add":{"path":"x.parquet","size":1,`) // torn: a foreign writer's garbage
	if _, err := tb.Snapshot(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt entry: %v, want ErrCorrupt", err)
	}
	put(2, `{"sidecar":{"path":"x"}}`)
}

// Two writers of different appIds on one log: put-if-absent conflicts,
// each reloads and decides again; nothing is lost or doubled.
func TestAppendConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	const writers, rounds = 3, 12
	var wg sync.WaitGroup
	var conflicts atomic.Int64
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tb := NewTable(DirStore{Root: root}, "") // its own handle, as on its own node
			for r := 0; r < rounds; r++ {
				f := writeFile(t, root, fmt.Sprintf("data/w%d-%d.parquet", w, r), int64(w*1000+r*2), int64(w*1000+r*2+2))
				res, err := tb.Append(ctx, []Append{{AppID: fmt.Sprint("s/", w), From: int64(r * 2), To: int64(r*2 + 2), Files: []File{f}}}, AppendOptions{Schema: testSchema})
				if err != nil {
					errs <- err
					return
				}
				conflicts.Add(int64(res.Attempts - 1))
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tb := NewTable(DirStore{Root: root}, "")
	s, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != writers*rounds || s.Version != writers*rounds-1 {
		t.Fatalf("%d files at version %d, want %d", len(s.Files), s.Version, writers*rounds)
	}
	for w := 0; w < writers; w++ {
		if v, _ := s.TxnVersion(fmt.Sprint("s/", w)); v != rounds*2 {
			t.Fatalf("writer %d txn %d", w, v)
		}
	}
	rows, err := tb.Rows(ctx, s)
	if err != nil || len(rows) != writers*rounds*2 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	t.Logf("%d conflicts resolved", conflicts.Load())
}

func TestDirStorePutIfAbsentOneWinner(t *testing.T) {
	ctx := context.Background()
	d := DirStore{Root: t.TempDir()}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := d.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte(fmt.Sprint(i)))
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ErrExists):
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners", wins.Load())
	}
	if keys, _ := d.List(ctx, "_delta_log/"); len(keys) != 1 {
		t.Fatalf("log holds %v (temporary files left?)", keys)
	}
}

func TestStatsTimestampBounds(t *testing.T) {
	if got := StatsTimestamp(1_500, false); got != "1970-01-01T00:00:00.001Z" {
		t.Fatal(got)
	}
	if got := StatsTimestamp(1_500, true); got != "1970-01-01T00:00:00.002Z" {
		t.Fatal(got)
	}
	if got := StatsTimestamp(2_000, true); got != "1970-01-01T00:00:00.002Z" {
		t.Fatal(got)
	}
}
