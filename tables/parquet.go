package tables

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
)

// FileStats describes the rows of one data file. Every data file Tributary
// writes holds one contiguous offset range of one partition, so the stats
// are exact and cheap: no footer has to be read back.
type FileStats struct {
	Records      int64
	Partition    int32
	FirstOffset  int64 // inclusive
	LastOffset   int64 // inclusive
	MinTimestamp int64 // unix micros
	MaxTimestamp int64
	NullKeys     int64
	NullHeaders  int64
	NullProdTS   int64
	// NullPrincipals counts records without a principal (anonymous).
	NullPrincipals int64
	// EventTimes: the file has an event_time column (typedcols.go), with
	// these bounds (unix micros) over its non-null values.
	EventTimes                 bool
	MinEventTime, MaxEventTime int64
	NullEventTimes             int64
}

// RowGroupRows is the number of rows per Parquet row group: small enough that
// a Kafka fetch of a few offsets reads little, large enough to compress well.
const RowGroupRows = 16384

var arrowSchema = func() *arrow.Schema {
	sc, err := table.SchemaToArrowSchema(EnvelopeSchema(), nil, true, false)
	if err != nil {
		panic(fmt.Sprintf("envelope arrow schema: %v", err))
	}
	return sc
}()

// ArrowSchema is the Arrow schema (with Parquet field ids) of the envelope.
func ArrowSchema() *arrow.Schema { return arrowSchema }

func parquetProps() *parquet.WriterProperties {
	return parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(1), // fastest zstd: the edge has little CPU to spare; compaction can recompress
		parquet.WithMaxRowGroupLength(RowGroupRows),
		parquet.WithDataPageSize(1<<20),
		parquet.WithStatsFor(ColValue, false),
		parquet.WithStatsFor(ColKey, false),
		parquet.WithDictionaryFor(ColValue, false),
		parquet.WithDictionaryFor(ColKey, false),
		parquet.WithCreatedBy("tributary"),
	)
}

// WriteParquet encodes recs, which must be consecutive offsets of one
// partition of one stream, as a zstd Parquet file carrying Iceberg field ids.
func WriteParquet(w io.Writer, recs []*tributary.Record) (FileStats, error) {
	return writeParquet(w, recs, arrowSchema, true, nil)
}

// columnFiller appends the values of the columns beyond the envelope
// (typed columns, the dead-letter table's) for recs[lo:hi] to b.
type columnFiller func(b *array.RecordBuilder, lo, hi int)

// writeParquet encodes recs with schema sc: the envelope columns from the
// records, the others (if any) by fill. contiguous demands consecutive
// offsets of one partition (stream tables); otherwise one partition and
// increasing offsets (dead-letter tables).
func writeParquet(w io.Writer, recs []*tributary.Record, sc *arrow.Schema, contiguous bool, fill columnFiller) (FileStats, error) {
	if len(recs) == 0 {
		return FileStats{}, fmt.Errorf("write parquet: no records")
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
			return FileStats{}, fmt.Errorf("write parquet: record %d is %d@%d, want increasing offsets of partition %d",
				i, r.Offset, r.Partition, st.Partition)
		}
		st.MinTimestamp = min(st.MinTimestamp, r.Timestamp)
		st.MaxTimestamp = max(st.MaxTimestamp, r.Timestamp)
	}

	mem := memory.DefaultAllocator
	fw, err := pqarrow.NewFileWriter(sc, w, parquetProps(), pqarrow.DefaultWriterProps())
	if err != nil {
		return FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	for start := 0; start < len(recs); start += RowGroupRows {
		end := min(start+RowGroupRows, len(recs))
		rec, nulls := buildRecord(mem, sc, recs, start, end, fill)
		st.NullKeys += nulls[0]
		st.NullHeaders += nulls[1]
		st.NullProdTS += nulls[2]
		st.NullPrincipals += nulls[3]
		err := fw.Write(rec)
		rec.Release()
		if err != nil {
			fw.Close()
			return FileStats{}, fmt.Errorf("write parquet: %w", err)
		}
	}
	if err := fw.Close(); err != nil {
		return FileStats{}, fmt.Errorf("write parquet: %w", err)
	}
	return st, nil
}

