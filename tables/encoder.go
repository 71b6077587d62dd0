package tables

import (
	"bytes"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/tributary-io/tributary"
)

// Encoder writes the Parquet file of the envelope (WriteParquet) a few
// records at a time, into memory: the uplink's continuous encoding
// (uplink/preencode.go) fills one as records land and closes it at sync
// time. Records are handed to the column writers in the chunks and row
// groups WriteParquet uses (pqChunkRows rows from the file's first,
// RowGroupRows per group): whatever the sizes of the Append calls, the
// file's bytes are those WriteParquet writes for the same records. The
// last, incomplete chunk is held (as record pointers) until it fills or
// Close. An Encoder is not safe for concurrent use.
//
// NewShapedEncoder's Encoder writes a typed stream's file
// (WriteParquetShaped): AppendShaped takes each record's typed columns
// from a Shaped of the same schema, and the pending chunk's are held
// with its records.
type Encoder struct {
	o       ParquetOptions
	buf     bytes.Buffer
	pw      *parquet.Writer
	f       *pqFiller
	st      FileStats
	n       int                 // rows handed to the column writers
	pending []*tributary.Record // the chunk being gathered
	err     error

	// Typed streams: the schema (nil: the envelope), the pending chunk's
	// typed columns (chunk.base is pending[0]'s offset) and whether the
	// file has event times (FileStats' event-time bounds).
	schema     *iceberg.Schema
	chunk      *Shaped
	eventTimes bool
	seenET     bool
}

// NewEncoder starts an empty file of the envelope.
func (o ParquetOptions) NewEncoder() (*Encoder, error) {
	if err := CheckZstdLevel(o.ZstdLevel); err != nil {
		return nil, fmt.Errorf("write parquet: %w", err)
	}
	e := &Encoder{o: o, f: envelopePlan.filler(), pending: make([]*tributary.Record, 0, pqChunkRows)}
	e.pw = o.newWriter(&e.buf, envelopePlan)
	return e, nil
}

// NewShapedEncoder starts an empty file of a typed stream's table with
// sh's schema (sh.Schema): the file WriteParquetShaped writes.
func (o ParquetOptions) NewShapedEncoder(sh *Shaped) (*Encoder, error) {
	if err := CheckZstdLevel(o.ZstdLevel); err != nil {
		return nil, fmt.Errorf("write parquet: %w", err)
	}
	e := &Encoder{o: o, f: sh.plan.filler(), pending: make([]*tributary.Record, 0, pqChunkRows),
		schema: sh.Schema, chunk: &Shaped{Schema: sh.Schema, plan: sh.plan, strict: sh.strict},
		eventTimes: sh.plan.has(ColEventTime)}
	e.pw = o.newWriter(&e.buf, sh.plan)
	return e, nil
}

// Schema is the schema of a typed stream's file (nil: the envelope's).
func (e *Encoder) Schema() *iceberg.Schema { return e.schema }

// Records is how many records were appended.
func (e *Encoder) Records() int64 { return e.st.Records }

// Next is the offset the next appended record must have (meaningless
// while Records is 0).
func (e *Encoder) Next() int64 { return e.st.LastOffset + 1 }

// Size is the encoded bytes so far (the pending chunk and the open row
// group's pages not counted).
func (e *Encoder) Size() int { return e.buf.Len() }

// Append adds recs, which must continue the file: consecutive offsets of
// its partition. An Encoder of a typed stream takes AppendShaped.
func (e *Encoder) Append(recs []*tributary.Record) error {
	if e.err == nil && e.schema != nil {
		e.err = fmt.Errorf("write parquet: a typed file needs its records shaped")
	}
	return e.append(recs, nil)
}

// AppendShaped adds recs, which must continue the file, with their typed
// columns from sh (a Shaped of these records, of the file's schema).
func (e *Encoder) AppendShaped(recs []*tributary.Record, sh *Shaped) error {
	if e.err == nil && (e.schema == nil || !SameSchema(e.schema, sh.Schema)) {
		e.err = fmt.Errorf("write parquet: records shaped with another schema than the file's")
	}
	return e.append(recs, sh)
}

