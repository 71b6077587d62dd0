package delta

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Values read from Parquet, as plain Go: nil, bool, int64, float64,
// string, []byte, time.Time (UTC) for timestamps, "YYYY-MM-DD" strings
// for dates, decimal strings ("-5.678"), map[string]any for structs,
// []any for lists, and map[string]any (keys rendered) for maps.

// Row is one row of a table: column name → value.
type Row = map[string]any

// readParquetRows decodes every row of a Parquet file.
func readParquetRows(ctx context.Context, data []byte) ([]Row, error) {
	pr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Release()
	var out []Row
	for rr.Next() {
		rec := rr.RecordBatch()
		sch := rec.Schema()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make(Row, rec.NumCols())
			for c := 0; c < int(rec.NumCols()); c++ {
				v, err := valueAt(rec.Column(c), i)
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", sch.Field(c).Name, err)
				}
				row[sch.Field(c).Name] = v
			}
			out = append(out, row)
		}
	}
	if err := rr.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// valueAt is row i of arr as a plain Go value.
func valueAt(arr arrow.Array, i int) (any, error) {
	if arr.IsNull(i) {
		return nil, nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Uint64:
		return int64(a.Value(i)), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.Binary:
		return bytes.Clone(a.Value(i)), nil
	case *array.LargeBinary:
		return bytes.Clone(a.Value(i)), nil
	case *array.FixedSizeBinary:
		return bytes.Clone(a.Value(i)), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return a.Value(i).ToTime(unit).UTC().Truncate(time.Microsecond), nil
	case *array.Date32:
		return a.Value(i).ToTime().Format(time.DateOnly), nil
	case *array.Date64:
		return a.Value(i).ToTime().Format(time.DateOnly), nil
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale), nil
	case *array.Dictionary:
		return valueAt(a.Dictionary(), a.GetValueIndex(i))
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := make(map[string]any, a.NumField())
		for f := 0; f < a.NumField(); f++ {
			v, err := valueAt(a.Field(f), i)
			if err != nil {
				return nil, err
			}
			m[st.Field(f).Name] = v
		}
		return m, nil
	case *array.Map:
		lo, hi := a.ValueOffsets(i)
		m := make(map[string]any, hi-lo)
		for j := lo; j < hi; j++ {
			k, err := valueAt(a.Keys(), int(j))
			if err != nil {
				return nil, err
			}
			v, err := valueAt(a.Items(), int(j))
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = v
		}
		return m, nil
	case array.ListLike:
		lo, hi := a.ValueOffsets(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			v, err := valueAt(a.ListValues(), int(j))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported Arrow type %s", arr.DataType())
}

// partitionValue parses a partition value (PROTOCOL.md "Partition Value
// Serialization") as the plain Go value of its column's type.
func partitionValue(t DataType, s *string) (any, error) {
	if s == nil {
		return nil, nil
	}
	v := *s
	p := t.Primitive
	if v == "" && p != "string" {
		return nil, nil
	}
	switch {
	case p == "string":
		return v, nil
	case p == "long" || p == "integer" || p == "short" || p == "byte":
		return strconv.ParseInt(v, 10, 64)
	case p == "double" || p == "float":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, err
		}
		return f, nil
	case p == "boolean":
		return strconv.ParseBool(v)
	case p == "binary":
		return []byte(v), nil
	case p == "date":
		return v, nil
	case p == "timestamp" || p == "timestamp_ntz":
		for _, layout := range []string{"2006-01-02 15:04:05.999999", time.RFC3339Nano} {
			if ts, err := time.Parse(layout, v); err == nil {
				return ts.UTC(), nil
			}
		}
		return nil, fmt.Errorf("timestamp partition value %q", v)
	case len(p) > 7 && p[:7] == "decimal":
		return v, nil
	}
	return nil, fmt.Errorf("partition column of type %s", t)
}
