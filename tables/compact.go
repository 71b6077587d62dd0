package tables

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/typed"
)

// liveFile is a data file of the current snapshot with the facts
// compaction plans on, decoded from its exact manifest bounds.
type liveFile struct {
	df          iceberg.DataFile
	partition   int32
	first, last int64
	minTS       int64 // acceptance timestamps, unix micros
	maxTS       int64
	key         string // spec id and partition value (the day or hour)
	origin      Origin // from the file's name (layout.go, invariant 4)
}

// liveDataFiles lists the data files of t's current snapshot.
func liveDataFiles(ctx context.Context, t *table.Table) ([]liveFile, error) {
	s := t.CurrentSnapshot()
	if s == nil {
		return nil, nil
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return nil, err
	}
	mfs, err := s.Manifests(fs)
	if err != nil {
		return nil, err
	}
	var out []liveFile
	for _, mf := range mfs {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		entries, err := mf.FetchEntries(fs, true)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			df := e.DataFile()
			lf := liveFile{df: df, first: -1}
			lo, hi := df.LowerBoundValues(), df.UpperBoundValues()
			if p := lo[FieldPartition]; len(p) == 4 && bytes.Equal(p, hi[FieldPartition]) {
				lf.partition = int32(binary.LittleEndian.Uint32(p))
				if l, h := lo[FieldOffset], hi[FieldOffset]; len(l) == 8 && len(h) == 8 {
					lf.first, lf.last = int64(binary.LittleEndian.Uint64(l)), int64(binary.LittleEndian.Uint64(h))
				}
			}
			lf.minTS, _ = le64(lo[FieldTimestamp])
			lf.maxTS, _ = le64(hi[FieldTimestamp])
			lf.key = partitionKey(df)
			lf.origin = FileOrigin(df.FilePath())
			out = append(out, lf)
		}
	}
	return out, nil
}

// stats are the file's statistics as its manifest bounds give them.
func (f liveFile) stats() FileStats {
	return FileStats{Records: f.df.Count(), Partition: f.partition, FirstOffset: f.first, LastOffset: f.last, MinTimestamp: f.minTS, MaxTimestamp: f.maxTS}
}

