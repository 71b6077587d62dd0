package tables

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/tables/delta"
)

// A stream with formats [iceberg, delta] has a second log over the same
// data files: a Delta Lake table at <table location>/_delta_log/
// (package delta). Iceberg is the log of record; the Delta log follows it.
//
// Invariants:
//
//  1. The Delta side of the exactly-once mark is a txn action per
//     partition, appId "<stream>/<partition>", version the partition's
//     next offset — the Iceberg high-water mark it has caught up to.
//  2. The Delta log is brought up to the Iceberg table, never the other
//     way: SyncDelta adds, for every partition whose txn is behind its
//     Iceberg mark, exactly the Iceberg data files holding the offsets in
//     between, with the txn, in one put-if-absent commit. A crash between
//     the Iceberg commit and the Delta one leaves the Delta log behind;
//     the next SyncDelta (the uplink's next pass, after a restart too)
//     adds the same files then — and never a file twice, since the txn
//     says what is in and a live path is refused.
//  3. A Delta log that cannot be written (corrupt, a protocol this
//     writer does not implement, a schema that disagrees with the
//     Iceberg table's) is an error of SyncDelta alone: the uplink logs
//     it, counts it, and keeps committing to Iceberg; nothing is lost.
//  4. Partitioning: the Delta table is unpartitioned. Tributary's files
//     hold no day or hour column (the Iceberg spec derives the day or
//     hour from timestamp or event_time by a transform, which Delta has
//     no equivalent of without a generated column the files would have
//     to carry); every file lies in one bucket, and its add's stats give
//     min and max of timestamp, so a Delta reader skips files by time as
//     well as by a partition.
//  5. Rewrites (compaction) go to Iceberg first, then to the Delta log as
//     a remove + add with dataChange false (deltamaint.go). A Delta log
//     that missed one (a crash between the two commits) learns of it by
//     a diff, before any append: a Delta-live file the Iceberg snapshot
//     no longer lists is removed, and an Iceberg file the Delta log lacks
//     whose offsets lie wholly below its partition's Delta txn (so not an
//     append still to sync) is added — in one commit, only when the rows
//     removed and added agree per partition, and never a file twice
//     (delta.Table.Rewrite is idempotent). The Iceberg snapshot is loaded
//     after the Delta one, so the diff never undoes a newer rewrite.
//  6. Dead-letter tables of an [iceberg, delta] stream get their own
//     Delta log, by their own marks: a partition's files are those whose
//     offsets lie in the range the txn lacks (increasing, not
//     consecutive), possibly none.

// DeltaOptions tunes SyncDelta.
type DeltaOptions struct {
	// CheckpointInterval: a Parquet checkpoint every this many versions
	// (default 10).
	CheckpointInterval int64
	// Node goes into commitInfo's engineInfo.
	Node string
	// Now is the clock (tests).
	Now func() time.Time
}

// DeltaSync reports what SyncDelta did.
type DeltaSync struct {
	Version    int64 // the Delta log's version after the sync
	Committed  bool  // a commit was made
	Files      int   // files added
	Checkpoint bool
	Behind     int64 // offsets the Delta log is behind Iceberg after the sync (0 when caught up)
}

// DeltaAppID is the Delta txn appId of a stream's partition.
func DeltaAppID(stream string, p int32) string { return stream + "/" + strconv.Itoa(int(p)) }

// DeltaRoot is the store key of a stream's table root (the Delta table's root).
func (c *Catalog) DeltaRoot(stream string) (string, error) {
	return c.KeyOf(c.TableLocation(stream))
}

// SyncDelta brings the Delta log of stream (in st, the warehouse's
// store) up to its Iceberg table (see the invariants above). hint are
// the appends just committed to Iceberg: their files (with exact stats)
// are used when they are exactly what a partition lacks; otherwise the
// files are read from the Iceberg table's current snapshot.
func (c *Catalog) SyncDelta(ctx context.Context, st delta.Store, stream string, hint []PartitionAppend, o DeltaOptions) (DeltaSync, error) {
	var res DeltaSync
	for attempt := 0; attempt < 3; attempt++ {
		var stale *delta.StaleError
		res, err := c.syncDelta(ctx, st, stream, hint, o)
		if errors.As(err, &stale) {
			continue // another syncer moved a txn since we looked: look again
		}
		return res, err
	}
	return res, fmt.Errorf("delta %s: txns kept moving under the sync", stream)
}

