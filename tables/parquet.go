package tables

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
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

// ArrowSchema is the Arrow schema (with Parquet field ids) of the envelope,
// as readers see the files (writing does not use Arrow: pqwrite.go).
func ArrowSchema() *arrow.Schema { return arrowSchema }

// DayOf returns the day(timestamp) partition value of unix micros.
func DayOf(micros int64) int32 { return GranularityDay.Bucket(micros) }
