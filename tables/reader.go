package tables

// Reader reads streams back from their tables by offset range — the
// consume side of every protocol server (Kafka Fetch and ListOffsets,
// Pulsar FLOW and SEEK) — with the caches that make tailing cheap:
//
//   - Table metadata, per stream: the last loaded *table.Table, reloaded
//     from the catalog when older than MetadataMaxAge (100 ms), so many
//     consumers tailing one stream cost one catalog read per 100 ms. With
//     it, per (stream, partition), the index of data files (offset range
//     and timestamp range of each, from the manifests' exact bounds),
//     extended on each new snapshot by planning only the files at or past
//     the end of the indexed range (row filter partition == P AND offset
//     >= end) and rebuilt from scratch when files disappear.
//   - Decoded row groups, an LRU bounded by RowCacheBytes (256 MiB) of the
//     records' payload sizes plus a fixed per-record overhead, and a small
//     LRU of Parquet footers (4096 files). Data files are immutable, so
//     neither needs invalidation. From a reader's first touch of a row
//     group on, the next PrefetchRowGroups (4) are decoded ahead on a
//     bounded pool of DecodeWorkers (GOMAXPROCS) background decoders, so
//     a cold partition decodes on several cores; concurrent readers of one
//     row group share a single decode. Protocol servers cache what they
//     encode from a row group under its RowGroupKey (Kafka batches).
//
// Invariant: nothing at or beyond a partition's committed mark (its
// high-water mark, committed with the data) is ever returned, and offset N
// is always the row whose offset column is N.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/lru"
)

// Defaults of a Reader.
const (
	DefaultRowCacheBytes  = 256 << 20
	DefaultMetadataMaxAge = 100 * time.Millisecond
	// DefaultPrefetchRowGroups is how many row groups past the one read
	// are decoded ahead.
	DefaultPrefetchRowGroups = 4
)

// ReaderConfig configures a Reader; zero values take the defaults.
type ReaderConfig struct {
	// MetadataMaxAge is how stale cached table metadata may be.
	MetadataMaxAge time.Duration
	// RowCacheBytes bounds the LRU of decoded row groups.
	RowCacheBytes int64
	// DecodeWorkers bounds the row groups decoded in the background
	// (prefetch) at once. Default GOMAXPROCS, at least 2.
	DecodeWorkers int
	// PrefetchRowGroups is how many row groups past the one a reader
	// touches are decoded ahead (as far as workers are free). Default 4;
	// -1 = none.
	PrefetchRowGroups int
}

// Reader reads offset ranges of stream partitions from their tables; it
// is safe for concurrent use.
type Reader struct {
	cat    *Catalog
	maxAge time.Duration

	mu      sync.Mutex
	streams map[string]*streamEntry
	list    []string
	listAt  time.Time

	rows    *lru.Cache // RowGroupKey -> *rowGroup
	footers *lru.Cache // path -> *metadata.FileMetaData

	loadMu  sync.Mutex
	loading map[RowGroupKey]*rgLoad // row groups being decoded

	workers chan struct{} // one token per background decode
	depth   int           // row groups prefetched ahead of a reader
}

// NewReader returns a reader of cat's stream tables.
func NewReader(cat *Catalog, cfg ReaderConfig) *Reader {
	if cfg.MetadataMaxAge <= 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.RowCacheBytes <= 0 {
		cfg.RowCacheBytes = DefaultRowCacheBytes
	}
	if cfg.DecodeWorkers <= 0 {
		cfg.DecodeWorkers = max(2, runtime.GOMAXPROCS(0))
	}
	switch {
	case cfg.PrefetchRowGroups == 0:
		cfg.PrefetchRowGroups = DefaultPrefetchRowGroups
	case cfg.PrefetchRowGroups < 0:
		cfg.PrefetchRowGroups = 0
	}
	return &Reader{cat: cat, maxAge: cfg.MetadataMaxAge, streams: map[string]*streamEntry{},
		rows: lru.New(cfg.RowCacheBytes), footers: lru.New(4096), loading: map[RowGroupKey]*rgLoad{},
		workers: make(chan struct{}, cfg.DecodeWorkers), depth: cfg.PrefetchRowGroups}
}

// MetadataMaxAge is how stale the table metadata the reader answers from
// may be: a tailing reader finds new data at most this late.
func (tc *Reader) MetadataMaxAge() time.Duration { return tc.maxAge }

