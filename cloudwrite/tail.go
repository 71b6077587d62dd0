package cloudwrite

import (
	"context"
	"fmt"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/internal/lru"
)

// DefaultTailCacheBytes bounds the decoded segments a Tail keeps.
const DefaultTailCacheBytes = 64 << 20

// Tail reads sequenced records, the offsets of cloud-produced partitions
// beyond their table's mark, from the WAL objects; safe for concurrent
// use. Every reader of the cloud server asks it for what the table does
// not hold yet.
type Tail struct {
	st    *State
	store Store
	cache *lru.Cache // "object@pos" -> *wire.Segment
}

// NewTail returns a Tail over st and store caching up to cacheBytes of
// decoded segments (0 = DefaultTailCacheBytes).
func NewTail(st *State, store Store, cacheBytes int64) *Tail {
	if cacheBytes <= 0 {
		cacheBytes = DefaultTailCacheBytes
	}
	return &Tail{st: st, store: store, cache: lru.New(cacheBytes)}
}

// End is the partition's next offset to be sequenced (0, false when the
// cloud has sequenced nothing for it).
func (t *Tail) End(ctx context.Context, stream string, p int32) (int64, bool, error) {
	return t.st.End(ctx, stream, p)
}

// Read returns the records of offsets from on, in order, stopping after
// about maxBytes of values (at least one record if any) and at the end
// of what is sequenced. The records are dense from from: where the range
// holding from is gone (forgotten after the table committed it) the
// result is empty, and the caller reads the table instead.
func (t *Tail) Read(ctx context.Context, stream string, p int32, from int64, maxBytes int) ([]*tributary.Record, error) {
	var out []*tributary.Record
	size := 0
	for {
		rs, err := t.st.Ranges(ctx, stream, p, from, 64)
		if err != nil {
			return nil, err
		}
		if len(rs) == 0 {
			return out, nil
		}
		for _, r := range rs {
			if r.First > from {
				return out, nil // forgotten: never skip offsets
			}
			seg, err := t.segment(ctx, r)
			if err != nil {
				return nil, err
			}
			if int64(len(seg.Records)) != r.End-r.First {
				return nil, fmt.Errorf("%w: %s segment at %d holds %d records, sequenced as [%d,%d)", wire.ErrCorrupt, r.Object, r.Ref.Pos, len(seg.Records), r.First, r.End)
			}
			for i, rec := range seg.Records {
				off := r.First + int64(i)
				if off < from {
					continue
				}
				c := *rec
				c.Offset = off
				out = append(out, &c)
				size += len(c.Value) + len(c.Key)
				if size >= maxBytes {
					return out, nil
				}
			}
			from = r.End
		}
	}
}

// segment reads (or finds cached) the segment of r.
func (t *Tail) segment(ctx context.Context, r Range) (*wire.Segment, error) {
	k := fmt.Sprintf("%s@%d", r.Object, r.Ref.Pos)
	v, ok := t.cache.Get(k)
	if ok {
		return v.(*wire.Segment), nil
	}
	b, err := t.store.ReadRange(ctx, r.Object, r.Ref.Pos, r.Ref.Len)
	if err != nil {
		return nil, fmt.Errorf("read WAL object %s: %w", r.Object, err)
	}
	seg, err := wire.DecodeSegment(b)
	if err != nil {
		return nil, fmt.Errorf("WAL object %s at %d: %w", r.Object, r.Ref.Pos, err)
	}
	t.cache.Add(k, seg, int64(len(b))*2+1024)
	return seg, nil
}
