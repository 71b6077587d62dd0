package subscription

// TableSource: a topic partition's committed rows, read through tables.Reader.
//
// Offsets are the table's offset column; nothing at or beyond the
// partition's committed mark is returned. A partition that has no data
// yet (allocated to no node) is empty: End 0. Reads below the table's
// earliest offset (data deleted by retention) start at the earliest.

import (
	"context"
	"errors"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// TableSource is a Source over a stream partition's table rows, read
// through r (the consume servers' shared reader).
type TableSource struct {
	r         *tables.Reader
	stream    string
	partition int32
}

// NewTableSource is the Source of partition p of stream.
func NewTableSource(r *tables.Reader, stream string, p int32) *TableSource {
	return &TableSource{r: r, stream: stream, partition: p}
}

// view is the partition now, or nil when it does not exist yet.
func (s *TableSource) view(ctx context.Context) (*tables.Partition, error) {
	v, err := s.r.Partition(ctx, s.stream, s.partition)
	if errors.Is(err, tables.ErrNoSuchPartition) {
		return nil, nil
	}
	return v, err
}

// Read returns up to limit entries from offset from on.
func (s *TableSource) Read(ctx context.Context, from int64, limit int) ([]Entry, error) {
	v, err := s.view(ctx)
	if v == nil || err != nil || limit <= 0 {
		return nil, err
	}
	out := make([]Entry, 0, min(limit, 1024))
	err = v.Read(ctx, max(from, v.Earliest), func(r *tributary.Record) bool {
		out = append(out, Entry{Offset: r.Offset, Record: r})
		return len(out) < limit
	})
	if err != nil && len(out) > 0 {
		return out, nil // what was read is good; the error comes back next time
	}
	return out, err
}

// End is the next offset not yet committed.
func (s *TableSource) End(ctx context.Context) (int64, error) {
	v, err := s.view(ctx)
	if v == nil || err != nil {
		return 0, err
	}
	return v.End, nil
}

// OffsetForTime is the first offset accepted at or after t, or End.
func (s *TableSource) OffsetForTime(ctx context.Context, t time.Time) (int64, error) {
	v, err := s.view(ctx)
	if v == nil || err != nil {
		return 0, err
	}
	r, err := v.OffsetForTime(ctx, t.UnixMicro())
	if err != nil {
		return 0, err
	}
	if r == nil {
		return v.End, nil
	}
	return r.Offset, nil
}
