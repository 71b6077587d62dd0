package consume

// Encoded record batches, cached per row group.
//
// Invariants:
//   - A row group's rows are encoded once, as consecutive uncompressed
//     record batches (kafka.AppendBatch) of at most batchBytes of records
//     each, and cached under the row group's tables.RowGroupKey: data
//     files are immutable, so a cached batch never needs invalidation.
//     The cache is bounded by BatchCacheBytes of encoded bytes, and a
//     long scan cannot flush it (lru.Segmented): a row group enters on
//     probation, and only a fetch by another connection than the one it
//     was built for makes it protected (at most 3/4 of the cache). A
//     consumer catching up over more than the cache cycles through
//     probation; the hot tail that several tailing consumers read stays.
//   - A fetch at offset X returns whole batches, from the one holding X
//     on, as many as fit in the partition's limit (at least one when the
//     response has nothing yet, KIP-74). Kafka brokers do the same: the
//     client skips the records before its fetch offset.
//   - Nothing at or beyond the committed mark is served: a batch reaching
//     past it (only possible while the file index is ahead of the mark
//     being served) is never returned; its records below the mark are
//     encoded on the spot instead.
//
// Outline: fetch locates the row group of the offset from the Parquet
// footer (tables.Partition.RowGroupAt), takes its batches from the cache
// or builds them (one build per row group however many fetchers ask:
// build, straight from the data file's pages by internal/pqkafka, or
// from the rows the shared tables.Reader decodes when the file is not in
// the envelope's layout), and starts building the
// next prefetch row groups in the background on at most workers builders,
// so that a consumer finds them encoded and a cold partition is decoded
// on several cores at once.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/lru"
	"github.com/tributary-io/tributary/internal/pqkafka"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

// Defaults of the batch cache.
const (
	DefaultBatchCacheBytes = 256 << 20
	// batchBytes bounds the records of one cached batch: small enough
	// that a 1 MiB partition limit is filled by whole batches, large
	// enough that batch headers and client bookkeeping are negligible.
	batchBytes = 128 << 10
	// prefetchGroups is how many row groups past the one fetched are
	// encoded ahead.
	prefetchGroups = 4
)

// encodedGroup is the record batches of one row group: batch i holds
// offsets [ends[i-1], ends[i]) (ends[-1] = first) at buf[starts[i]:starts[i+1]].
type encodedGroup struct {
	first  int64
	buf    []byte
	ends   []int64
	starts []int
}

func (g *encodedGroup) size() int64 { return int64(cap(g.buf)) + int64(len(g.ends))*16 + 64 }

// base is the first offset of batch i.
func (g *encodedGroup) base(i int) int64 {
	if i == 0 {
		return g.first
	}
	return g.ends[i-1]
}

// encodeGroup encodes recs, offsets first, first+1, …, as batches.
func encodeGroup(first int64, recs []*tributary.Record) *encodedGroup {
	need := 0
	for _, r := range recs {
		need += kafka.RecordSize(r)
	}
	g := &encodedGroup{first: first, buf: make([]byte, 0, need+need/batchBytes*61+64)}
	for i := 0; i < len(recs); {
		j, size := i+1, kafka.RecordSize(recs[i])
		for j < len(recs) && size+kafka.RecordSize(recs[j]) <= batchBytes {
			size += kafka.RecordSize(recs[j])
			j++
		}
		g.starts = append(g.starts, len(g.buf))
		g.buf = kafka.AppendBatch(g.buf, recs[i:j])
		g.ends = append(g.ends, first+int64(j))
		i = j
	}
	g.starts = append(g.starts, len(g.buf))
	return g
}

// decoders are the reusable buffers of direct row-group encodes.
var decoders = sync.Pool{New: func() any { return new(pqkafka.Decoder) }}

// build encodes row group ref: straight from the Parquet pages into
// batches (package pqkafka), or, for a file without the envelope's layout
// (pqkafka.ErrUnsupported), from the records the table reader decodes.
func build(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef) (*encodedGroup, error) {
	g, err := buildDirect(ctx, v, ref)
	if !errors.Is(err, pqkafka.ErrUnsupported) {
		return g, err
	}
	recs, err := v.Rows(ctx, ref)
	if err != nil {
		return nil, err
	}
	return encodeGroup(ref.First, recs), nil
}

func buildDirect(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef) (*encodedGroup, error) {
	return encodeDirect(ctx, v, ref, func(d *pqkafka.Decoder, pf *parquet.File) (*pqkafka.Group, error) {
		return d.Encode(pf, ref.Key.Index, ref.First, batchBytes)
	})
}

