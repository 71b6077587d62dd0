package tables

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/tributary-io/tributary"
)

// Data file layout: which records share a file and what the file is called.
//
// Invariants every writer of data files (the uplink, compaction) keeps by
// going through this file:
//
//  1. One bucket per file. A data file holds records of one partition value
//     of the table's timestamp transform (one day, or one hour), because an
//     Iceberg data file carries a single partition tuple. CutRuns is the only
//     place that decides where a run of records is cut; dataFile refuses a
//     file whose timestamps span two buckets of the same Granularity.
//  2. The table's granularity, not the writer's configuration, decides. A
//     node configured for "day" writing to a table created with "hour" by
//     another node cuts by hour: Granularity is read from the table's
//     current partition spec.
//  3. Unique, self-describing names. DataFileURL names a file below its
//     table's data folder by partition and offset range plus a random
//     suffix, so two attempts at the same batch never overwrite each other
//     (an upload whose commit failed stays an orphan for maintenance, never
//     a file that a committed snapshot points to).
//  4. Origin in the name. A file the uplink writes names its Origin (the
//     node that committed it and the ownership epoch of its records);
//     CommitAppend refuses a file whose name gives another epoch than its
//     append's, and compaction merges only files of one origin and names
//     its output alike. The name survives manifest merges, snapshot expiry
//     and compaction, so the uplink can always tell its own commits from
//     another node's (Committed).

// Granularity is the time bucket of a table's timestamp partition
// transform: day(timestamp) or hour(timestamp).
type Granularity int8

const (
	// GranularityDay is the default: day(timestamp).
	GranularityDay Granularity = iota
	// GranularityHour is hour(timestamp).
	GranularityHour
)

// ParseGranularity parses "day" (or "") and "hour".
func ParseGranularity(s string) (Granularity, error) {
	switch s {
	case "", "day":
		return GranularityDay, nil
	case "hour":
		return GranularityHour, nil
	}
	return 0, fmt.Errorf("%w: partition granularity %q: want day or hour", ErrUnsupportedSpec, s)
}

func (g Granularity) String() string {
	if g == GranularityHour {
		return "hour"
	}
	return "day"
}

// Bucket is the partition value of a timestamp (unix micros): days or
// hours since the epoch, as Iceberg's day and hour transforms compute it
// (floor division, so instants before 1970 fall in negative buckets).
func (g Granularity) Bucket(micros int64) int32 {
	per := int64(86_400_000_000)
	if g == GranularityHour {
		per = 3_600_000_000
	}
	b := micros / per
	if micros%per < 0 {
		b--
	}
	return int32(b)
}

// partitionValue is Bucket as the value of the partition tuple.
func (g Granularity) partitionValue(micros int64) any {
	if g == GranularityHour {
		return g.Bucket(micros)
	}
	return iceberg.Date(g.Bucket(micros))
}

// GranularityOf returns the granularity of a partition spec: that of its
// day or hour transform of the timestamp column (or of a typed stream's
// event_time column: PartitionSource), which must be its only field.
func GranularityOf(spec iceberg.PartitionSpec) (Granularity, error) {
	var g Granularity
	if n := spec.NumFields(); n != 1 {
		return 0, fmt.Errorf("%w: %d partition fields, want 1", ErrUnsupportedSpec, n)
	}
	for _, pf := range spec.Fields() {
		switch pf.Transform.(type) {
		case iceberg.DayTransform:
			g = GranularityDay
		case iceberg.HourTransform:
			g = GranularityHour
		default:
			return 0, fmt.Errorf("%w: partition transform %s", ErrUnsupportedSpec, pf.Transform)
		}
	}
	return g, nil
}

// PartitionSource is the field id of the column a spec (one that
// GranularityOf accepts) partitions by: FieldTimestamp, or a typed
// stream's event_time column.
func PartitionSource(spec iceberg.PartitionSpec) int {
	for _, pf := range spec.Fields() {
		return pf.SourceID()
	}
	return FieldTimestamp
}