// ListStreams lists the stream tables, sorted, cached for a second.
// Dead-letter tables (dlq.go) are not streams: they are for SQL, and are
// not listed.
func (tc *Reader) ListStreams(ctx context.Context) ([]string, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.list != nil && time.Since(tc.listAt) < time.Second {
		return tc.list, nil
	}
	l, err := tc.cat.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	l = slices.DeleteFunc(l, IsDLQ)
	sort.Strings(l)
	tc.list, tc.listAt = l, time.Now()
	return l, nil
}

// Partitions lists a stream's partitions, sorted: those allocated to a
// node and those with a committed mark. ErrNoSuchStream if there is no
// such stream.
func (tc *Reader) Partitions(ctx context.Context, stream string) ([]int32, error) {
	t, err := tc.table(ctx, stream)
	if err != nil {
		return nil, err
	}
	return partitionsOf(t), nil
}

// Partition is one partition of a stream table at one snapshot: what a
// reader may serve from it. End is the committed mark (the next offset not
// yet committed), Earliest the lowest offset in the table (End if none).
type Partition struct {
	Stream    string
	Partition int32
	End       int64
	Earliest  int64

	r     *Reader
	t     *table.Table
	files []fileSpan
}

// Partition returns the stream partition as the table is now (at most
// MetadataMaxAge old). ErrNoSuchStream / ErrNoSuchPartition when either
// does not exist.
func (tc *Reader) Partition(ctx context.Context, stream string, p int32) (*Partition, error) {
	t, err := tc.table(ctx, stream)
	if err != nil {
		return nil, err
	}
	parts := partitionsOf(t)
	i := sort.Search(len(parts), func(i int) bool { return parts[i] >= p })
	if i == len(parts) || parts[i] != p {
		return nil, fmt.Errorf("%w: %s partition %d", ErrNoSuchPartition, stream, p)
	}
	files, err := tc.files(ctx, stream, t, p)
	if err != nil {
		return nil, err
	}
	v := &Partition{Stream: stream, Partition: p, End: HighWater(t, p), r: tc, t: t, files: files}
	v.Earliest = v.End
	if len(files) > 0 {
		v.Earliest = min(files[0].first, v.End)
	}
	return v, nil
}

// Read calls fn with each committed record from offset from on, in offset
// order, until fn returns false, the mark is reached or the offsets are
// not in the table (deleted data, or the file index lagging the mark).
// Records are shared with the cache: callers must not modify them.
func (v *Partition) Read(ctx context.Context, from int64, fn func(*tributary.Record) bool) error {
	off := from
	for off < v.End {
		ref, ok, err := v.RowGroupAt(ctx, off)
		if err != nil || !ok {
			return err
		}
		recs, err := v.Rows(ctx, ref)
		if err != nil {
			return err
		}
		// Sequential readers find the next row groups decoded.
		v.Prefetch(ref)
		for j := int(off - ref.First); j < len(recs) && off < v.End; j++ {
			if !fn(recs[j]) {
				return nil
			}
			off++
		}
	}
	return nil
}

// RowGroupRef names one row group of one data file of a partition: offsets
// [First, First+Count). Data files are immutable, so a RowGroupRef's Key
// names the same rows forever, and protocol servers may cache what they
// derive from them (encoded Kafka batches, Pulsar entries) under it.
type RowGroupRef struct {
	Key   RowGroupKey
	First int64
	Count int64
	file  int // index into the Partition's files
}

// RowGroupKey identifies a row group: a data file path and its index.
type RowGroupKey struct {
	Path  string
	Index int
}

// End is the offset after the row group's last row.
func (g RowGroupRef) End() int64 { return g.First + g.Count }

// RowGroupAt locates the row group holding offset off from the file's
// (cached) footer, without decoding it; ok is false when off is not in the
// table (beyond the mark, deleted, or the file index lagging the mark).
func (v *Partition) RowGroupAt(ctx context.Context, off int64) (RowGroupRef, bool, error) {
	if off >= v.End {
		return RowGroupRef{}, false, nil
	}
	i := sort.Search(len(v.files), func(i int) bool { return v.files[i].last >= off })
	if i == len(v.files) || v.files[i].first > off {
		return RowGroupRef{}, false, nil
	}
	f := v.files[i]
	md, err := v.r.footer(ctx, v.t, f.path)
	if err != nil {
		// A file the index names may have been replaced and deleted
		// since: plan the partition again on the next read.
		v.r.forget(v.Stream, v.Partition)
		return RowGroupRef{}, false, err
	}
	ref, err := locate(md, f, off)
	ref.file = i
	return ref, err == nil, err
}