// buildPrefix encodes the batches of ref up to the one holding off and
// about limit bytes after it (pqkafka.EncodePrefix), not cached.
func buildPrefix(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef, off int64, limit int) (*encodedGroup, error) {
	return encodeDirect(ctx, v, ref, func(d *pqkafka.Decoder, pf *parquet.File) (*pqkafka.Group, error) {
		return d.EncodePrefix(pf, ref.Key.Index, ref.First, batchBytes, off, limit)
	})
}

func encodeDirect(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef,
	encode func(*pqkafka.Decoder, *parquet.File) (*pqkafka.Group, error)) (*encodedGroup, error) {
	f, size, err := v.OpenFile(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pf, err := pqkafka.Open(f, size)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ref.Key.Path, err)
	}
	if n := len(pf.RowGroups()); ref.Key.Index >= n {
		return nil, fmt.Errorf("read %s: %w: row group %d of %d", ref.Key.Path, pqkafka.ErrCorrupt, ref.Key.Index, n)
	}
	if rows := pf.RowGroups()[ref.Key.Index].NumRows(); rows != ref.Count {
		return nil, fmt.Errorf("read %s: %w: row group %d has %d rows, the footer said %d", ref.Key.Path, pqkafka.ErrCorrupt, ref.Key.Index, rows, ref.Count)
	}
	d := decoders.Get().(*pqkafka.Decoder)
	defer decoders.Put(d)
	g, err := encode(d, pf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ref.Key.Path, err)
	}
	return &encodedGroup{first: g.First, buf: g.Buf, ends: g.Ends, starts: g.Starts}, nil
}

// batchCache holds encoded row groups; safe for concurrent use.
type batchCache struct {
	groups  *lru.Segmented // tables.RowGroupKey -> *encodedGroup
	mu      sync.Mutex
	loading map[tables.RowGroupKey]*groupLoad
	workers chan struct{} // one token per background build
	depth   int
	log     func(msg string, args ...any)
	builds  atomic.Int64 // row groups encoded
}

type groupLoad struct {
	done chan struct{}
	g    *encodedGroup
	err  error
}

func newBatchCache(maxBytes int64, log func(string, ...any)) *batchCache {
	return &batchCache{groups: lru.NewSegmented(maxBytes), loading: map[tables.RowGroupKey]*groupLoad{},
		workers: make(chan struct{}, max(2, runtime.GOMAXPROCS(0))), depth: prefetchGroups, log: log}
}

