package tables

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"github.com/apache/iceberg-go"
	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/kbatch"
	"github.com/tributary-io/tributary/tables/typed"
)

// Data files are written with parquet-go (DESIGN.md "Libraries"); Arrow is
// only on the read side, where iceberg-go needs it.
//
// How a file is written:
//
//   - The Parquet schema is derived from the table's Iceberg schema
//     (pqPlan), in its column order, with the Iceberg field id on every
//     node: top-level columns, struct members, list elements, map keys and
//     values (the repeated groups between have none, as the Iceberg spec
//     says). Types are the spec's: timestamptz is TIMESTAMP(isAdjustedToUTC
//     = true, MICROS), timestamp the same with false, string is STRING,
//     date DATE, decimal DECIMAL on INT32, INT64 or a fixed array, uuid UUID.
//     A column of a type with no Parquet mapping here (a type a newer
//     Iceberg added) is left out of the file: readers see it null, as in a
//     file written before the column existed.
//   - Columns are filled straight from the records: each leaf column gets
//     a slice of parquet.Value (with its repetition and definition levels)
//     for 1024 rows at a time, handed to that column's writer; no Arrow
//     builders, no per-row reflection. Nested typed values (structs, lists)
//     are walked once per row with the levels the Dremel encoding needs.
//   - Encodings: offset, timestamp, producer_timestamp and the typed long
//     and timestamp columns are DELTA_BINARY_PACKED (consecutive offsets
//     and close timestamps pack to a few bits); topic, source, client_id,
//     node, principal, header keys, typed strings and typed doubles are
//     dictionary-encoded (few distinct values: sensor readings repeat; on
//     firmware-sim telemetry, TestBenchTyped, the typed columns take
//     7.6 B/record with dictionary doubles against 10.5 plain, and a
//     dictionary beyond 1 MiB falls back to plain); value and key are plain
//     with no page or chunk statistics (min/max of payloads prune nothing
//     and cost CPU and bytes). Everything is zstd at ParquetOptions'
//     level. Row groups hold RowGroupRows rows; pages about 1 MiB.
//   - The Iceberg data-file metrics (commit.go's dataFile) come from
//     FileStats, computed from the records as before: exact bounds on
//     partition, offset and timestamp, value and null counts.

// DefaultZstdLevel is the zstd level data files are written with unless
// configured: the fastest (BenchmarkWriteParquet: level 3 stores ~9 % less
// on telemetry for up to ~10 % more CPU; the edge has
// little CPU to spare, and compaction rewrites small files anyway).
const DefaultZstdLevel = 1

// ParquetOptions say how data files are encoded.
type ParquetOptions struct {
	// ZstdLevel is zstd's level, 1 to 22 (0: DefaultZstdLevel). The
	// encoder (klauspost/compress) has four speeds: 1–2 fastest, 3–5
	// default, 6–9 better, 10–22 best.
	ZstdLevel int
}

// CheckZstdLevel says whether l is a zstd level ParquetOptions accepts.
func CheckZstdLevel(l int) error {
	if l < 0 || l > 22 {
		return fmt.Errorf("zstd level %d: want 1 to 22", l)
	}
	return nil
}

// zstdCodecs holds one codec per encoder speed: a codec pools its
// encoders, so files written one after the other reuse them.
var zstdCodecs sync.Map // kzstd.EncoderLevel → *zstd.Codec

func (o ParquetOptions) codec() compress.Codec {
	l := o.ZstdLevel
	if l == 0 {
		l = DefaultZstdLevel
	}
	lvl := kzstd.EncoderLevelFromZstd(l)
	if c, ok := zstdCodecs.Load(lvl); ok {
		return c.(*zstd.Codec)
	}
	c, _ := zstdCodecs.LoadOrStore(lvl, &zstd.Codec{Level: lvl})
	return c.(*zstd.Codec)
}

// WriteParquet encodes recs, which must be consecutive offsets of one
// partition of one stream, as a Parquet file of the envelope.
func (o ParquetOptions) WriteParquet(w io.Writer, recs []*tributary.Record) (FileStats, error) {
	return o.write(w, envelopePlan, pqRows{recs: recs}, true)
}