// Rows returns the decoded rows of ref (cached; concurrent callers share
// one decode): Rows(ref)[k] is offset ref.First+k. Rows beyond the mark
// may be included: the caller stops at End. The records are shared with
// the cache: callers must not modify them.
func (v *Partition) Rows(ctx context.Context, ref RowGroupRef) ([]*tributary.Record, error) {
	if ref.file >= len(v.files) || v.files[ref.file].path != ref.Key.Path {
		// A ref of another snapshot of the partition: locate it here.
		r, ok, err := v.RowGroupAt(ctx, ref.First)
		if err != nil {
			return nil, err
		}
		if !ok || r.Key != ref.Key {
			return nil, fmt.Errorf("%s partition %d: row group %s#%d is not in the table", v.Stream, v.Partition, ref.Key.Path, ref.Key.Index)
		}
		ref = r
	}
	g, err := v.r.rowsAt(ctx, v.t, v.files[ref.file], ref)
	if err != nil {
		v.r.forget(v.Stream, v.Partition)
		return nil, err
	}
	return g.recs, nil
}

// File is an open data file of a partition, for decoders of their own
// (the Kafka fetch path encodes row groups straight into record batches):
// read it with ReadAt, Size bytes long, and Close it.
type File interface {
	io.ReaderAt
	io.Closer
}