func (e *Encoder) append(recs []*tributary.Record, sh *Shaped) error {
	if e.err != nil {
		return e.err
	}
	for _, r := range recs {
		if e.st.Records == 0 {
			e.st = FileStats{Partition: r.Partition, FirstOffset: r.Offset, LastOffset: r.Offset - 1,
				MinTimestamp: r.Timestamp, MaxTimestamp: r.Timestamp}
		}
		if r.Partition != e.st.Partition || r.Offset != e.st.LastOffset+1 {
			e.err = fmt.Errorf("write parquet: record %d is %d@%d, want offset %d of partition %d",
				e.st.Records, r.Offset, r.Partition, e.st.LastOffset+1, e.st.Partition)
			return e.err
		}
		e.st.Records++
		e.st.LastOffset = r.Offset
		e.st.add(r)
		if sh != nil {
			if err := e.shaped(r, sh); err != nil {
				return err
			}
		}
		e.pending = append(e.pending, r)
		if len(e.pending) == pqChunkRows {
			if err := e.writeChunk(); err != nil {
				return err
			}
		}
	}
	return nil
}

// shaped takes r's typed columns from sh into the pending chunk's, and
// counts its event time into the stats as WriteParquetShaped does.
func (e *Encoder) shaped(r *tributary.Record, sh *Shaped) error {
	i := r.Offset - sh.base
	if i < 0 || i >= int64(len(sh.vals)) {
		e.err = fmt.Errorf("write parquet: record at offset %d is not in the shaped batch", r.Offset)
		return e.err
	}
	c := e.chunk
	if len(e.pending) == 0 {
		c.base = r.Offset
	}
	c.vals, c.errs = append(c.vals, sh.vals[i]), append(c.errs, sh.errs[i])
	if !e.eventTimes {
		return nil
	}
	us := sh.eventTime(r.Offset)
	c.eventTimes = append(c.eventTimes, us)
	e.st.EventTimes = true
	switch {
	case us == noEventTime:
		e.st.NullEventTimes++
	case !e.seenET:
		e.st.MinEventTime, e.st.MaxEventTime, e.seenET = us, us, true
	default:
		e.st.MinEventTime, e.st.MaxEventTime = min(e.st.MinEventTime, us), max(e.st.MaxEventTime, us)
	}
	return nil
}

// writeChunk hands the pending records to the column writers, and ends
// the row group when it is full.
func (e *Encoder) writeChunk() error {
	rows := pqRows{recs: e.pending}
	if e.schema != nil {
		rows.sh = e.chunk
	}
	e.f.fill(rows, 0, len(e.pending))
	cws := e.pw.ColumnWriters()
	for i, l := range e.f.leaves {
		if _, err := cws[i].WriteRowValues(l.vals); err != nil {
			e.err = fmt.Errorf("write parquet: column %d: %w", i, err)
			return e.err
		}
	}
	e.n += len(e.pending)
	clear(e.pending)
	e.pending = e.pending[:0]
	if c := e.chunk; c != nil {
		clear(c.vals)
		c.vals, c.errs, c.eventTimes = c.vals[:0], c.errs[:0], c.eventTimes[:0]
	}
	if e.n%RowGroupRows == 0 {
		if err := e.pw.Flush(); err != nil {
			e.err = fmt.Errorf("write parquet: %w", err)
			return e.err
		}
	}
	return nil
}

// Close finishes the file and returns its bytes and stats; the Encoder is
// done with.
func (e *Encoder) Close() ([]byte, FileStats, error) {
	if e.err != nil {
		return nil, FileStats{}, e.err
	}
	if e.st.Records == 0 {
		return nil, FileStats{}, fmt.Errorf("write parquet: no records")
	}
	if len(e.pending) > 0 {
		if err := e.writeChunk(); err != nil {
			return nil, FileStats{}, err
		}
	}
	if e.n%RowGroupRows != 0 {
		if err := e.pw.Flush(); err != nil {
			return nil, FileStats{}, fmt.Errorf("write parquet: %w", err)
		}
	}
	if err := e.pw.Close(); err != nil {
		return nil, FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	e.err = fmt.Errorf("write parquet: encoder closed")
	return e.buf.Bytes(), e.st, nil
}