func (c *Catalog) syncDelta(ctx context.Context, st delta.Store, stream string, hint []PartitionAppend, o DeltaOptions) (DeltaSync, error) {
	res := DeltaSync{Version: -1}
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return res, err
	}
	root, err := c.DeltaRoot(stream)
	if err != nil {
		return res, err
	}
	schema, err := delta.FromIceberg(t.Schema())
	if err != nil {
		return res, fmt.Errorf("delta %s: %w", stream, err)
	}
	dt := delta.NewTable(st, root)
	snap, err := dt.Snapshot(ctx)
	if errors.Is(err, delta.ErrNotTable) {
		snap, err = nil, nil
	}
	if err != nil {
		return res, fmt.Errorf("delta %s: %w", stream, err)
	}
	if snap != nil {
		res.Version = snap.Version
		if !IsDLQ(stream) && rewriteMissed(t, snap, stream, hint) {
			v, err := c.catchUpRewrites(ctx, dt, root, stream, o)
			if err != nil {
				return res, err
			}
			if v >= 0 {
				res.Version, res.Committed = v, true
				if snap, err = dt.Snapshot(ctx); err != nil {
					return res, fmt.Errorf("delta %s: %w", stream, err)
				}
				if t, err = c.LoadTable(ctx, stream); err != nil {
					return res, err
				}
			}
		}
	}
	marks := HighWaters(t)
	parts := make([]int32, 0, len(marks))
	for p := range marks {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var appends []delta.Append
	for _, p := range parts {
		h := marks[p]
		var d int64
		if snap != nil {
			d, _ = snap.TxnVersion(DeltaAppID(stream, p))
		}
		if d >= h {
			continue
		}
		files, err := c.deltaFiles(ctx, root, stream, p, d, h, hint)
		if err != nil {
			return res, err
		}
		appends = append(appends, delta.Append{AppID: DeltaAppID(stream, p), From: d, To: h, Files: files})
		res.Files += len(files)
	}
	if len(appends) == 0 {
		return res, nil
	}
	ar, err := dt.Append(ctx, appends, delta.AppendOptions{Schema: schema, Name: stream, CheckpointInterval: o.CheckpointInterval,
		Operation: "STREAMING UPDATE", EngineInfo: "tributary/" + o.Node, Now: o.Now,
		// A stream's table only grows (compaction's removes carry
		// dataChange false, which appendOnly allows): engines refuse a
		// DELETE or UPDATE on the Delta side, which Iceberg would not see.
		Configuration: map[string]string{"delta.appendOnly": "true"}})
	if err != nil {
		return res, fmt.Errorf("delta %s: %w", stream, err)
	}
	res.Version, res.Committed, res.Checkpoint = ar.Version, ar.Version >= 0, ar.Checkpoint
	if ar.CheckpointErr != nil {
		return res, fmt.Errorf("delta %s: commit %d stands: %w", stream, ar.Version, ar.CheckpointErr)
	}
	return res, nil
}

// deltaFiles are the files holding offsets [from, to) of partition p, as
// Delta adds: the hint's when it is exactly that range, else the Iceberg
// snapshot's, which must tile the range (a file across from — compacted
// over what the Delta log already has — is an error, not a duplicate).
func (c *Catalog) deltaFiles(ctx context.Context, root, stream string, p int32, from, to int64, hint []PartitionAppend) ([]delta.File, error) {
	rel := func(u string) (string, error) {
		r, ok := c.deltaRel(root, u)
		if !ok {
			return "", fmt.Errorf("delta %s: file %s is not below the table root %s", stream, u, root)
		}
		return r, nil
	}
	now := time.Now().UnixMilli()
	for _, a := range hint {
		if a.Partition != p || a.From != from || a.To != to {
			continue
		}
		out := make([]delta.File, 0, len(a.Files))
		for _, f := range a.Files {
			r, err := rel(f.URL)
			if err != nil {
				return nil, err
			}
			out = append(out, delta.File{Path: r, Size: f.Size, ModificationTime: now, Stats: deltaStats(f.Stats, true)})
		}
		return out, nil
	}
	it, err := c.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	if IsDLQ(stream) {
		return c.deadLetterDeltaFiles(ctx, it, stream, p, from, to, rel, now)
	}
	spans, err := planFiles(ctx, it, p, from)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(spans, func(a, b fileSpan) int { return int(a.first - b.first) })
	var out []delta.File
	next := from
	for _, f := range spans {
		if f.last < from || f.first >= to {
			continue
		}
		if f.first != next {
			return nil, fmt.Errorf("delta %s partition %d: the Iceberg files do not tile offsets [%d,%d): %s starts at %d, expected %d", stream, p, from, to, f.path, f.first, next)
		}
		r, err := rel(f.path)
		if err != nil {
			return nil, err
		}
		st := FileStats{Records: f.last - f.first + 1, Partition: p, FirstOffset: f.first, LastOffset: f.last, MinTimestamp: f.minTS, MaxTimestamp: f.maxTS}
		out = append(out, delta.File{Path: r, Size: f.size, ModificationTime: now, Stats: deltaStats(st, false)})
		next = f.last + 1
	}
	if next != to {
		return nil, fmt.Errorf("delta %s partition %d: the Iceberg files hold offsets [%d,%d), the mark is %d", stream, p, from, next, to)
	}
	return out, nil
}

