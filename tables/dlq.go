package tables

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
)

// Dead-letter tables: <namespace>.<stream>_dlq holds, for a stream with
// typed columns, every record whose payload is not typed (not JSON, not
// an object, a type conflict, too deep, …): the envelope exactly as in the
// stream table, the error and the schema id it was checked against.
//
// Invariants:
//
//   - Exactly once, by the same mark. The table has its own high-water
//     mark per partition of the stream (tributary.hwm.<p>): every offset
//     below it whose payload is not typed is in the table once. A commit of
//     the dead letters of [from, to) adds only those at or above the mark
//     and moves it to to, in one transaction; a conflict reloads and
//     decides again. The uplink commits a batch's dead letters before the
//     batch itself, so a crash in between leaves the batch to be redone and
//     its dead letters already in (skipped by the mark).
//   - The stream table is the record of truth: the dead-letter row is an
//     addition, never instead of the envelope row.
//   - Files hold increasing, not consecutive, offsets of one partition: the
//     dead-letter table is for SQL (Kafka and Pulsar consumers read the
//     stream table), and compaction leaves it alone.

// DeadLetter is one record whose payload is not typed, with why.
type DeadLetter struct {
	Record        *tributary.Record
	Error         string
	SchemaVersion int32
}

var dlqPlan = mustPlan(iceberg.NewSchemaWithIdentifiers(0, []int{FieldPartition, FieldOffset},
	append(EnvelopeSchema().Fields(), dlqColumns()...)...))

// WriteDeadLetters encodes dead letters of one partition, by increasing
// offset, as a Parquet file of the dead-letter table's schema.
func WriteDeadLetters(w *bytes.Buffer, dls []DeadLetter) (FileStats, error) {
	recs := make([]*tributary.Record, len(dls))
	for i, d := range dls {
		recs[i] = d.Record
	}
	return ParquetOptions{}.write(w, dlqPlan, pqRows{recs: recs, dls: dls}, false)
}

// CommitDeadLetters adds to stream's dead-letter table those of dls (the
// dead letters of offsets [from, to) of partition p, by offset) that its
// mark does not cover yet, and moves the mark to to. It returns how many
// it added. Files are named for origin o.
func (c *Catalog) CommitDeadLetters(ctx context.Context, stream string, p int32, to int64, o Origin, dls []DeadLetter) (int, error) {
	dstream := DLQStream(stream)
	var lastErr error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		t, err := c.EnsureTable(ctx, dstream)
		if err != nil {
			return 0, err
		}
		h := HighWater(t, p)
		if h >= to {
			return 0, nil
		}
		var todo []DeadLetter
		for _, d := range dls {
			if d.Record.Offset >= h && d.Record.Offset < to {
				todo = append(todo, d)
			}
		}
		g, err := GranularityOf(t.Spec())
		if err != nil {
			return 0, fmt.Errorf("commit %s: %w", dstream, err)
		}
		fs, err := t.FS(ctx)
		if err != nil {
			return 0, fmt.Errorf("commit %s: %w", dstream, err)
		}
		wfs, ok := fs.(interface{ WriteFile(string, []byte) error })
		if !ok {
			return 0, fmt.Errorf("commit %s: table file system cannot write", dstream)
		}
		var dfs []iceberg.DataFile
		for _, run := range cutDeadLetters(g, todo) {
			var buf bytes.Buffer
			st, err := WriteDeadLetters(&buf, run)
			if err != nil {
				return 0, fmt.Errorf("commit %s: %w", dstream, err)
			}
			url := DataFileURL(t.Location(), st, o)
			if err := wfs.WriteFile(url, buf.Bytes()); err != nil {
				return 0, fmt.Errorf("commit %s: write %s: %w", dstream, url, err)
			}
			df, err := c.dataFile(t, FileMeta{URL: url, Size: int64(buf.Len()), Stats: st})
			if err != nil {
				return 0, fmt.Errorf("commit %s: %w", dstream, err)
			}
			dfs = append(dfs, df)
		}
		tx := t.NewTransaction()
		if len(dfs) > 0 {
			if err := tx.AddDataFiles(ctx, dfs, iceberg.Properties{"tributary.operation": "dead-letters"}, table.WithoutDuplicateCheck()); err != nil {
				return 0, fmt.Errorf("commit %s: add files: %w", dstream, err)
			}
		}
		if err := tx.SetProperties(iceberg.Properties{PropHighWater + strconv.Itoa(int(p)): strconv.FormatInt(to, 10)}); err != nil {
			return 0, fmt.Errorf("commit %s: set mark: %w", dstream, err)
		}
		nt, err := tx.Commit(ctx)
		if err == nil {
			c.remember(dstream, nt)
			return len(todo), nil
		}
		lastErr = err // the files written are orphans for maintenance
		if err := retryPause(ctx, attempt); err != nil {
			return 0, fmt.Errorf("commit %s: %w", dstream, err)
		}
	}
	return 0, fmt.Errorf("commit %s: giving up after %d attempts: %w", dstream, MaxCommitAttempts, lastErr)
}

// cutDeadLetters cuts dls at the table's partition buckets, as CutRuns
// cuts records.
func cutDeadLetters(g Granularity, dls []DeadLetter) [][]DeadLetter {
	return cutRuns(dls, func(d DeadLetter) int64 { return int64(g.Bucket(d.Record.Timestamp)) })
}