// CutRuns cuts recs, consecutive offsets of one partition, into runs whose
// timestamps each fall in one bucket of g: a new run starts wherever a
// record's bucket differs from its predecessor's. The runs share recs'
// backing array and together are recs, in order. Timestamps need not be
// monotonic (a record copied from another node keeps its own); a bucket
// that comes back after another simply starts another run.
func CutRuns(g Granularity, recs []*tributary.Record) [][]*tributary.Record {
	return cutRuns(recs, func(r *tributary.Record) int64 { return int64(g.Bucket(r.Timestamp)) })
}

// cutRuns cuts xs where key(x) changes.
func cutRuns[T any](xs []T, key func(T) int64) [][]T {
	var runs [][]T
	for start := 0; start < len(xs); {
		b := key(xs[start])
		end := start + 1
		for end < len(xs) && key(xs[end]) == b {
			end++
		}
		runs = append(runs, xs[start:end:end])
		start = end
	}
	return runs
}

// DataFileURL names a new data file of the table at location holding the
// records st describes, committed under origin o:
// <location>/data/p<partition>/<first>-<last>-e<epoch>-n<node>-<random>.parquet
// (<first>-<last>-<random>.parquet for the zero Origin), offsets
// zero-padded so that names sort by offset.
func DataFileURL(location string, st FileStats, o Origin) string {
	id := uuid.NewString()[:8]
	if !o.IsZero() {
		id = o.String() + "-" + id
	}
	return fmt.Sprintf("%s/data/p%d/%020d-%020d-%s.parquet", location,
		st.Partition, st.FirstOffset, st.LastOffset, id)
}

// Origin is who committed a data file: the node whose uplink wrote it and
// the ownership epoch its records were accepted at, which is the epoch its
// append was fence-checked at (invariant 4). The node is kept as a tag (12
// hex digits of its id's SHA-256): node ids may hold characters that do
// not belong in a URL. The zero Origin is none: files written before
// origins were recorded, and their compacted successors.
type Origin struct {
	node  string // nodeTag of the node id
	epoch int64
}

// OriginOf is the origin of a file that node commits at epoch.
func OriginOf(node string, epoch int64) Origin {
	return Origin{node: nodeTag(node), epoch: epoch}
}

func nodeTag(node string) string {
	h := sha256.Sum256([]byte(node))
	return hex.EncodeToString(h[:6])
}

// IsZero reports the absence of an origin.
func (o Origin) IsZero() bool { return o.node == "" }

// Epoch is the ownership epoch the file was committed under.
func (o Origin) Epoch() int64 { return o.epoch }

// By reports whether node committed the file (at any epoch).
func (o Origin) By(node string) bool { return !o.IsZero() && o.node == nodeTag(node) }

// String is the origin as a file name has it: e<epoch>-n<node tag> ("" for none).
func (o Origin) String() string {
	if o.IsZero() {
		return ""
	}
	return fmt.Sprintf("e%d-n%s", o.epoch, o.node)
}

// FileOrigin reads the origin from a data file's name (DataFileURL); the
// zero Origin when the name records none.
func FileOrigin(url string) Origin {
	name, ok := strings.CutSuffix(path.Base(url), ".parquet")
	if !ok {
		return Origin{}
	}
	parts := strings.Split(name, "-")
	if len(parts) != 5 || len(parts[3]) != 13 || parts[3][0] != 'n' || len(parts[2]) < 2 || parts[2][0] != 'e' {
		return Origin{}
	}
	epoch, err := strconv.ParseInt(parts[2][1:], 10, 64)
	if err != nil || epoch < 0 {
		return Origin{}
	}
	if _, err := hex.DecodeString(parts[3][1:]); err != nil {
		return Origin{}
	}
	return Origin{node: parts[3][1:], epoch: epoch}
}

// Granularity returns the granularity of a stream's table as last loaded
// (by Marks, HighWaters, LoadTable, …), loading or creating the table if it
// was not loaded yet.
func (c *Catalog) Granularity(ctx context.Context, stream string) (Granularity, error) {
	t, err := c.lastLoaded(ctx, stream)
	if err != nil {
		return 0, err
	}
	g, err := GranularityOf(t.Spec())
	if err != nil {
		return 0, fmt.Errorf("table of %s: %w", stream, err)
	}
	return g, nil
}
