package kafka

// Reading streams back from their tables for Fetch and ListOffsets, with
// the two caches of the consume side:
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
//     neither needs invalidation.

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// dataFile is one data file of one partition: offsets [first, last].
type dataFile struct {
	path         string
	first, last  int64
	minTS, maxTS int64 // acceptance timestamps, unix micros
}

// partIndex is the file index of one partition at one snapshot.
type partIndex struct {
	snapID int64
	files  []dataFile // sorted by first, contiguous
}

type streamEntry struct {
	mu     sync.Mutex
	t      *table.Table
	loaded time.Time
	parts  map[int32]*partIndex
}

// tableCache caches table metadata, file indexes, footers and row groups.
type tableCache struct {
	cat    *tables.Catalog
	maxAge time.Duration

	mu      sync.Mutex
	streams map[string]*streamEntry
	list    []string
	listAt  time.Time

	rows    *lru // rgKey -> *rowGroup
	footers *lru // path -> *metadata.FileMetaData

	loadMu  sync.Mutex
	loading map[rgKey]*rgLoad // row groups being decoded
}

// rgLoad is one in-flight decode of a row group, shared by every caller
// that wants it.
type rgLoad struct {
	done chan struct{}
	g    *rowGroup
	err  error
}

func newTableCache(cat *tables.Catalog, maxAge time.Duration, rowBytes int64) *tableCache {
	return &tableCache{cat: cat, maxAge: maxAge, streams: map[string]*streamEntry{},
		rows: newLRU(rowBytes), footers: newLRU(4096), loading: map[rgKey]*rgLoad{}}
}

// streams lists the stream tables, cached for a second.
func (tc *tableCache) listStreams(ctx context.Context) ([]string, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.list != nil && time.Since(tc.listAt) < time.Second {
		return tc.list, nil
	}
	l, err := tc.cat.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(l)
	tc.list, tc.listAt = l, time.Now()
	return l, nil
}