// WriteParquetEntries is WriteParquet for records as the WAL stores them
// (wal.ReadEntriesInto): a Kafka batch entry's records are read in place from
// its bytes, with no Record object and no allocation per record. The file
// is byte for byte the one WriteParquet writes for the same records.
func (o ParquetOptions) WriteParquetEntries(w io.Writer, ents []tributary.Entry) (FileStats, error) {
	return o.write(w, envelopePlan, pqRows{ents: ents}, true)
}

// WriteParquetShaped is WriteParquet for a shaped batch: recs (a run of
// the records sh was made from) with the table's typed columns.
func (o ParquetOptions) WriteParquetShaped(w io.Writer, recs []*tributary.Record, sh *Shaped) (FileStats, error) {
	st, err := o.write(w, sh.plan, pqRows{recs: recs, sh: sh}, true)
	if err != nil || !sh.plan.has(ColEventTime) {
		return st, err
	}
	st.EventTimes = true
	seen := false
	for _, r := range recs {
		switch us := sh.eventTime(r.Offset); {
		case us == noEventTime:
			st.NullEventTimes++
		case !seen:
			st.MinEventTime, st.MaxEventTime, seen = us, us, true
		default:
			st.MinEventTime, st.MaxEventTime = min(st.MinEventTime, us), max(st.MaxEventTime, us)
		}
	}
	return st, nil
}

// WriteParquet is ParquetOptions{}.WriteParquet: the default level.
func WriteParquet(w io.Writer, recs []*tributary.Record) (FileStats, error) {
	return ParquetOptions{}.WriteParquet(w, recs)
}

// WriteParquetEntries is ParquetOptions{}.WriteParquetEntries.
func WriteParquetEntries(w io.Writer, ents []tributary.Entry) (FileStats, error) {
	return ParquetOptions{}.WriteParquetEntries(w, ents)
}

// WriteParquetShaped is ParquetOptions{}.WriteParquetShaped.
func WriteParquetShaped(w io.Writer, recs []*tributary.Record, sh *Shaped) (FileStats, error) {
	return ParquetOptions{}.WriteParquetShaped(w, recs, sh)
}

// pqRows are the rows of one file: the records, and where the columns
// beyond the envelope come from.
type pqRows struct {
	recs []*tributary.Record
	ents []tributary.Entry // instead of recs: stored entries, batches read in place
	sh   *Shaped           // typed columns and event_time, or nil
	dls  []DeadLetter      // the dead-letter table's columns (dls[i] is recs[i]), or nil
}

// pqChunkRows is how many rows are filled before they are handed to the
// column writers: small enough to keep the value slices in cache.
const pqChunkRows = 1024