// envelopeIndex is where each envelope column is in schema sc (whose
// first columns are the envelope, possibly in another order in a table
// evolved outside Tributary: looked up by name).
func envelopeIndex(sc *arrow.Schema, name string) int {
	ix := sc.FieldIndices(name)
	if len(ix) == 0 {
		panic(fmt.Sprintf("arrow schema without envelope column %s", name))
	}
	return ix[0]
}

// buildRecord turns recs[lo:hi] into one Arrow record batch of schema sc:
// the envelope columns, then fill's. nulls counts null keys, headers,
// producer timestamps and principals.
func buildRecord(mem memory.Allocator, sc *arrow.Schema, all []*tributary.Record, lo, hi int, fill columnFiller) (arrow.RecordBatch, [4]int64) {
	recs := all[lo:hi]
	var nulls [4]int64
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	field := func(name string) array.Builder { return b.Field(envelopeIndex(sc, name)) }
	partB := field(ColPartition).(*array.Int32Builder)
	offB := field(ColOffset).(*array.Int64Builder)
	tsB := field(ColTimestamp).(*array.TimestampBuilder)
	topicB := field(ColTopic).(*array.StringBuilder)
	keyB := field(ColKey).(*array.BinaryBuilder)
	valB := field(ColValue).(*array.BinaryBuilder)
	hdrB := field(ColHeaders).(*array.ListBuilder)
	hdrS := hdrB.ValueBuilder().(*array.StructBuilder)
	hdrK := hdrS.FieldBuilder(0).(*array.StringBuilder)
	hdrV := hdrS.FieldBuilder(1).(*array.BinaryBuilder)
	srcB := field(ColSource).(*array.StringBuilder)
	cliB := field(ColClientID).(*array.StringBuilder)
	nodeB := field(ColNode).(*array.StringBuilder)
	ptsB := field(ColProducerTimestamp).(*array.TimestampBuilder)
	prinB := field(ColPrincipal).(*array.StringBuilder)
	for _, b := range []array.Builder{partB, offB, tsB, topicB, keyB, valB, hdrB, srcB, cliB, nodeB, ptsB, prinB} {
		b.Reserve(len(recs))
	}
	for _, r := range recs {
		partB.Append(r.Partition)
		offB.Append(r.Offset)
		tsB.Append(arrow.Timestamp(r.Timestamp))
		topicB.Append(r.Topic)
		if r.Key == nil {
			keyB.AppendNull()
			nulls[0]++
		} else {
			keyB.Append(r.Key)
		}
		if r.Value == nil {
			valB.Append([]byte{})
		} else {
			valB.Append(r.Value)
		}
		if r.Headers == nil {
			hdrB.AppendNull()
			nulls[1]++
		} else {
			hdrB.Append(true)
			for _, h := range r.Headers {
				hdrS.Append(true)
				hdrK.Append(h.Key)
				if h.Value == nil {
					hdrV.AppendNull()
				} else {
					hdrV.Append(h.Value)
				}
			}
		}
		srcB.Append(r.Source)
		cliB.Append(r.ClientID)
		nodeB.Append(r.Node)
		if r.ProducerTimestamp == 0 {
			ptsB.AppendNull()
			nulls[2]++
		} else {
			ptsB.Append(arrow.Timestamp(r.ProducerTimestamp * 1000))
		}
		if r.Principal == "" {
			prinB.AppendNull()
			nulls[3]++
		} else {
			prinB.Append(r.Principal)
		}
	}
	if fill != nil {
		fill(b, lo, hi)
	}
	return b.NewRecordBatch(), nulls
}

// DayOf returns the day(timestamp) partition value of unix micros.
func DayOf(micros int64) int32 { return GranularityDay.Bucket(micros) }
