package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRewriteReplacesInBothDirectionsOnce: a rewrite removes its inputs
// and adds its output with dataChange false, once; committed again it is
// a no-op; a rewrite whose inputs are partly gone commits nothing; the
// rows stay the same and the inputs stay referenced for the retention.
func TestRewriteReplacesInBothDirectionsOnce(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tb := NewTable(DirStore{Root: root}, "")
	var inputs []string
	for i := int64(0); i < 3; i++ {
		f := writeFile(t, root, fmt.Sprintf("data/in-%d.parquet", i), i*5, i*5+5)
		if _, err := tb.Append(ctx, []Append{{AppID: "s/0", From: i * 5, To: i*5 + 5, Files: []File{f}}}, AppendOptions{Schema: testSchema}); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, f.Path)
	}
	before, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowsBefore, err := tb.Rows(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	out := writeFile(t, root, "data/out.parquet", 0, 15)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	o := RewriteOptions{Now: func() time.Time { return now }, Configuration: map[string]string{"delta.logRetentionDuration": Interval(40 * 24 * time.Hour)}}
	res, err := tb.Rewrite(ctx, Rewrite{Remove: inputs, Add: []File{out}}, o)
	if err != nil || res.Version != 3 {
		t.Fatalf("rewrite: version %d, %v", res.Version, err)
	}
	s, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Paths(), []string{"data/out.parquet"}) || len(s.Tombstones) != 3 || s.Files["data/out.parquet"].DataChange {
		t.Fatalf("after the rewrite: live %v, %d tombstones", s.Paths(), len(s.Tombstones))
	}
	for _, r := range s.Tombstones {
		if r.DataChange || r.DeletionTimestamp == nil || *r.DeletionTimestamp != now.UnixMilli() {
			t.Fatalf("remove %+v", r)
		}
	}
	if LogRetention(s.Metadata) != 40*24*time.Hour || s.Metadata.ID != before.Metadata.ID || s.Metadata.SchemaString != before.Metadata.SchemaString {
		t.Fatalf("configuration %v", s.Metadata.Configuration)
	}
	rows, err := tb.Rows(ctx, s)
	if err != nil || len(rows) != len(rowsBefore) {
		t.Fatalf("%d rows after, %d before: %v", len(rows), len(rowsBefore), err)
	}
	// Again: in the log already.
	if res, err := tb.Rewrite(ctx, Rewrite{Remove: inputs, Add: []File{out}}, o); err != nil || res.Version != -1 {
		t.Fatalf("second rewrite: version %d, %v", res.Version, err)
	}
	// Inputs partly gone: refused, nothing committed.
	other := writeFile(t, root, "data/other.parquet", 0, 15)
	if _, err := tb.Rewrite(ctx, Rewrite{Remove: []string{"data/out.parquet", "data/in-0.parquet"}, Add: []File{other}}, o); !errors.Is(err, ErrRewriteStale) {
		t.Fatalf("stale rewrite: %v", err)
	}
	// Referenced: live and young tombstones; after the retention only the live file.
	if ref := s.Referenced(now, FileRetention(s.Metadata)); len(ref) != 4 {
		t.Fatalf("referenced %v", ref)
	}
	if ref := s.Referenced(now.Add(FileRetention(s.Metadata)+time.Millisecond), FileRetention(s.Metadata)); len(ref) != 1 || !ref["data/out.parquet"] {
		t.Fatalf("referenced after the retention %v", ref)
	}
}

// TestCleanupExpired: commits and checkpoints below the latest checkpoint
// go once older than the retention, and the log replays as before (txns
// included); younger ones stay.
func TestCleanupExpired(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tb := NewTable(DirStore{Root: root}, "")
	for i := int64(0); i < 8; i++ {
		f := writeFile(t, root, fmt.Sprintf("data/f-%d.parquet", i), i*5, i*5+5)
		if _, err := tb.Append(ctx, []Append{{AppID: fmt.Sprint("s/", i%2), From: i / 2 * 5, To: i/2*5 + 5, Files: []File{f}}},
			AppendOptions{Schema: testSchema, CheckpointInterval: 3}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := tb.Snapshot(ctx)
	if err != nil || want.Checkpoint != 6 {
		t.Fatalf("checkpoint %d: %v", want.Checkpoint, err)
	}
	now := time.Now()
	if n, err := tb.CleanupExpired(ctx, now, time.Hour); err != nil || n != 0 {
		t.Fatalf("young log: deleted %d, %v", n, err)
	}
	old := now.Add(-2 * time.Hour)
	for _, v := range []int64{0, 1, 2, 3, 7} {
		os.Chtimes(filepath.Join(root, "_delta_log", CommitName(v)), old, old)
	}
	os.Chtimes(filepath.Join(root, "_delta_log", CheckpointName(3)), old, old)
	n, err := tb.CleanupExpired(ctx, now, time.Hour)
	if err != nil || n != 5 { // commits 0-3 and checkpoint 3; 4 and 5 are young, 7 is above the checkpoint
		t.Fatalf("deleted %d, %v", n, err)
	}
	got, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Paths(), want.Paths()) || len(got.Txns) != 2 || got.Txns["s/0"].Version != want.Txns["s/0"].Version || got.Txns["s/1"].Version != want.Txns["s/1"].Version {
		t.Fatalf("after cleanup: %v %v, want %v %v", got.Paths(), got.Txns, want.Paths(), want.Txns)
	}
	for _, v := range []int64{4, 5, 6, 7} {
		if _, err := os.Stat(filepath.Join(root, "_delta_log", CommitName(v))); err != nil {
			t.Fatalf("commit %d: %v", v, err)
		}
	}
}
