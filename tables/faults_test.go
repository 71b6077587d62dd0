package tables

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/fault"
)

// TestCommitAppendUnderCatalogFaults: whatever the catalog does to one
// commit (fails it, applies it and loses the reply, stalls it past the
// caller's deadline, fails the reload), CommitAppend either commits the
// append once or reports an error with nothing committed, and a retry of
// the same append leaves its offsets in the table exactly once.
func TestCommitAppendUnderCatalogFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inject  func(fc *fault.Catalog) (release func())
		wantErr error // of the first CommitAppend; nil: it succeeds
	}{
		{"commit fails", func(fc *fault.Catalog) func() { fc.Commits.FailNext(1); return nil }, nil},
		{"commit applied, reply lost", func(fc *fault.Catalog) func() { fc.Commits.FailAfterApplyNext(1); return nil }, nil},
		{"commit stalls past the deadline", func(fc *fault.Catalog) func() { return fc.Commits.Stall() }, context.DeadlineExceeded},
		{"reload fails", func(fc *fault.Catalog) func() { fc.Loads.FailNext(1); return nil }, fault.ErrInjected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cfg := Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")}
			base, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			fc := &fault.Catalog{Catalog: base.Iceberg()}
			c := Wrap(cfg, fc)
			const stream = "fault.s"
			if _, err := c.EnsureTable(ctx, stream); err != nil {
				t.Fatal(err)
			}
			recs := testRecords(0, 0, 20, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro())
			a := PartitionAppend{Partition: 0, From: 0, To: 20, Files: []FileMeta{putFile(t, c, stream, recs)}}
			release := tc.inject(fc)
			// The deadline matters only to the stalled commit; the others
			// must not fail for a slow machine.
			deadline := 30 * time.Second
			if tc.wantErr == context.DeadlineExceeded {
				deadline = 300 * time.Millisecond
			}
			cctx, cancel := context.WithTimeout(ctx, deadline)
			res, err := c.CommitAppend(cctx, stream, []PartitionAppend{a}, nil)
			cancel()
			if release != nil {
				release()
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("first commit: %v (%+v), want %v", err, res, tc.wantErr)
			}
			if err != nil {
				tbl, lerr := base.LoadTable(ctx, stream)
				if lerr != nil {
					t.Fatal(lerr)
				}
				if hw := HighWater(tbl, 0); hw != 0 {
					t.Fatalf("failed commit left mark %d", hw)
				}
				if res, err = c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil {
					t.Fatalf("retry: %v", err)
				}
			}
			if !slices.Equal(append(res.Committed, res.Already...), []int32{0}) {
				t.Fatalf("result %+v", res)
			}
			// Again: recognised as done.
			if res, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil); err != nil || !slices.Equal(res.Already, []int32{0}) {
				t.Fatalf("recommit: %v %+v", err, res)
			}
			checkTable(t, base, stream, recs)
			calls, failed, lost := fc.Commits.Counts()
			t.Logf("commits: %d calls, %d failed, %d applied with the reply lost", calls, failed, lost)
		})
	}
}