// OpenFile opens the data file holding ref and returns it with its size.
func (v *Partition) OpenFile(ctx context.Context, ref RowGroupRef) (File, int64, error) {
	fio, err := v.t.FS(ctx)
	if err != nil {
		return nil, 0, err
	}
	f, err := fio.Open(ref.Key.Path)
	if err != nil {
		v.r.forget(v.Stream, v.Partition)
		return nil, 0, fmt.Errorf("open %s: %w", ref.Key.Path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", ref.Key.Path, err)
	}
	return f, st.Size(), nil
}

// Next is the row group after ref, if it is in the table below the mark.
func (v *Partition) Next(ctx context.Context, ref RowGroupRef) (RowGroupRef, bool, error) {
	return v.RowGroupAt(ctx, ref.End())
}

// Prefetch has the row groups after ref decoded in the background, up to
// the reader's prefetch depth, as far as decode workers are free (never
// more than the reader's worker count at once): a consumer reading
// sequentially, from its first read of a partition on, finds the next
// row groups decoded, and a cold partition is decoded on several cores.
func (v *Partition) Prefetch(ref RowGroupRef) {
	off := ref.End()
	for k := 0; k < v.r.depth && off < v.End; k++ {
		i := sort.Search(len(v.files), func(i int) bool { return v.files[i].last >= off })
		if i == len(v.files) || v.files[i].first > off {
			return
		}
		f := v.files[i]
		mdv, ok := v.r.footers.Get(f.path)
		if !ok {
			// The footer is read by the worker; stop here, the next read
			// prefetches further.
			v.r.prefetch(v.t, f, RowGroupRef{First: off})
			return
		}
		next, err := locate(mdv.(*metadata.FileMetaData), f, off)
		if err != nil {
			return
		}
		if !v.r.prefetch(v.t, f, next) {
			return // no worker free
		}
		off = next.End()
	}
}

// OffsetForTime returns the first committed record whose acceptance
// timestamp (unix µs) is >= micros, or nil if there is none: files whose
// maximum timestamp is older are skipped by their manifest bounds, then
// the rows of the first candidate file are read row group by row group.
func (v *Partition) OffsetForTime(ctx context.Context, micros int64) (*tributary.Record, error) {
	for _, f := range v.files {
		if f.maxTS < micros || f.first >= v.End {
			continue
		}
		for off := f.first; off <= f.last && off < v.End; {
			g, err := v.r.rowsAt(ctx, v.t, f, RowGroupRef{First: off})
			if err != nil {
				v.r.forget(v.Stream, v.Partition)
				return nil, err
			}
			for _, r := range g.recs[off-g.first:] {
				if r.Offset >= v.End {
					break
				}
				if r.Timestamp >= micros {
					return r, nil
				}
			}
			off = g.first + int64(len(g.recs))
		}
	}
	return nil, nil
}

// fileSpan is one data file of one partition: offsets [first, last].
type fileSpan struct {
	path         string
	first, last  int64
	minTS, maxTS int64 // acceptance timestamps, unix micros
	size         int64
}

// partIndex is the file index of one partition at one snapshot.
type partIndex struct {
	snapID int64
	files  []fileSpan // sorted by first, contiguous
}

type streamEntry struct {
	mu     sync.Mutex
	t      *table.Table
	loaded time.Time
	parts  map[int32]*partIndex
}

// rgLoad is one in-flight decode of a row group, shared by every caller
// that wants it.
type rgLoad struct {
	done chan struct{}
	g    *rowGroup
	err  error
}

func (tc *Reader) entry(stream string) *streamEntry {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e := tc.streams[stream]
	if e == nil {
		e = &streamEntry{parts: map[int32]*partIndex{}}
		tc.streams[stream] = e
	}
	return e
}

// table returns the stream's table, reloaded if older than maxAge.
// ErrNoSuchStream means there is no such stream.
func (tc *Reader) table(ctx context.Context, stream string) (*table.Table, error) {
	e := tc.entry(stream)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.t != nil && time.Since(e.loaded) < tc.maxAge {
		return e.t, nil
	}
	t, err := tc.cat.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	e.t, e.loaded = t, time.Now()
	return t, nil
}

// partitionsOf lists a stream table's partitions: those allocated to a
// node, those with an owner and those with a committed mark.
func partitionsOf(t *table.Table) []int32 {
	seen := map[int32]bool{}
	for k, v := range t.Properties() {
		if strings.HasPrefix(k, PropNodePartition) {
			if p, err := strconv.ParseInt(v, 10, 32); err == nil {
				seen[int32(p)] = true
			}
		}
		if rest, ok := strings.CutPrefix(k, PropOwner); ok {
			if p, err := strconv.ParseInt(rest, 10, 32); err == nil {
				seen[int32(p)] = true
			}
		}
	}
	for p := range HighWaters(t) {
		seen[p] = true
	}
	out := make([]int32, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// files returns the partition's data files at t's snapshot.
func (tc *Reader) files(ctx context.Context, stream string, t *table.Table, p int32) ([]fileSpan, error) {
	snap := t.CurrentSnapshot()
	if snap == nil {
		return nil, nil
	}
	e := tc.entry(stream)
	e.mu.Lock()
	defer e.mu.Unlock()
	idx := e.parts[p]
	if idx != nil && idx.snapID == snap.SnapshotID {
		return idx.files, nil
	}
	var from int64
	var have []fileSpan
	if idx != nil && len(idx.files) > 0 && appendsOnly(t, idx.snapID, snap) {
		have = idx.files
		from = have[len(have)-1].last + 1
	}
	add, err := planFiles(ctx, t, p, from)
	if err != nil {
		return nil, err
	}
	files := append(append([]fileSpan(nil), have...), add...)
	sort.Slice(files, func(i, j int) bool { return files[i].first < files[j].first })
	if !contiguous(files) {
		// Files were rewritten or deleted: plan the whole partition again.
		if files, err = planFiles(ctx, t, p, 0); err != nil {
			return nil, err
		}
	}
	e.parts[p] = &partIndex{snapID: snap.SnapshotID, files: files}
	return files, nil
}

// appendsOnly reports whether every snapshot after old up to cur is an
// append, so that the files indexed at old are all still live. A
// compaction (replace) or delete in between, or a history that no longer
// reaches old (expired snapshots), means the index must be planned again:
// a rewrite can keep the offsets contiguous while removing the very files
// the index names, and once they are deleted from storage every read of
// them would fail.
func appendsOnly(t *table.Table, old int64, cur *table.Snapshot) bool {
	md := t.Metadata()
	for s, steps := cur, 0; s != nil && steps < 100000; steps++ {
		if s.SnapshotID == old {
			return true
		}
		if s.Summary == nil || s.Summary.Operation != table.OpAppend || s.ParentSnapshotID == nil {
			return false
		}
		s = md.SnapshotByID(*s.ParentSnapshotID)
	}
	return false
}

// forget drops a partition's file index, so the next read plans it again.
func (tc *Reader) forget(stream string, p int32) {
	e := tc.entry(stream)
	e.mu.Lock()
	delete(e.parts, p)
	e.mu.Unlock()
}

func contiguous(fs []fileSpan) bool {
	for i := 1; i < len(fs); i++ {
		if fs[i].first != fs[i-1].last+1 {
			return false
		}
	}
	return true
}

// planFiles plans the partition's files holding offsets >= from with
// iceberg-go's scan planning: the manifests' bounds on partition and
// offset prune every other file.
func planFiles(ctx context.Context, t *table.Table, p int32, from int64) ([]fileSpan, error) {
	var f iceberg.BooleanExpression = iceberg.EqualTo(iceberg.Reference(ColPartition), p)
	if from > 0 {
		f = iceberg.NewAnd(f, iceberg.GreaterThanEqual(iceberg.Reference(ColOffset), from))
	}
	tasks, err := t.Scan(table.WithRowFilter(f)).PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan %s partition %d: %w", t.Identifier(), p, err)
	}
	out := make([]fileSpan, 0, len(tasks))
	for _, task := range tasks {
		df := task.File
		lo, hi := df.LowerBoundValues(), df.UpperBoundValues()
		first, ok1 := le64(lo[FieldOffset])
		last, ok2 := le64(hi[FieldOffset])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("plan %s: file %s has no offset bounds", t.Identifier(), df.FilePath())
		}
		if last-first+1 != df.Count() {
			return nil, fmt.Errorf("plan %s: file %s is not one contiguous offset range", t.Identifier(), df.FilePath())
		}
		minTS, _ := le64(lo[FieldTimestamp])
		maxTS, _ := le64(hi[FieldTimestamp])
		out = append(out, fileSpan{path: df.FilePath(), first: first, last: last, minTS: minTS, maxTS: maxTS, size: df.FileSizeBytes()})
	}
	return out, nil
}

func le64(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(b)), true
}