// deltaStats is an add's stats from the statistics the Iceberg manifest
// gets (dataFile in commit.go). Not exact (a file read back from the
// Iceberg manifest's bounds alone): the null counts of the columns that
// may be null are left out rather than guessed.
func deltaStats(st FileStats, exact bool) string {
	s := delta.Stats{NumRecords: st.Records,
		MinValues: map[string]any{ColPartition: st.Partition, ColOffset: st.FirstOffset, ColTimestamp: delta.StatsTimestamp(st.MinTimestamp, false)},
		MaxValues: map[string]any{ColPartition: st.Partition, ColOffset: st.LastOffset, ColTimestamp: delta.StatsTimestamp(st.MaxTimestamp, true)},
		NullCount: map[string]int64{ColPartition: 0, ColOffset: 0, ColTimestamp: 0, ColKey: st.NullKeys, ColProducerTimestamp: st.NullProdTS,
			ColPrincipal: st.NullPrincipals},
	}
	if !exact {
		delete(s.NullCount, ColKey)
		delete(s.NullCount, ColProducerTimestamp)
		delete(s.NullCount, ColPrincipal)
	}
	if exact && st.EventTimes && st.NullEventTimes < st.Records {
		s.MinValues[ColEventTime] = delta.StatsTimestamp(st.MinEventTime, false)
		s.MaxValues[ColEventTime] = delta.StatsTimestamp(st.MaxEventTime, true)
	}
	if exact && st.EventTimes {
		s.NullCount[ColEventTime] = st.NullEventTimes
	}
	return s.String()
}