// write encodes rows with plan. contiguous demands consecutive offsets of
// one partition (stream tables); otherwise one partition and increasing
// offsets (dead-letter tables).
func (o ParquetOptions) write(w io.Writer, plan *pqPlan, rows pqRows, contiguous bool) (FileStats, error) {
	if err := CheckZstdLevel(o.ZstdLevel); err != nil {
		return FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	st, err := rows.check(contiguous)
	if err != nil {
		return FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	n := int(st.Records)
	pw := o.newWriter(w, plan)
	f := plan.filler()
	for start := 0; start < n; start += RowGroupRows {
		end := min(start+RowGroupRows, n)
		cws := pw.ColumnWriters()
		for lo := start; lo < end; lo += pqChunkRows {
			hi := min(lo+pqChunkRows, end)
			if err := f.fill(rows, lo, hi); err != nil {
				return FileStats{}, fmt.Errorf("write parquet: %w", err)
			}
			if rows.ents != nil {
				for i := range f.rows {
					st.addRow(&f.rows[i])
				}
			}
			for i, l := range f.leaves {
				if _, err := cws[i].WriteRowValues(l.vals); err != nil {
					return FileStats{}, fmt.Errorf("write parquet: column %d: %w", i, err)
				}
			}
		}
		if err := pw.Flush(); err != nil {
			return FileStats{}, fmt.Errorf("write parquet: %w", err)
		}
	}
	if err := pw.Close(); err != nil {
		return FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	return st, nil
}

// check checks that rows are of one partition, with consecutive offsets
// when contiguous (stream tables; else increasing: dead-letter tables),
// and returns their stats: complete for records, without the bounds and
// null counts for entries (write adds those as it fills the rows).
func (rows pqRows) check(contiguous bool) (FileStats, error) {
	if rows.ents != nil {
		return checkEntries(rows.ents)
	}
	recs := rows.recs
	if len(recs) == 0 {
		return FileStats{}, fmt.Errorf("no records")
	}
	st := FileStats{
		Records: int64(len(recs)), Partition: recs[0].Partition,
		FirstOffset: recs[0].Offset, LastOffset: recs[len(recs)-1].Offset,
		MinTimestamp: recs[0].Timestamp, MaxTimestamp: recs[0].Timestamp,
	}
	for i, r := range recs {
		bad := r.Partition != st.Partition || (contiguous && r.Offset != st.FirstOffset+int64(i)) ||
			(!contiguous && i > 0 && r.Offset <= recs[i-1].Offset)
		if bad {
			return FileStats{}, fmt.Errorf("record %d is %d@%d, want increasing offsets of partition %d",
				i, r.Offset, r.Partition, st.Partition)
		}
		st.add(r)
	}
	return st, nil
}

// checkEntries is check for entries, which are always contiguous.
func checkEntries(ents []tributary.Entry) (FileStats, error) {
	if len(ents) == 0 {
		return FileStats{}, fmt.Errorf("no records")
	}
	first := ents[0]
	st := FileStats{FirstOffset: first.First(), MinTimestamp: first.Timestamp(), MaxTimestamp: first.Timestamp()}
	if first.Record != nil {
		st.Partition = first.Record.Partition
	} else {
		st.Partition = first.Batch.Partition
	}
	next := st.FirstOffset
	for i, e := range ents {
		p := st.Partition
		if e.Record != nil {
			p = e.Record.Partition
		} else {
			p = e.Batch.Partition
			if b := e.Batch; b.Count < 1 || b.Skip < 0 || len(b.Records) < kbatch.HeaderLen ||
				int64(b.Skip+b.Count) > int64(int32(binary.BigEndian.Uint32(b.Records[57:]))) {
				return FileStats{}, fmt.Errorf("entry %d: records [%d, %d) of a batch of %d bytes", i, b.Skip, b.Skip+b.Count, len(b.Records))
			}
		}
		if p != st.Partition || e.First() != next {
			return FileStats{}, fmt.Errorf("entry %d is %d@%d, want offset %d of partition %d", i, e.First(), p, next, st.Partition)
		}
		next += int64(e.Len())
	}
	st.Records, st.LastOffset = next-st.FirstOffset, next-1
	return st, nil
}

// add counts r into the stats' bounds and null counts.
func (st *FileStats) add(r *tributary.Record) {
	row := rowOf(r)
	st.addRow(&row)
}

// addRow counts a row into the stats' bounds and null counts.
func (st *FileStats) addRow(r *pqRow) {
	st.MinTimestamp = min(st.MinTimestamp, r.timestamp)
	st.MaxTimestamp = max(st.MaxTimestamp, r.timestamp)
	if r.key == nil {
		st.NullKeys++
	}
	if r.headers == nil {
		st.NullHeaders++
	}
	if r.prodTS == 0 {
		st.NullProdTS++
	}
	if r.principal == "" {
		st.NullPrincipals++
	}
}

// newWriter is the Parquet writer of every data file (write, Encoder).
func (o ParquetOptions) newWriter(w io.Writer, plan *pqPlan) *parquet.Writer {
	return parquet.NewWriter(w, plan.schema, parquet.Compression(o.codec()), parquet.PageBufferSize(1<<20),
		parquet.CreatedBy("tributary", "", ""), parquet.DictionaryMaxBytes(1<<20),
		parquet.SkipPageBounds(ColValue), parquet.SkipPageStatistics(ColValue),
		parquet.SkipPageBounds(ColKey), parquet.SkipPageStatistics(ColKey))
}

// pqKind is the shape of a node of a pqPlan.
type pqKind uint8

const (
	pqPrimitive pqKind = iota
	pqStruct
	pqList
	pqMap
)

// pqNode is one column (or nested field) of a plan: its Iceberg shape and
// the Dremel levels of its values.
type pqNode struct {
	name   string
	kind   pqKind
	prim   iceberg.Type // pqPrimitive
	def    byte         // definition level when the node has a value
	rep    byte         // repetition level of its repeats (list elements, map entries)
	fields []*pqNode    // pqStruct
	elem   *pqNode      // pqList
	leaf   int          // pqPrimitive: its leaf column
	leaves []int        // every leaf column below (or at) the node
}

// pqPlan is a Parquet schema derived from an Iceberg schema, and how its
// leaf columns are filled.
type pqPlan struct {
	schema  *parquet.Schema
	top     []*pqNode // the top-level columns written, in schema order
	maxDefs []byte    // per leaf column
	kinds   []parquet.Kind
}

func (p *pqPlan) has(name string) bool {
	for _, n := range p.top {
		if n.name == name {
			return true
		}
	}
	return false
}

var envelopePlan = mustPlan(EnvelopeSchema())

func mustPlan(sch *iceberg.Schema) *pqPlan {
	p, err := newPlan(sch)
	if err != nil {
		panic(fmt.Sprintf("parquet schema of %s: %v", sch, err))
	}
	return p
}

// newPlan derives the Parquet schema of sch. Envelope columns must have
// the envelope's types (a table's columns are never retyped).
func newPlan(sch *iceberg.Schema) (*pqPlan, error) {
	p := &pqPlan{}
	want := map[string]iceberg.Type{}
	for _, f := range append(EnvelopeSchema().Fields(), dlqColumns()...) {
		want[f.Name] = f.Type
	}
	want[ColEventTime] = iceberg.PrimitiveTypes.TimestampTz
	var fields []parquet.Field
	for _, f := range sch.Fields() {
		if t, ok := want[f.Name]; ok && !t.Equals(f.Type) {
			return nil, fmt.Errorf("column %s is %s, want %s", f.Name, f.Type, t)
		}
		node, pn := p.node(f.Name, f.Type, f.Required, 0, 0, encodingOf(f.Name, f.Type))
		if node == nil {
			continue
		}
		fields = append(fields, pqField{Node: parquet.FieldID(node, f.ID), name: f.Name})
		p.top = append(p.top, pn)
	}
	p.schema = parquet.NewSchema("table", &pqGroup{fields: fields})
	return p, nil
}

// encodingOf is the encoding of a top-level column's leaves (nil: plain):
// delta for the envelope's offset and timestamps and every typed integer
// or timestamp leaf, dictionary for strings and typed doubles, plain for
// value and key.
func encodingOf(name string, t iceberg.Type) *pqEncoding {
	switch name {
	case ColOffset, ColTimestamp, ColProducerTimestamp:
		return &pqEncoding{ints: true}
	case ColValue, ColKey:
		return nil
	}
	return &pqEncoding{strings: true, ints: !isEnvelope(name)}
}

// pqEncoding says which leaves get a non-plain encoding.
type pqEncoding struct {
	ints    bool // INT32/INT64 leaves: delta
	strings bool // STRING leaves: dictionary
}

// node returns the Parquet node of a field of type t named name (nil for a
// type with no Parquet mapping here) and its plan node; def and rep are
// the levels of its parent.
func (p *pqPlan) node(name string, t iceberg.Type, required bool, def, rep byte, enc *pqEncoding) (parquet.Node, *pqNode) {
	if !required {
		def++
	}
	pn := &pqNode{name: name, def: def, rep: rep}
	var node parquet.Node
	switch t := t.(type) {
	case *iceberg.StructType:
		pn.kind = pqStruct
		var fields []parquet.Field
		for _, f := range t.FieldList {
			fn, fp := p.node(f.Name, f.Type, f.Required, def, rep, enc)
			if fn == nil {
				continue
			}
			fields = append(fields, pqField{Node: parquet.FieldID(fn, f.ID), name: f.Name})
			pn.fields = append(pn.fields, fp)
			pn.leaves = append(pn.leaves, fp.leaves...)
		}
		if len(fields) == 0 {
			return nil, nil // Parquet has no empty groups
		}
		node = &pqGroup{fields: fields}
	case *iceberg.ListType:
		pn.kind, pn.rep = pqList, rep+1
		en, ep := p.node("element", t.Element, t.ElementRequired, def+1, rep+1, enc)
		if en == nil {
			return nil, nil
		}
		pn.elem, pn.leaves = ep, ep.leaves
		node = parquet.List(parquet.FieldID(en, t.ElementID))
	case *iceberg.MapType:
		// Tributary writes no maps: the column is written, always null.
		pn.kind, pn.rep = pqMap, rep+1
		kn, kp := p.node("key", t.KeyType, true, def+1, rep+1, enc)
		vn, vp := p.node("value", t.ValueType, t.ValueRequired, def+1, rep+1, enc)
		if kn == nil || vn == nil {
			return nil, nil
		}
		pn.leaves = append(kp.leaves, vp.leaves...)
		node = parquet.Map(parquet.FieldID(kn, t.KeyID), parquet.FieldID(vn, t.ValueID))
	default:
		leaf, kind := leafOf(t, enc)
		if leaf == nil {
			return nil, nil
		}
		pn.kind, pn.prim, pn.leaf = pqPrimitive, t, len(p.maxDefs)
		pn.leaves = []int{pn.leaf}
		p.maxDefs = append(p.maxDefs, def)
		p.kinds = append(p.kinds, kind)
		node = leaf
	}
	if required {
		return parquet.Required(node), pn
	}
	return parquet.Optional(node), pn
}

// leafOf is the Parquet leaf of an Iceberg primitive type (nil: none).
func leafOf(t iceberg.Type, enc *pqEncoding) (parquet.Node, parquet.Kind) {
	var n parquet.Node
	switch t := t.(type) {
	case iceberg.BooleanType:
		return parquet.Leaf(parquet.BooleanType), parquet.Boolean
	case iceberg.Int32Type:
		n = parquet.Leaf(parquet.Int32Type)
	case iceberg.Int64Type:
		n = parquet.Leaf(parquet.Int64Type)
	case iceberg.Float32Type:
		return parquet.Leaf(parquet.FloatType), parquet.Float
	case iceberg.Float64Type:
		n := parquet.Leaf(parquet.DoubleType)
		if enc != nil && enc.strings {
			n = parquet.Encoded(n, &parquet.RLEDictionary)
		}
		return n, parquet.Double
	case iceberg.DateType:
		n = parquet.Date()
	case iceberg.TimeType:
		n = parquet.Time(parquet.Microsecond)
	case iceberg.TimestampType:
		n = parquet.TimestampAdjusted(parquet.Microsecond, false)
	case iceberg.TimestampTzType:
		n = parquet.TimestampAdjusted(parquet.Microsecond, true)
	case iceberg.StringType:
		n := parquet.String()
		if enc != nil && enc.strings {
			n = parquet.Encoded(n, &parquet.RLEDictionary)
		}
		return n, parquet.ByteArray
	case iceberg.BinaryType:
		return parquet.Leaf(parquet.ByteArrayType), parquet.ByteArray
	case iceberg.UUIDType:
		return parquet.UUID(), parquet.FixedLenByteArray
	case iceberg.FixedType:
		return parquet.Leaf(parquet.FixedLenByteArrayType(t.Len())), parquet.FixedLenByteArray
	case iceberg.DecimalType:
		switch p := t.Precision(); {
		case p <= 9:
			return parquet.Decimal(t.Scale(), p, parquet.Int32Type), parquet.Int32
		case p <= 18:
			return parquet.Decimal(t.Scale(), p, parquet.Int64Type), parquet.Int64
		default:
			return parquet.Decimal(t.Scale(), p, parquet.FixedLenByteArrayType(16)), parquet.FixedLenByteArray
		}
	default:
		return nil, 0
	}
	kind := n.Type().Kind()
	if enc != nil && enc.ints {
		n = parquet.Encoded(n, &parquet.DeltaBinaryPacked)
	}
	return n, kind
}

// pqGroup is a Parquet group whose fields keep the order given (the
// table's column order; parquet.Group sorts them by name).
type pqGroup struct{ fields []parquet.Field }

func (g *pqGroup) ID() int                               { return 0 }
func (g *pqGroup) String() string                        { return "group" }
func (g *pqGroup) Type() parquet.Type                    { return parquet.Group{}.Type() }
func (g *pqGroup) Optional() bool                        { return false }
func (g *pqGroup) Repeated() bool                        { return false }
func (g *pqGroup) Required() bool                        { return true }
func (g *pqGroup) Leaf() bool                            { return false }
func (g *pqGroup) Fields() []parquet.Field               { return g.fields }
func (g *pqGroup) Encoding() encoding.Encoding           { return nil }
func (g *pqGroup) Compression() compress.Codec           { return nil }
func (g *pqGroup) GoType() reflect.Type                  { return reflect.TypeOf(struct{}{}) }
func (f pqField) Name() string                           { return f.name }
func (f pqField) Value(base reflect.Value) reflect.Value { return reflect.Value{} }

// pqField is a named field of a pqGroup.
type pqField struct {
	parquet.Node
	name string
}

// pqFiller fills the leaf columns of a plan for a range of rows.
type pqFiller struct {
	plan   *pqPlan
	leaves []pqLeaf
	rows   []pqRow            // the rows of the chunk being filled
	hdrs   []tributary.Header // their headers, for rows read from batches
	cur    entryCursor        // where the next row of pqRows.ents is
}

type pqLeaf struct {
	col    int
	maxDef byte
	kind   parquet.Kind
	vals   []parquet.Value
}

func (p *pqPlan) filler() *pqFiller {
	f := &pqFiller{plan: p, leaves: make([]pqLeaf, len(p.maxDefs))}
	for i := range f.leaves {
		f.leaves[i] = pqLeaf{col: i, maxDef: p.maxDefs[i], kind: p.kinds[i], vals: make([]parquet.Value, 0, pqChunkRows)}
	}
	return f
}

// put appends v at levels rep, def to leaf column l.
func (f *pqFiller) put(l int, v parquet.Value, rep, def byte) {
	lf := &f.leaves[l]
	lf.vals = append(lf.vals, v.Level(int(rep), int(def), lf.col))
}

// absent appends to every leaf below n a row part without a value: null
// at definition level def, or the type's zero value for a leaf that no
// optional node is above (it cannot be null).
func (f *pqFiller) absent(n *pqNode, rep, def byte) {
	for _, l := range n.leaves {
		v := parquet.NullValue()
		if def >= f.leaves[l].maxDef {
			v = parquet.ZeroValue(f.leaves[l].kind)
		}
		f.put(l, v, rep, def)
	}
}

// fill replaces the leaves' values with those of rows[lo:hi] (for
// entries, fill must be called for consecutive ranges from 0).
func (f *pqFiller) fill(rows pqRows, lo, hi int) error {
	for i := range f.leaves {
		f.leaves[i].vals = f.leaves[i].vals[:0]
	}
	f.rows, f.hdrs = f.rows[:0], f.hdrs[:0]
	if rows.ents != nil {
		if err := f.readEntries(rows.ents, lo, hi); err != nil {
			return err
		}
	} else {
		for _, r := range rows.recs[lo:hi] {
			f.rows = append(f.rows, rowOf(r))
		}
	}
	recs := f.rows
	for _, n := range f.plan.top {
		switch n.name {
		case ColPartition:
			for i := range recs {
				r := &recs[i]
				f.put(n.leaf, parquet.Int32Value(r.partition), 0, n.def)
			}
		case ColOffset:
			for i := range recs {
				r := &recs[i]
				f.put(n.leaf, parquet.Int64Value(r.offset), 0, n.def)
			}
		case ColTimestamp:
			for i := range recs {
				r := &recs[i]
				f.put(n.leaf, parquet.Int64Value(r.timestamp), 0, n.def)
			}
		case ColTopic, ColSource, ColClientID, ColNode:
			for i := range recs {
				r := &recs[i]
				f.put(n.leaf, stringValue(r.envelopeString(n.name)), 0, n.def)
			}
		case ColPrincipal:
			for i := range recs {
				r := &recs[i]
				if r.principal == "" {
					f.absent(n, 0, n.def-1)
				} else {
					f.put(n.leaf, stringValue(r.principal), 0, n.def)
				}
			}
		case ColKey:
			for i := range recs {
				r := &recs[i]
				if r.key == nil {
					f.absent(n, 0, n.def-1)
				} else {
					f.put(n.leaf, bytesValue(r.key), 0, n.def)
				}
			}
		case ColValue:
			for i := range recs {
				r := &recs[i]
				f.put(n.leaf, bytesValue(r.value), 0, n.def)
			}
		case ColProducerTimestamp:
			for i := range recs {
				r := &recs[i]
				if r.prodTS == 0 {
					f.absent(n, 0, n.def-1)
				} else {
					f.put(n.leaf, parquet.Int64Value(r.prodTS*1000), 0, n.def)
				}
			}
		case ColHeaders:
			for i := range recs {
				r := &recs[i]
				f.headers(n, r.headers)
			}
		case ColDLQError:
			for i := range recs {
				f.put(n.leaf, stringValue(rows.dls[lo+i].Error), 0, n.def)
			}
		case ColDLQSchemaVersion:
			for i := range recs {
				f.put(n.leaf, parquet.Int32Value(rows.dls[lo+i].SchemaVersion), 0, n.def)
			}
		case ColEventTime:
			for i := range recs {
				r := &recs[i]
				if us := rows.sh.eventTime(r.offset); us == noEventTime {
					f.absent(n, 0, n.def-1)
				} else {
					f.put(n.leaf, parquet.Int64Value(us), 0, n.def)
				}
			}
		default:
			sh := rows.sh
			for i := range recs {
				r := &recs[i]
				var v typed.Value
				if sh != nil {
					if i := r.offset - sh.base; sh.errs[i] == "" {
						v = member(sh.vals[i], n.name)
					}
				}
				f.value(n, v, 0, n.def-1)
			}
		}
	}
	return nil
}

// headers appends a record's headers (list<struct<key string, value
// binary>>; the envelope's, so the shape is known) to n's leaves.
func (f *pqFiller) headers(n *pqNode, hs []tributary.Header) {
	if hs == nil {
		f.absent(n, 0, n.def-1)
		return
	}
	if len(hs) == 0 {
		f.absent(n, 0, n.def)
		return
	}
	el := n.elem
	key, val := el.fields[0], el.fields[1]
	for i, h := range hs {
		rep := byte(0)
		if i > 0 {
			rep = n.rep
		}
		f.put(key.leaf, stringValue(h.Key), rep, key.def)
		if h.Value == nil {
			f.absent(val, rep, val.def-1)
		} else {
			f.put(val.leaf, bytesValue(h.Value), rep, val.def)
		}
	}
}

// value appends a typed value to n's leaves; def is the definition level
// of n's parent. A value that does not fit the column's type (Check let
// it through only if it fits: this is a column typed does not know) is
// null.
func (f *pqFiller) value(n *pqNode, v typed.Value, rep, def byte) {
	if v.Kind == typed.Null {
		f.absent(n, rep, def)
		return
	}
	switch n.kind {
	case pqStruct:
		if v.Kind != typed.Object {
			break
		}
		for _, fn := range n.fields {
			f.value(fn, member(v, fn.name), rep, n.def)
		}
		return
	case pqList:
		if v.Kind != typed.Array {
			break
		}
		if len(v.Elems) == 0 {
			f.absent(n, rep, n.def)
			return
		}
		for i, e := range v.Elems {
			r := rep
			if i > 0 {
				r = n.rep
			}
			f.value(n.elem, e, r, n.def+1)
		}
		return
	case pqPrimitive:
		if pv, ok := primitiveValue(n.prim, v); ok {
			f.put(n.leaf, pv, rep, n.def)
			return
		}
	}
	f.absent(n, rep, def)
}

// primitiveValue converts a typed value to a column of Iceberg type t.
func primitiveValue(t iceberg.Type, v typed.Value) (parquet.Value, bool) {
	switch t.(type) {
	case iceberg.Int64Type:
		switch v.Kind {
		case typed.Long:
			return parquet.Int64Value(v.Long), true
		case typed.Double: // whole: typed.Check let only those through
			if v.Double == math.Trunc(v.Double) {
				return parquet.Int64Value(int64(v.Double)), true
			}
		}
	case iceberg.Float64Type:
		switch v.Kind {
		case typed.Double:
			return parquet.DoubleValue(v.Double), true
		case typed.Long:
			return parquet.DoubleValue(float64(v.Long)), true
		}
	case iceberg.StringType:
		if v.Kind == typed.String {
			return stringValue(v.Str), true
		}
	case iceberg.BooleanType:
		if v.Kind == typed.Bool {
			return parquet.BooleanValue(v.Bool), true
		}
	case iceberg.TimestampType, iceberg.TimestampTzType:
		if us, ok := typed.ParseTime(v); ok {
			return parquet.Int64Value(us), true
		}
	}
	return parquet.Value{}, false
}

func (r *pqRow) envelopeString(name string) string {
	switch name {
	case ColTopic:
		return r.topic
	case ColSource:
		return r.source
	case ColClientID:
		return r.clientID
	}
	return r.node
}

var empty = []byte{}

// stringValue is s as a BYTE_ARRAY value, without a copy (the column
// writer copies it into its buffer).
func stringValue(s string) parquet.Value {
	if len(s) == 0 {
		return parquet.ByteArrayValue(empty)
	}
	return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// bytesValue is b as a BYTE_ARRAY value; nil is the empty array.
func bytesValue(b []byte) parquet.Value {
	if b == nil {
		b = empty
	}
	return parquet.ByteArrayValue(b)
}
