package tables

import (
	"context"
	"fmt"
	"iter"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
)

// ScanOptions narrow a scan.
type ScanOptions struct {
	Partition  int32 // -1 = every partition
	FromOffset int64 // with Partition >= 0: only offsets >= FromOffset
	Limit      int64 // 0 = no limit
}

// Scan reads a stream's rows back from its table as records, file by file
// (not in global order: use ScanSorted for that).
func (c *Catalog) Scan(ctx context.Context, stream string, opts ScanOptions) iter.Seq2[*tributary.Record, error] {
	return func(yield func(*tributary.Record, error) bool) {
		t, err := c.LoadTable(ctx, stream)
		if err != nil {
			yield(nil, err)
			return
		}
		ScanTable(ctx, t, opts)(yield)
	}
}

// ScanTable is Scan on an already loaded table.
func ScanTable(ctx context.Context, t *table.Table, opts ScanOptions) iter.Seq2[*tributary.Record, error] {
	return func(yield func(*tributary.Record, error) bool) {
		scanBatches(ctx, t, opts, func(b arrow.RecordBatch, err error) bool {
			if err != nil {
				return yield(nil, err)
			}
			recs, err := RecordsFromArrow(b)
			if err != nil {
				return yield(nil, err)
			}
			for _, r := range recs {
				if !yield(r, nil) {
					return false
				}
			}
			return true
		})
	}
}

// ScanDeadLetters reads a dead-letter table (DLQStream) as dead letters:
// each record with the error that sent it there and the schema id it was
// checked against.
func ScanDeadLetters(ctx context.Context, t *table.Table, opts ScanOptions) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		scanBatches(ctx, t, opts, func(b arrow.RecordBatch, err error) bool {
			if err != nil {
				return yield(DeadLetter{}, err)
			}
			recs, err := RecordsFromArrow(b)
			if err != nil {
				return yield(DeadLetter{}, err)
			}
			var errCol *array.String
			var verCol *array.Int32
			if ix := b.Schema().FieldIndices(ColDLQError); len(ix) > 0 {
				errCol, _ = b.Column(ix[0]).(*array.String)
			}
			if ix := b.Schema().FieldIndices(ColDLQSchemaVersion); len(ix) > 0 {
				verCol, _ = b.Column(ix[0]).(*array.Int32)
			}
			for i, r := range recs {
				d := DeadLetter{Record: r}
				if errCol != nil && errCol.IsValid(i) {
					d.Error = strings.Clone(errCol.Value(i)) // the batch is released
				}
				if verCol != nil && verCol.IsValid(i) {
					d.SchemaVersion = verCol.Value(i)
				}
				if !yield(d, nil) {
					return false
				}
			}
			return true
		})
	}
}

// scanBatches runs t's scan for opts and hands each record batch (then
// released) or the error that ends the scan to f, until f says stop.
func scanBatches(ctx context.Context, t *table.Table, opts ScanOptions, f func(arrow.RecordBatch, error) bool) {
	var so []table.ScanOption
	if opts.Partition >= 0 {
		var e iceberg.BooleanExpression = iceberg.EqualTo(iceberg.Reference(ColPartition), opts.Partition)
		if opts.FromOffset > 0 {
			e = iceberg.NewAnd(e, iceberg.GreaterThanEqual(iceberg.Reference(ColOffset), opts.FromOffset))
		}
		so = append(so, table.WithRowFilter(e))
	}
	if opts.Limit > 0 {
		so = append(so, table.WithLimit(opts.Limit))
	}
	_, batches, err := t.Scan(so...).ToArrowRecords(ctx)
	if err != nil {
		f(nil, fmt.Errorf("scan %s: %w", t.Identifier(), err))
		return
	}
	for b, err := range batches {
		if err != nil {
			f(nil, fmt.Errorf("scan %s: %w", t.Identifier(), err))
			return
		}
		more := f(b, nil)
		b.Release()
		if !more {
			return
		}
	}
}

