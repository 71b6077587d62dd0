package tables

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// FileMeta describes one uploaded data file: where it is and what it holds.
// It is all a committer needs, so the direct path (edge commits itself) and
// the coordinated path (edge hands it to the cloud server) share it.
type FileMeta struct {
	URL   string // full URL below the warehouse
	Size  int64
	Stats FileStats
}

// PartitionAppend is one partition's part of a commit: files covering the
// offsets [From, To) exactly, in order. To becomes the new high-water mark.
// Epoch is the ownership epoch all its records were accepted at (see
// Owners): an append whose epoch is below the table's is fenced.
type PartitionAppend struct {
	Partition int32
	From, To  int64
	Epoch     int64
	Files     []FileMeta
}

// StaleError says a partition's committed high-water mark is neither the
// start of an append nor past its end: the caller must re-read its source
// from HighWater and build the batch again.
type StaleError struct {
	Stream    string
	Partition int32
	HighWater int64
	From, To  int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("commit %s partition %d: high-water mark is %d, batch is [%d,%d)",
		e.Stream, e.Partition, e.HighWater, e.From, e.To)
}

func (e *StaleError) Unwrap() error { return ErrConflict }

// CommitResult reports what a commit did.
type CommitResult struct {
	Committed  []int32 // partitions whose append this call committed
	Already    []int32 // partitions already covered by the table's mark
	SnapshotID int64
	Attempts   int
}

// MaxCommitAttempts bounds the reload-check-commit loop of one CommitAppend.
const MaxCommitAttempts = 50

// CommitAppend adds the files of every append and advances their
// high-water marks in ONE Iceberg transaction (DESIGN.md "Exactly once"):
//
//	loop: reload the table; for each partition, if its mark already covers
//	the append, it is done; if the table's ownership epoch of the partition
//	is above the append's, the append is fenced (FencedError, nothing is
//	committed); if the mark is not the append's start, the batch is stale
//	(StaleError); otherwise commit data + marks together, requiring that
//	the branch head has not moved. On a conflict, or a failure that leaves
//	the outcome unknown, reload and decide again.
//
// Every data commit moves the main branch, and every commit asserts the
// head it was planned on, so two committers of one partition can never both
// append the same offsets.
func (c *Catalog) CommitAppend(ctx context.Context, stream string, appends []PartitionAppend, summary map[string]string) (CommitResult, error) {
	var res CommitResult
	var lastErr error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		res = CommitResult{Attempts: attempt}
		t, err := c.LoadTable(ctx, stream)
		if err != nil {
			return res, err
		}
		hw := HighWaters(t)
		owners := Owners(t)
		var todo []PartitionAppend
		for _, a := range appends {
			h := hw[a.Partition]
			if h < a.To {
				if err := fenced(stream, owners, a, h); err != nil {
					return res, err
				}
			}
			switch {
			case h >= a.To:
				res.Already = append(res.Already, a.Partition)
			case h == a.From:
				todo = append(todo, a)
			default:
				return res, &StaleError{Stream: stream, Partition: a.Partition, HighWater: h, From: a.From, To: a.To}
			}
		}
		if len(todo) == 0 {
			return res, nil
		}
		props := iceberg.Properties{}
		var dfs []iceberg.DataFile
		for _, a := range todo {
			props[PropHighWater+strconv.Itoa(int(a.Partition))] = strconv.FormatInt(a.To, 10)
			for _, f := range a.Files {
				// A file's name states the epoch it is committed under
				// (layout.go, invariant 4): it must be this append's.
				if o := FileOrigin(f.URL); !o.IsZero() && o.Epoch() != a.Epoch {
					return res, fmt.Errorf("commit %s partition %d: file %s is named for epoch %d, the append is at epoch %d", stream, a.Partition, f.URL, o.Epoch(), a.Epoch)
				}
				df, err := c.dataFile(t, f)
				if err != nil {
					return res, fmt.Errorf("commit %s: %w", stream, err)
				}
				dfs = append(dfs, df)
			}
		}
		snap := iceberg.Properties{"tributary.operation": "append"}
		for k, v := range summary {
			snap[k] = v
		}
		tx := t.NewTransaction()
		// A table that lacks an envelope column gets it in this commit:
		// the files carry it (see evolve.go).
		if _, err := evolve(tx, t); err != nil {
			return res, fmt.Errorf("commit %s: %w", stream, err)
		}
		if err := tx.AddDataFiles(ctx, dfs, snap, table.WithoutDuplicateCheck()); err != nil {
			return res, fmt.Errorf("commit %s: add files: %w", stream, err)
		}
		if err := tx.SetProperties(props); err != nil {
			return res, fmt.Errorf("commit %s: set marks: %w", stream, err)
		}
		nt, err := tx.Commit(ctx)
		if err == nil {
			for _, a := range todo {
				res.Committed = append(res.Committed, a.Partition)
			}
			if s := nt.CurrentSnapshot(); s != nil {
				res.SnapshotID = s.SnapshotID
			}
			c.remember(stream, nt)
			return res, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return res, fmt.Errorf("commit %s: %w", stream, ctx.Err())
		}
		// Conflict, or an unknown outcome: reload and decide again.
		if err := retryPause(ctx, attempt); err != nil {
			return res, fmt.Errorf("commit %s: %w", stream, err)
		}
	}
	return res, fmt.Errorf("commit %s: giving up after %d attempts: %w", stream, MaxCommitAttempts, lastErr)
}