// rowGroup is the decoded rows of one row group: offsets first, first+1, …
type rowGroup struct {
	first int64
	recs  []*tributary.Record
	size  int64
}

const recordOverhead = 160 // bytes of a *tributary.Record beyond its payloads

// locate is the row group of f holding offset off, from its footer.
func locate(md *metadata.FileMetaData, f fileSpan, off int64) (RowGroupRef, error) {
	start := f.first
	for i := range md.NumRowGroups() {
		n := md.RowGroup(i).NumRows()
		if off < start+n {
			return RowGroupRef{Key: RowGroupKey{f.path, i}, First: start, Count: n}, nil
		}
		start += n
	}
	return RowGroupRef{}, fmt.Errorf("offset %d not in %s", off, f.path)
}

// rowsAt returns the decoded row group ref of f. A ref with an empty key
// (a prefetch that did not have the footer) is located first.
func (tc *Reader) rowsAt(ctx context.Context, t *table.Table, f fileSpan, ref RowGroupRef) (*rowGroup, error) {
	md, err := tc.footer(ctx, t, f.path)
	if err != nil {
		return nil, err
	}
	if ref.Key.Path == "" {
		if ref, err = locate(md, f, ref.First); err != nil {
			return nil, err
		}
	}
	key := ref.Key
	if v, ok := tc.rows.Get(key); ok {
		return v.(*rowGroup), nil
	}
	tc.loadMu.Lock()
	if l := tc.loading[key]; l != nil {
		tc.loadMu.Unlock()
		select {
		case <-l.done:
			return l.g, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Checked again under loadMu: a decode may have finished between
	// the cache miss and here.
	if v, ok := tc.rows.Get(key); ok {
		tc.loadMu.Unlock()
		return v.(*rowGroup), nil
	}
	l := &rgLoad{done: make(chan struct{})}
	tc.loading[key] = l
	tc.loadMu.Unlock()
	l.g, l.err = tc.decode(ctx, t, f, md, key.Index, ref.First)
	tc.loadMu.Lock()
	delete(tc.loading, key)
	tc.loadMu.Unlock()
	close(l.done)
	return l.g, l.err
}

// prefetch decodes row group ref of f in the background on one of the
// reader's decode workers; false when none is free. Row groups cached or
// being decoded are skipped (true: look further).
func (tc *Reader) prefetch(t *table.Table, f fileSpan, ref RowGroupRef) bool {
	if ref.Key.Path != "" {
		if _, ok := tc.rows.Get(ref.Key); ok {
			return true
		}
		tc.loadMu.Lock()
		l := tc.loading[ref.Key]
		tc.loadMu.Unlock()
		if l != nil {
			return true
		}
	}
	select {
	case tc.workers <- struct{}{}:
	default:
		return false
	}
	go func() {
		defer func() { <-tc.workers }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tc.rowsAt(ctx, t, f, ref)
	}()
	return true
}

func (tc *Reader) decode(ctx context.Context, t *table.Table, f fileSpan, md *metadata.FileMetaData, rg int, start int64) (*rowGroup, error) {
	key := RowGroupKey{f.path, rg}
	recs, err := readRowGroup(ctx, t, f.path, md, rg)
	if err != nil {
		return nil, err
	}
	g := &rowGroup{first: start, recs: recs}
	for i, r := range recs {
		if r.Offset != start+int64(i) {
			return nil, fmt.Errorf("%s row group %d: row %d has offset %d, want %d", f.path, rg, i, r.Offset, start+int64(i))
		}
		g.size += recordOverhead + int64(len(r.Key)+len(r.Value)+len(r.Topic)+len(r.ClientID)+len(r.Node)+len(r.Source))
		for _, h := range r.Headers {
			g.size += 32 + int64(len(h.Key)+len(h.Value))
		}
	}
	tc.rows.Add(key, g, g.size)
	return g, nil
}

func (tc *Reader) footer(ctx context.Context, t *table.Table, path string) (*metadata.FileMetaData, error) {
	if v, ok := tc.footers.Get(path); ok {
		return v.(*metadata.FileMetaData), nil
	}
	fio, err := t.FS(ctx)
	if err != nil {
		return nil, err
	}
	f, err := fio.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("read footer of %s: %w", path, err)
	}
	md := pr.MetaData()
	tc.footers.Add(path, md, 1)
	return md, nil
}

func readRowGroup(ctx context.Context, t *table.Table, path string, md *metadata.FileMetaData, rg int) ([]*tributary.Record, error) {
	fio, err := t.FS(ctx)
	if err != nil {
		return nil, err
	}
	f, err := fio.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f, file.WithMetadata(md))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer pr.Close()
	// PreAllocBinaryData sizes the value column's buffer from the column
	// chunk's metadata once, instead of growing it by doubling (a fifth of
	// a cold fetch's CPU went to those copies); Parallel decodes the
	// columns of the row group at once, for the first row group a
	// consumer waits for.
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: RowGroupRows, PreAllocBinaryData: true, Parallel: true},
		memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, []int{rg})
	if err != nil {
		return nil, fmt.Errorf("read %s row group %d: %w", path, rg, err)
	}
	defer rr.Release()
	var out []*tributary.Record
	for rr.Next() {
		// Shared: the batch is Go memory owned by this decode alone, and
		// cached records are never modified.
		recs, err := RecordsFromArrowShared(rr.RecordBatch())
		if err != nil {
			return nil, fmt.Errorf("decode %s row group %d: %w", path, rg, err)
		}
		out = append(out, recs...)
	}
	if err := rr.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("read %s row group %d: %w", path, rg, err)
	}
	return out, nil
}

// CommittedFile is a data file of a table's current snapshot: the
// offsets of one partition it holds and the Origin its name records.
type CommittedFile struct {
	Path        string
	First, Last int64 // inclusive
	Origin      Origin
}

// Committed returns the data files of the table's current snapshot that
// hold offsets of [from, to) of partition p, by first offset. A
// high-water mark alone is a property anyone with write access to the
// catalog could have set, and a file holding the offsets may be another
// node's: the uplink asks this, and checks the files' origins, before it
// releases WAL records that it did not commit itself.
func (c *Catalog) Committed(ctx context.Context, stream string, p int32, from, to int64) ([]CommittedFile, error) {
	if to <= from {
		return nil, nil
	}
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	fs, err := planFiles(ctx, t, p, from)
	if err != nil {
		return nil, err
	}
	var out []CommittedFile
	for _, f := range fs {
		if f.last >= from && f.first < to {
			out = append(out, CommittedFile{Path: f.path, First: f.first, Last: f.last, Origin: FileOrigin(f.path)})
		}
	}
	slices.SortFunc(out, func(a, b CommittedFile) int { return cmp.Compare(a.First, b.First) })
	return out, nil
}