// ScanSorted collects a scan and orders it by (partition, offset).
func (c *Catalog) ScanSorted(ctx context.Context, stream string, opts ScanOptions) ([]*tributary.Record, error) {
	var out []*tributary.Record
	for r, err := range c.Scan(ctx, stream, opts) {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// RecordsFromArrow decodes an envelope record batch into records, copying
// all bytes. Columns are found by name, so projections work, and a column
// the batch lacks (principal, in files written before it existed) leaves
// its field zero.
func RecordsFromArrow(b arrow.RecordBatch) ([]*tributary.Record, error) {
	return recordsFromArrow(b, true)
}

// RecordsFromArrowShared is RecordsFromArrow except that keys and values
// alias the batch's buffers instead of being copied: only for batches in
// Go-allocated memory (memory.DefaultAllocator) that nobody reuses, and the
// records must be treated as read-only. It saves a copy of every payload
// on the Kafka fetch path.
func RecordsFromArrowShared(b arrow.RecordBatch) ([]*tributary.Record, error) {
	return recordsFromArrow(b, false)
}

func recordsFromArrow(b arrow.RecordBatch, copyBytes bool) ([]*tributary.Record, error) {
	n := int(b.NumRows())
	out := make([]*tributary.Record, n)
	backing := make([]tributary.Record, n)
	for i := range out {
		out[i] = &backing[i]
	}
	sc := b.Schema()
	for ci, f := range sc.Fields() {
		col := b.Column(ci)
		switch f.Name {
		case ColPartition:
			a := col.(*array.Int32)
			for i := range n {
				out[i].Partition = a.Value(i)
			}
		case ColOffset:
			a := col.(*array.Int64)
			for i := range n {
				out[i].Offset = a.Value(i)
			}
		case ColTimestamp:
			a := col.(*array.Timestamp)
			for i := range n {
				out[i].Timestamp = int64(a.Value(i))
			}
		case ColProducerTimestamp:
			a := col.(*array.Timestamp)
			for i := range n {
				if a.IsValid(i) {
					out[i].ProducerTimestamp = int64(a.Value(i)) / 1000
				}
			}
		case ColTopic, ColSource, ColClientID, ColNode, ColPrincipal:
			a, ok := col.(*array.String)
			if !ok {
				return nil, fmt.Errorf("column %s: unexpected type %s", f.Name, col.DataType())
			}
			for i := range n {
				if !a.IsValid(i) {
					continue // a null principal: anonymous, or a row from before the column
				}
				v := a.Value(i)
				switch f.Name {
				case ColTopic:
					out[i].Topic = v
				case ColSource:
					out[i].Source = v
				case ColClientID:
					out[i].ClientID = v
				case ColNode:
					out[i].Node = v
				case ColPrincipal:
					out[i].Principal = v
				}
			}
		case ColKey, ColValue:
			a, ok := col.(*array.Binary)
			if !ok {
				return nil, fmt.Errorf("column %s: unexpected type %s", f.Name, col.DataType())
			}
			for i := range n {
				if !a.IsValid(i) {
					continue
				}
				v := a.Value(i)
				if copyBytes {
					v = append([]byte{}, v...)
				} else {
					v = v[:len(v):len(v)]
				}
				if f.Name == ColKey {
					out[i].Key = v
				} else {
					out[i].Value = v
				}
			}
		case ColHeaders:
			l, ok := col.(*array.List)
			if !ok {
				return nil, fmt.Errorf("column headers: unexpected type %s", col.DataType())
			}
			st := l.ListValues().(*array.Struct)
			ks := st.Field(0).(*array.String)
			vs := st.Field(1).(*array.Binary)
			for i := range n {
				if !l.IsValid(i) {
					continue
				}
				s, e := l.ValueOffsets(i)
				hs := make([]tributary.Header, 0, e-s)
				for j := int(s); j < int(e); j++ {
					h := tributary.Header{Key: ks.Value(j)}
					if vs.IsValid(j) {
						h.Value = append([]byte{}, vs.Value(j)...)
					}
					hs = append(hs, h)
				}
				out[i].Headers = hs
			}
		}
	}
	return out, nil
}