// dataFile turns FileMeta into an Iceberg data file with exact statistics
// on partition, offset and timestamp, so that readers prune by offset.
func (c *Catalog) dataFile(t *table.Table, f FileMeta) (iceberg.DataFile, error) {
	spec := t.Spec()
	st := f.Stats
	g, err := GranularityOf(spec)
	if err != nil {
		return nil, err
	}
	partData := map[int]any{}
	if PartitionSource(spec) == FieldTimestamp {
		if g.Bucket(st.MinTimestamp) != g.Bucket(st.MaxTimestamp) {
			return nil, fmt.Errorf("%w: %s (%s %d to %d)", ErrSpansBuckets, f.URL, g, g.Bucket(st.MinTimestamp), g.Bucket(st.MaxTimestamp))
		}
		for _, pf := range spec.Fields() {
			partData[pf.FieldID] = g.partitionValue(st.MinTimestamp)
		}
	} else {
		// Partitioned by event time: a file's rows all have one bucket, or
		// all have none (null: payloads without one).
		var v any
		switch {
		case !st.EventTimes || st.NullEventTimes == st.Records:
		case st.NullEventTimes > 0:
			return nil, fmt.Errorf("%w: %s mixes rows with and without an event time", ErrSpansBuckets, f.URL)
		case g.Bucket(st.MinEventTime) != g.Bucket(st.MaxEventTime):
			return nil, fmt.Errorf("%w: %s (event time %s %d to %d)", ErrSpansBuckets, f.URL, g, g.Bucket(st.MinEventTime), g.Bucket(st.MaxEventTime))
		default:
			v = g.partitionValue(st.MinEventTime)
		}
		for _, pf := range spec.Fields() {
			partData[pf.FieldID] = v
		}
	}
	b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, f.URL, iceberg.ParquetFile,
		partData, nil, nil, st.Records, f.Size)
	if err != nil {
		return nil, err
	}
	lower, upper := map[int][]byte{}, map[int][]byte{}
	put := func(id int, lo, hi iceberg.Literal) error {
		l, err := lo.MarshalBinary()
		if err != nil {
			return err
		}
		h, err := hi.MarshalBinary()
		if err != nil {
			return err
		}
		lower[id], upper[id] = l, h
		return nil
	}
	if err := errors.Join(
		put(FieldPartition, iceberg.Int32Literal(st.Partition), iceberg.Int32Literal(st.Partition)),
		put(FieldOffset, iceberg.Int64Literal(st.FirstOffset), iceberg.Int64Literal(st.LastOffset)),
		put(FieldTimestamp, iceberg.TimestampLiteral(st.MinTimestamp), iceberg.TimestampLiteral(st.MaxTimestamp)),
	); err != nil {
		return nil, err
	}
	counts, nulls := map[int]int64{}, map[int]int64{}
	for _, id := range []int{FieldPartition, FieldOffset, FieldTimestamp, FieldTopic, FieldKey, FieldValue,
		FieldSource, FieldClientID, FieldNode, FieldProducerTimestamp, FieldPrincipal} {
		counts[id] = st.Records
		nulls[id] = 0
	}
	nulls[FieldKey] = st.NullKeys
	nulls[FieldProducerTimestamp] = st.NullProdTS
	nulls[FieldPrincipal] = st.NullPrincipals
	return b.LowerBoundValues(lower).UpperBoundValues(upper).ValueCounts(counts).NullValueCounts(nulls).Build(), nil
}

// HourOf returns the hour(timestamp) partition value of unix micros.
func HourOf(micros int64) int32 { return GranularityHour.Bucket(micros) }