func (tc *tableCache) entry(stream string) *streamEntry {
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
// tables.ErrNoSuchStream means there is no such stream.
func (tc *tableCache) table(ctx context.Context, stream string) (*table.Table, error) {
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

// partitions lists a stream table's partitions: those allocated to a node
// and those with a committed mark.
func partitionsOf(t *table.Table) []int32 {
	seen := map[int32]bool{}
	for k, v := range t.Properties() {
		if strings.HasPrefix(k, tables.PropNodePartition) {
			if p, err := strconv.ParseInt(v, 10, 32); err == nil {
				seen[int32(p)] = true
			}
		}
	}
	for p := range tables.HighWaters(t) {
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
func (tc *tableCache) files(ctx context.Context, stream string, t *table.Table, p int32) ([]dataFile, error) {
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
	var have []dataFile
	if idx != nil && len(idx.files) > 0 {
		have = idx.files
		from = have[len(have)-1].last + 1
	}
	add, err := planFiles(ctx, t, p, from)
	if err != nil {
		return nil, err
	}
	files := append(append([]dataFile(nil), have...), add...)
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

func contiguous(fs []dataFile) bool {
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
func planFiles(ctx context.Context, t *table.Table, p int32, from int64) ([]dataFile, error) {
	var f iceberg.BooleanExpression = iceberg.EqualTo(iceberg.Reference(tables.ColPartition), p)
	if from > 0 {
		f = iceberg.NewAnd(f, iceberg.GreaterThanEqual(iceberg.Reference(tables.ColOffset), from))
	}
	tasks, err := t.Scan(table.WithRowFilter(f)).PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan %s partition %d: %w", t.Identifier(), p, err)
	}
	out := make([]dataFile, 0, len(tasks))
	for _, task := range tasks {
		df := task.File
		lo, hi := df.LowerBoundValues(), df.UpperBoundValues()
		first, ok1 := le64(lo[tables.FieldOffset])
		last, ok2 := le64(hi[tables.FieldOffset])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("plan %s: file %s has no offset bounds", t.Identifier(), df.FilePath())
		}
		if last-first+1 != df.Count() {
			return nil, fmt.Errorf("plan %s: file %s is not one contiguous offset range", t.Identifier(), df.FilePath())
		}
		minTS, _ := le64(lo[tables.FieldTimestamp])
		maxTS, _ := le64(hi[tables.FieldTimestamp])
		out = append(out, dataFile{path: df.FilePath(), first: first, last: last, minTS: minTS, maxTS: maxTS})
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
	recs  []*wal.Record
	size  int64
}

type rgKey struct {
	path string
	rg   int
}

const recordOverhead = 160 // bytes of a *wal.Record beyond its payloads

// rowsAt returns the decoded row group of f holding offset off.
func (tc *tableCache) rowsAt(ctx context.Context, t *table.Table, f dataFile, off int64) (*rowGroup, error) {
	md, err := tc.footer(ctx, t, f.path)
	if err != nil {
		return nil, err
	}
	start := f.first
	rg := -1
	for i := range md.NumRowGroups() {
		n := md.RowGroup(i).NumRows()
		if off < start+n {
			rg = i
			break
		}
		start += n
	}
	if rg < 0 {
		return nil, fmt.Errorf("offset %d not in %s", off, f.path)
	}
	key := rgKey{f.path, rg}
	if v, ok := tc.rows.get(key); ok {
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
	l := &rgLoad{done: make(chan struct{})}
	tc.loading[key] = l
	tc.loadMu.Unlock()
	l.g, l.err = tc.decode(ctx, t, f, md, rg, start)
	tc.loadMu.Lock()
	delete(tc.loading, key)
	tc.loadMu.Unlock()
	close(l.done)
	return l.g, l.err
}

// prefetch decodes the row group holding off in the background, so that a
// consumer reading sequentially finds it decoded.
func (tc *tableCache) prefetch(t *table.Table, f dataFile, off int64) {
	md, ok := tc.footers.get(f.path)
	if ok {
		start, rg := f.first, -1
		m := md.(*metadata.FileMetaData)
		for i := range m.NumRowGroups() {
			if n := m.RowGroup(i).NumRows(); off < start+n {
				rg = i
				break
			} else {
				start += n
			}
		}
		key := rgKey{f.path, rg}
		if _, ok := tc.rows.get(key); ok {
			return
		}
		tc.loadMu.Lock()
		l := tc.loading[key]
		tc.loadMu.Unlock()
		if l != nil {
			return
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tc.rowsAt(ctx, t, f, off)
	}()
}

func (tc *tableCache) decode(ctx context.Context, t *table.Table, f dataFile, md *metadata.FileMetaData, rg int, start int64) (*rowGroup, error) {
	key := rgKey{f.path, rg}
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
	tc.rows.add(key, g, g.size)
	return g, nil
}

func (tc *tableCache) footer(ctx context.Context, t *table.Table, path string) (*metadata.FileMetaData, error) {
	if v, ok := tc.footers.get(path); ok {
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
	tc.footers.add(path, md, 1)
	return md, nil
}

func readRowGroup(ctx context.Context, t *table.Table, path string, md *metadata.FileMetaData, rg int) ([]*wal.Record, error) {
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
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: tables.RowGroupRows}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, []int{rg})
	if err != nil {
		return nil, fmt.Errorf("read %s row group %d: %w", path, rg, err)
	}
	defer rr.Release()
	var out []*wal.Record
	for rr.Next() {
		// Shared: the batch is Go memory owned by this decode alone, and
		// cached records are never modified.
		recs, err := tables.RecordsFromArrowShared(rr.RecordBatch())
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

// lru is a size-bounded least-recently-used cache.
type lru struct {
	mu    sync.Mutex
	max   int64
	size  int64
	ll    *list.List
	items map[any]*list.Element
}

type lruItem struct {
	key  any
	val  any
	size int64
}

func newLRU(max int64) *lru { return &lru{max: max, ll: list.New(), items: map[any]*list.Element{}} }

func (c *lru) get(k any) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*lruItem).val, true
	}
	return nil, false
}

func (c *lru) add(k, v any, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.size -= el.Value.(*lruItem).size
		c.ll.Remove(el)
	}
	c.items[k] = c.ll.PushFront(&lruItem{k, v, size})
	c.size += size
	for c.size > c.max && c.ll.Len() > 1 {
		el := c.ll.Back()
		it := el.Value.(*lruItem)
		c.ll.Remove(el)
		delete(c.items, it.key)
		c.size -= it.size
	}
}

func (c *lru) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