// partitionKey is a data file's spec id and partition tuple (one day or
// hour value under Tributary's specs, whatever its field id: a spec evolved
// from day to hour gives the hour field a new id).
func partitionKey(df iceberg.DataFile) string {
	part := df.Partition()
	ids := make([]int, 0, len(part))
	for id := range part {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	key := fmt.Sprint(df.SpecID())
	for _, id := range ids {
		key += fmt.Sprintf("/%d=%v", id, part[id])
	}
	return key
}

// planCompaction groups files into runs worth rewriting: files smaller
// than target, of one partition and one partition value (day or hour),
// whose offset ranges are adjacent and exactly as many rows as offsets,
// of one Origin (the output keeps it), with a total size at most target. Runs of one file are left alone.
// Input bytes are capped at maxBytes.
func planCompaction(files []liveFile, target, maxBytes int64) [][]liveFile {
	var cands []liveFile
	for _, f := range files {
		if f.first >= 0 && f.last-f.first+1 == f.df.Count() && f.df.FileSizeBytes() < target {
			cands = append(cands, f)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.partition != b.partition {
			return a.partition < b.partition
		}
		if a.key != b.key {
			return a.key < b.key
		}
		return a.first < b.first
	})
	var groups [][]liveFile
	var cur []liveFile
	var curBytes, total int64
	flush := func() {
		if len(cur) >= 2 && total+curBytes <= maxBytes {
			groups = append(groups, cur)
			total += curBytes
		}
		cur, curBytes = nil, 0
	}
	for _, f := range cands {
		if len(cur) > 0 {
			prev := cur[len(cur)-1]
			if prev.partition != f.partition || prev.key != f.key || prev.last+1 != f.first || prev.origin != f.origin ||
				curBytes+f.df.FileSizeBytes() > target {
				flush()
			}
		}
		cur = append(cur, f)
		curBytes += f.df.FileSizeBytes()
	}
	flush()
	return groups
}

func (m *pass) compact(ctx context.Context) error {
	if m.deltaBlocked("compact") {
		return nil
	}
	m.progress(Progress{Step: "compact"})
	if IsDLQ(m.stream) {
		// Dead-letter files hold increasing, not consecutive, offsets and
		// columns beyond the envelope: they are left as written (dlq.go).
		m.progress(Progress{Step: "compact", Done: true, Note: "dead-letter table: not compacted"})
		return nil
	}
	t, err := m.load(ctx)
	if err != nil {
		return err
	}
	files, err := liveDataFiles(ctx, t)
	if err != nil {
		return err
	}
	if files, err = m.deltaFilter(ctx, t, files); err != nil {
		return err
	}
	groups := planCompaction(files, m.pol.TargetFileSize, m.pol.MaxCompactBytes)
	if m.opts.DryRun {
		for _, g := range groups {
			m.res.CompactGroups++
			m.res.CompactInputs += len(g)
			for _, f := range g {
				m.res.CompactRows += f.df.Count()
				m.res.CompactBytes += f.df.FileSizeBytes()
			}
		}
		m.progress(Progress{Step: "compact", Done: true, Note: fmt.Sprintf("%d data files; would merge %d of them (%d bytes, %d rows) into %d",
			len(files), m.res.CompactInputs, m.res.CompactBytes, m.res.CompactRows, m.res.CompactGroups)})
		return nil
	}
	for i, g := range groups {
		m.progress(Progress{Step: "compact", Index: i + 1, Of: len(groups),
			Note: fmt.Sprintf("partition %d offsets %d-%d: %d files", g[0].partition, g[0].first, g[len(g)-1].last, len(g))})
		if err := m.compactGroup(ctx, t, g); err != nil {
			return err
		}
	}
	m.progress(Progress{Step: "compact", Done: true, Note: fmt.Sprintf("%d data files; merged %d of them (%d bytes, %d rows) into %d",
		len(files), m.res.CompactInputs, m.res.CompactBytes, m.res.CompactRows, m.res.CompactGroups)})
	return nil
}

// compactGroup rewrites one run of files as one file per partition bucket
// (one, unless the table's granularity became finer since the inputs were
// written) and commits the replacement, re-planning on the reloaded table
// after a conflict.
func (m *pass) compactGroup(ctx context.Context, t *table.Table, g []liveFile) error {
	outs, err := m.writeCompacted(ctx, t, g)
	if err != nil {
		return err
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return err
	}
	abandon := func() {
		m.res.CompactAborted++
		for _, out := range outs {
			if err := fs.Remove(out.URL); err != nil {
				m.progress(Progress{Step: "compact", Note: "abandoned output left for orphan cleanup: " + err.Error()})
			}
		}
	}
	first, last := outs[0].Stats, outs[len(outs)-1].Stats
	for attempt := 1; ; attempt++ {
		cur, err := m.load(ctx)
		if err != nil {
			abandon()
			return err
		}
		inputs := make([]iceberg.DataFile, len(g))
		for i, f := range g {
			inputs[i] = f.df
		}
		dfs := make([]iceberg.DataFile, len(outs))
		for i, out := range outs {
			if dfs[i], err = m.c.dataFile(cur, out); err != nil {
				abandon()
				return err
			}
		}
		tx := cur.NewTransaction()
		snap := iceberg.Properties{
			"tributary.operation":     "compact",
			"tributary.maintainer":    m.pol.Holder,
			"tributary.compact.range": fmt.Sprintf("p%d:%d-%d", first.Partition, first.FirstOffset, last.LastOffset),
		}
		// The replace looks the inputs up in the reloaded snapshot: if one
		// is gone (replaced by somebody else), committing our output would
		// duplicate rows, so the group is given up.
		if err := tx.ReplaceDataFilesWithDataFiles(ctx, inputs, dfs, snap); err != nil {
			if strings.Contains(err.Error(), "do not belong to the table") {
				abandon()
				return nil
			}
			return fmt.Errorf("replace files: %w", err)
		}
		if err := m.renewIfDue(cur, tx); err != nil {
			return err
		}
		if err := m.commit(ctx, "compact", tx, attempt); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		m.res.CompactGroups++
		m.res.CompactInputs += len(g)
		for _, out := range outs {
			m.res.CompactRows += out.Stats.Records
		}
		for _, f := range g {
			m.res.CompactBytes += f.df.FileSizeBytes()
		}
		if err := m.deltaCompacted(ctx, g, outs); err != nil {
			return fmt.Errorf("delta: %w: %w", errDeltaBehind, err)
		}
		return nil
	}
}

// writeCompacted reads the rows of a run of files from t, checks that they
// are exactly the run's contiguous offsets, and writes them next to the
// uplink's files: one file per partition bucket of t's granularity
// (CutRuns), named like the uplink's (DataFileURL), with the run's origin.
func (m *pass) writeCompacted(ctx context.Context, t *table.Table, g []liveFile) ([]FileMeta, error) {
	part, first, last := g[0].partition, g[0].first, g[len(g)-1].last
	var want int64
	for _, f := range g {
		want += f.df.Count()
	}
	filter := iceberg.NewAnd(iceberg.NewAnd(
		iceberg.EqualTo(iceberg.Reference(ColPartition), part),
		iceberg.GreaterThanEqual(iceberg.Reference(ColOffset), first)),
		iceberg.LessThanEqual(iceberg.Reference(ColOffset), last))
	_, batches, err := t.Scan(table.WithRowFilter(filter)).ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("read p%d [%d,%d]: %w", part, first, last, err)
	}
	recs := make([]*tributary.Record, 0, want)
	typedRows := map[int64]bool{}   // offsets whose row has a typed value
	eventTimes := map[int64]int64{} // offsets' event_time values
	for b, err := range batches {
		if err != nil {
			return nil, fmt.Errorf("read p%d [%d,%d]: %w", part, first, last, err)
		}
		rs, err := RecordsFromArrow(b)
		if err == nil {
			markTyped(b, rs, typedRows, eventTimes)
		}
		b.Release()
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
	if int64(len(recs)) != want {
		return nil, fmt.Errorf("read p%d [%d,%d]: %d rows, files hold %d", part, first, last, len(recs), want)
	}
	for i, r := range recs {
		if r.Partition != part || r.Offset != first+int64(i) {
			return nil, fmt.Errorf("read p%d [%d,%d]: row %d is %d@%d", part, first, last, i, r.Offset, r.Partition)
		}
	}
	gran, err := GranularityOf(t.Spec())
	if err != nil {
		return nil, err
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(interface{ WriteFile(string, []byte) error })
	if !ok {
		return nil, fmt.Errorf("table file system of %s cannot write", t.Location())
	}
	// Typed columns are derived again from value with the table's current
	// columns, for the rows that were typed (typedcols.go); the others
	// (dead letters) stay null.
	var sh *Shaped
	if hasTyped(t.Schema()) {
		sh = decodeBatch(recs)
		for i, r := range recs {
			if !typedRows[r.Offset] && sh.errs[i] == "" {
				sh.errs[i], sh.vals[i] = "not typed when written", typed.Value{}
			}
		}
		if err := sh.check(t.Schema()); err != nil {
			return nil, err
		}
		if _, ok := t.Schema().FindFieldByName(ColEventTime); ok {
			sh.eventTimes = make([]int64, len(recs))
			for i, r := range recs {
				sh.eventTimes[i] = noEventTime
				if us, ok := eventTimes[r.Offset]; ok {
					sh.eventTimes[i] = us
				}
			}
		}
		sh.byEventTime = PartitionSource(t.Spec()) != FieldTimestamp
	}
	runs := CutRuns(gran, recs)
	if sh != nil {
		runs = sh.CutRuns(gran, recs)
	}
	var outs []FileMeta
	for _, run := range runs {
		var buf bytes.Buffer
		var st FileStats
		var err error
		if sh != nil {
			st, err = WriteParquetShaped(&buf, run, sh)
		} else {
			st, err = WriteParquet(&buf, run)
		}
		if err != nil {
			return nil, err
		}
		url := DataFileURL(t.Location(), st, g[0].origin)
		if err := wfs.WriteFile(url, buf.Bytes()); err != nil {
			for _, out := range outs {
				_ = fs.Remove(out.URL) // best effort: orphan cleanup gets what remains
			}
			return nil, fmt.Errorf("write %s: %w", url, err)
		}
		outs = append(outs, FileMeta{URL: url, Size: int64(buf.Len()), Stats: st})
	}
	return outs, nil
}
