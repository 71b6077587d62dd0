package tables

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/delta"
)

// DeltaRow is a row read through a stream's Delta log: the envelope as a
// record and, in a dead-letter table, why its payload was not typed.
type DeltaRow struct {
	Record *tributary.Record
	Error  string
}

// ScanDelta reads stream's rows through its Delta log in st with package
// delta's reader (not Iceberg's), in (partition, offset) order, those of
// opts.Partition (-1: all) at or above opts.FromOffset, at most
// opts.Limit (0: all). It returns the snapshot read too.
func (c *Catalog) ScanDelta(ctx context.Context, st delta.Store, stream string, opts ScanOptions) ([]DeltaRow, *delta.Snapshot, error) {
	root, err := c.DeltaRoot(stream)
	if err != nil {
		return nil, nil, err
	}
	dt := delta.NewTable(st, root)
	s, err := dt.Snapshot(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("delta %s: %w", stream, err)
	}
	rows, err := dt.Rows(ctx, s)
	if err != nil {
		return nil, s, fmt.Errorf("delta %s: %w", stream, err)
	}
	out := make([]DeltaRow, 0, len(rows))
	for _, r := range rows {
		rec, err := deltaRecord(r)
		if err != nil {
			return nil, s, fmt.Errorf("delta %s: %w", stream, err)
		}
		rec.Stream = stream
		if (opts.Partition >= 0 && rec.Partition != opts.Partition) || rec.Offset < opts.FromOffset {
			continue
		}
		e, _ := r[ColDLQError].(string)
		out = append(out, DeltaRow{Record: rec, Error: e})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Record, out[j].Record
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	if opts.Limit > 0 && int64(len(out)) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, s, nil
}

// deltaRecord is the envelope of a row the Delta reader gives.
func deltaRecord(r delta.Row) (*tributary.Record, error) {
	p, ok1 := r[ColPartition].(int64)
	off, ok2 := r[ColOffset].(int64)
	ts, ok3 := r[ColTimestamp].(time.Time)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("a row without partition, offset or timestamp: %v %v %v", r[ColPartition], r[ColOffset], r[ColTimestamp])
	}
	rec := &tributary.Record{Partition: int32(p), Offset: off, Timestamp: ts.UnixMicro()}
	rec.Topic, _ = r[ColTopic].(string)
	rec.Key, _ = r[ColKey].([]byte)
	rec.Value, _ = r[ColValue].([]byte)
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	rec.Source, _ = r[ColSource].(string)
	rec.ClientID, _ = r[ColClientID].(string)
	rec.Node, _ = r[ColNode].(string)
	rec.Principal, _ = r[ColPrincipal].(string)
	if pt, ok := r[ColProducerTimestamp].(time.Time); ok {
		rec.ProducerTimestamp = pt.UnixMilli()
	}
	hs, _ := r[ColHeaders].([]any)
	for _, h := range hs {
		m, _ := h.(map[string]any)
		k, _ := m["key"].(string)
		v, _ := m["value"].([]byte)
		rec.Headers = append(rec.Headers, tributary.Header{Key: k, Value: v})
	}
	return rec, nil
}