// deadLetterDeltaFiles are the dead-letter table's files of partition p
// holding offsets in [from, to) (invariant 6): a file across from or to
// is an error.
func (c *Catalog) deadLetterDeltaFiles(ctx context.Context, it *table.Table, stream string, p int32, from, to int64,
	rel func(string) (string, error), now int64) ([]delta.File, error) {
	files, err := liveDataFiles(ctx, it)
	if err != nil {
		return nil, err
	}
	var out []delta.File
	for _, f := range files {
		if f.partition != p || f.first < 0 || f.last < from || f.first >= to {
			continue
		}
		if f.first < from || f.last >= to {
			return nil, fmt.Errorf("delta %s partition %d: file %s holds offsets %d-%d, across [%d,%d)", stream, p, f.df.FilePath(), f.first, f.last, from, to)
		}
		r, err := rel(f.df.FilePath())
		if err != nil {
			return nil, err
		}
		out = append(out, delta.File{Path: r, Size: f.df.FileSizeBytes(), ModificationTime: now, Stats: deltaStats(f.stats(), false)})
	}
	slices.SortFunc(out, func(a, b delta.File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// deltaRel is the path below the Delta root (a store key) of a file URL
// of the warehouse, or of a plain local path of a file:// warehouse (as
// orphan planning lists them); ok false when it is not below root.
func (c *Catalog) deltaRel(root, u string) (string, bool) {
	if strings.HasPrefix(u, "/") && strings.HasPrefix(c.cfg.Warehouse, "file://") {
		u = "file://" + u
	}
	k, err := c.KeyOf(u)
	if err != nil {
		return "", false
	}
	return strings.CutPrefix(k, root+"/")
}

// rewriteMissed is the cheap test before catchUpRewrites' diff, which
// reads every manifest: whether the Iceberg snapshot's file count is
// other than the Delta log's plus the files of the hint's appends it
// lacks. Equal, the Delta log missed no rewrite (a rewrite replaces two
// or more files by fewer); a sync without a hint (a catch-up) always
// diffs, as does one that finds another writer's appends.
func rewriteMissed(t *table.Table, snap *delta.Snapshot, stream string, hint []PartitionAppend) bool {
	cs := t.CurrentSnapshot()
	if hint == nil || cs == nil || cs.Summary == nil {
		return true
	}
	total, err := strconv.Atoi(cs.Summary.Properties["total-data-files"])
	if err != nil {
		return true
	}
	want := len(snap.Files)
	for _, a := range hint {
		if v, _ := snap.TxnVersion(DeltaAppID(stream, a.Partition)); v <= a.From {
			want += len(a.Files)
		}
	}
	return total != want
}

// catchUpRewrites commits to the Delta log the rewrites of the Iceberg
// table it missed (invariant 5) and returns the version committed, -1
// when there was none to catch up.
func (c *Catalog) catchUpRewrites(ctx context.Context, dt *delta.Table, root, stream string, o DeltaOptions) (int64, error) {
	for attempt := 0; attempt < 3; attempt++ {
		snap, err := dt.Snapshot(ctx)
		if err != nil {
			return -1, fmt.Errorf("delta %s: %w", stream, err)
		}
		it, err := c.LoadTable(ctx, stream) // after the Delta snapshot: see invariant 5
		if err != nil {
			return -1, err
		}
		rw, err := c.missedRewrite(ctx, it, root, stream, snap)
		if err != nil || len(rw.Remove)+len(rw.Add) == 0 {
			return -1, err
		}
		res, err := dt.Rewrite(ctx, rw, delta.RewriteOptions{CheckpointInterval: o.CheckpointInterval, EngineInfo: "tributary/" + o.Node, Now: o.Now})
		if errors.Is(err, delta.ErrRewriteStale) {
			continue // the log moved under us: diff again
		}
		if err != nil {
			return -1, fmt.Errorf("delta %s: catching up a rewrite: %w", stream, err)
		}
		if res.CheckpointErr != nil {
			return res.Version, fmt.Errorf("delta %s: commit %d stands: %w", stream, res.Version, res.CheckpointErr)
		}
		return res.Version, nil
	}
	return -1, fmt.Errorf("delta %s: the log kept moving while catching up a rewrite", stream)
}

// missedRewrite diffs the Iceberg table's live files against the Delta
// snapshot's (invariant 5).
func (c *Catalog) missedRewrite(ctx context.Context, it *table.Table, root, stream string, snap *delta.Snapshot) (delta.Rewrite, error) {
	var rw delta.Rewrite
	files, err := liveDataFiles(ctx, it)
	if err != nil {
		return rw, err
	}
	ice := make(map[string]liveFile, len(files))
	for _, f := range files {
		if r, ok := c.deltaRel(root, f.df.FilePath()); ok {
			ice[r] = f
		}
	}
	rows := map[int32]int64{} // rows added minus rows removed, per partition
	for _, p := range snap.Paths() {
		if _, ok := ice[p]; ok {
			continue
		}
		var st delta.Stats
		if err := json.Unmarshal([]byte(snap.Files[p].Stats), &st); err != nil || st.NumRecords <= 0 {
			return rw, fmt.Errorf("delta %s: %s is gone from the Iceberg table, and its add has no row count to check a rewrite by", stream, p)
		}
		part, ok := statsPartition(st)
		if !ok {
			return rw, fmt.Errorf("delta %s: %s is gone from the Iceberg table, and its add's stats name no partition", stream, p)
		}
		rows[part] -= st.NumRecords
		rw.Remove = append(rw.Remove, p)
	}
	now := time.Now().UnixMilli()
	for r, f := range ice {
		if snap.Files[r] != nil || f.first < 0 {
			continue
		}
		txn, _ := snap.TxnVersion(DeltaAppID(stream, f.partition))
		switch {
		case f.last < txn:
			rw.Add = append(rw.Add, delta.File{Path: r, Size: f.df.FileSizeBytes(), ModificationTime: now, Stats: deltaStats(f.stats(), false)})
			rows[f.partition] += f.df.Count()
		case f.first < txn:
			return rw, fmt.Errorf("delta %s: Iceberg file %s holds offsets %d-%d, across the Delta txn %d of partition %d", stream, r, f.first, f.last, txn, f.partition)
		}
	}
	for p, n := range rows {
		if n != 0 {
			return rw, fmt.Errorf("delta %s partition %d: the Iceberg table replaced files the Delta log lists by files of %+d rows more", stream, p, n)
		}
	}
	slices.Sort(rw.Remove)
	slices.SortFunc(rw.Add, func(a, b delta.File) int { return strings.Compare(a.Path, b.Path) })
	return rw, nil
}

// statsPartition is the partition an add's stats give (min = max).
func statsPartition(st delta.Stats) (int32, bool) {
	lo, ok1 := st.MinValues[ColPartition].(float64)
	hi, ok2 := st.MaxValues[ColPartition].(float64)
	if !ok1 || !ok2 || lo != hi {
		return 0, false
	}
	return int32(lo), true
}