// get returns the encoded batches of ref for reader (the connection
// fetching: see the cache's policy), building them once.
func (bc *batchCache) get(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef, reader string) (*encodedGroup, error) {
	if g, ok := bc.groups.Get(ref.Key, reader); ok {
		return g.(*encodedGroup), nil
	}
	bc.mu.Lock()
	if l := bc.loading[ref.Key]; l != nil {
		bc.mu.Unlock()
		select {
		case <-l.done:
			return l.g, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g, ok := bc.groups.Get(ref.Key, reader); ok { // built between the miss and the lock
		bc.mu.Unlock()
		return g.(*encodedGroup), nil
	}
	l := &groupLoad{done: make(chan struct{})}
	bc.loading[ref.Key] = l
	bc.mu.Unlock()
	l.g, l.err = build(ctx, v, ref)
	if l.err == nil {
		bc.builds.Add(1)
		bc.groups.Add(ref.Key, l.g, l.g.size(), reader)
	}
	bc.mu.Lock()
	delete(bc.loading, ref.Key)
	bc.mu.Unlock()
	close(l.done)
	return l.g, l.err
}

// prefixMinRows: row groups of fewer rows are built whole for their first
// fetch.
const prefixMinRows = 4096

// firstTouch answers the first fetch of a row group nobody has built or
// is building: the whole row group's build starts in the background, and
// the fetch is answered from the batches of a prefix of the row group
// (pqkafka.EncodePrefix: the same bytes as the whole build's first
// batches), so the consumer's first records do not wait for the rest of
// the row group. nil when the row group is cached, being built, small,
// no builder is free, or the prefix holds nothing to answer with: the
// caller goes the usual way.
func (bc *batchCache) firstTouch(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef, reader string, off int64, limit int, atLeastOne bool) []byte {
	if ref.Count < prefixMinRows {
		return nil
	}
	if _, ok := bc.groups.Get(ref.Key, reader); ok {
		return nil
	}
	bc.mu.Lock()
	busy := bc.loading[ref.Key] != nil
	bc.mu.Unlock()
	if busy {
		return nil
	}
	select {
	case bc.workers <- struct{}{}:
	default:
		return nil
	}
	go func() {
		defer func() { <-bc.workers }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := bc.get(ctx, v, ref, reader); err != nil {
			bc.log("kafka: build row group", "path", ref.Key.Path, "row_group", ref.Key.Index, "err", err)
		}
	}()
	p, err := buildPrefix(ctx, v, ref, off, limit)
	if err != nil {
		return nil // the whole build reports it
	}
	i := sort.Search(len(p.ends), func(i int) bool { return p.ends[i] > off })
	j := i
	for ; j < len(p.ends) && p.ends[j] <= v.End; j++ {
		if p.starts[j+1]-p.starts[i] > limit && !(atLeastOne && j == i) {
			break
		}
	}
	if j == i {
		return nil
	}
	return p.buf[p.starts[i]:p.starts[j]:p.starts[j]]
}

// prefetch builds the row groups after ref in the background, up to depth
// of them, as far as builders are free.
func (bc *batchCache) prefetch(ctx context.Context, v *tables.Partition, ref tables.RowGroupRef, reader string) {
	for k := 0; k < bc.depth; k++ {
		next, ok, err := v.Next(ctx, ref)
		if err != nil || !ok {
			return
		}
		ref = next
		if _, ok := bc.groups.Get(ref.Key, reader); ok {
			continue
		}
		bc.mu.Lock()
		busy := bc.loading[ref.Key] != nil
		bc.mu.Unlock()
		if busy {
			continue
		}
		select {
		case bc.workers <- struct{}{}:
		default:
			return // every builder is busy; the next fetch looks again
		}
		go func(ref tables.RowGroupRef) {
			defer func() { <-bc.workers }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := bc.get(ctx, v, ref, reader); err != nil {
				bc.log("kafka: prefetch row group", "path", ref.Key.Path, "row_group", ref.Key.Index, "err", err)
			}
		}(ref)
	}
}

// fetch returns the record batches of v from offset off on: whole cached
// batches (the first may start before off), at most limit bytes unless
// atLeastOne and nothing else would be returned, never reaching the mark.
// An error is returned only when nothing could be read.
func (bc *batchCache) fetch(ctx context.Context, v *tables.Partition, off int64, limit int, atLeastOne bool, reader string) ([]byte, error) {
	var out []byte
	aliased := false // out is a slice of a cached group: copy before appending
	add := func(b []byte) {
		switch {
		case len(b) == 0:
		case len(out) == 0:
			out, aliased = b[:len(b):len(b)], true
		case aliased:
			out = append(append(make([]byte, 0, min(limit, len(out)+len(b)*4)), out...), b...)
			aliased = false
		default:
			out = append(out, b...)
		}
	}
	for off < v.End {
		ref, ok, err := v.RowGroupAt(ctx, off)
		if err != nil || !ok {
			return out, errIfEmpty(out, err)
		}
		if len(out) == 0 {
			if b := bc.firstTouch(ctx, v, ref, reader, off, limit, atLeastOne); b != nil {
				return b, nil
			}
		}
		g, err := bc.get(ctx, v, ref, reader)
		if err != nil {
			return out, errIfEmpty(out, err)
		}
		bc.prefetch(ctx, v, ref, reader)
		i := sort.Search(len(g.ends), func(i int) bool { return g.ends[i] > off })
		j := i
		for ; j < len(g.ends) && g.ends[j] <= v.End; j++ {
			n := g.starts[j+1] - g.starts[j]
			if len(out)+(g.starts[j]-g.starts[i])+n > limit && !(atLeastOne && len(out) == 0 && j == i) {
				add(g.buf[g.starts[i]:g.starts[j]])
				return out, nil
			}
		}
		if j > i {
			add(g.buf[g.starts[i]:g.starts[j]])
		}
		if j < len(g.ends) {
			// Batch j reaches past the mark: its records below the mark,
			// encoded now.
			recs, err := v.Rows(ctx, ref)
			if err != nil {
				return out, errIfEmpty(out, err)
			}
			from := max(off, g.base(j))
			var part []*tributary.Record
			size := len(out)
			for k := from - ref.First; k < int64(len(recs)) && ref.First+k < v.End; k++ {
				n := kafka.RecordSize(recs[k])
				if size+n > limit && !(atLeastOne && size == 0) {
					break
				}
				part = append(part, recs[k])
				size += n
			}
			if len(part) > 0 {
				add(kafka.AppendBatch(nil, part))
			}
			return out, nil
		}
		off = ref.End()
	}
	return out, nil
}

func errIfEmpty(out []byte, err error) error {
	if len(out) > 0 {
		return nil // what was read is good; the error comes back next time
	}
	return err
}
