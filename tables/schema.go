package tables

import (
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Field IDs of the envelope every stream table has (DESIGN.md "Table layout").
// They are fixed forever: Parquet files written by any version carry them.
// They are the IDs a catalog assigns afresh on create (top-level fields in
// order, then nested ones), and headers comes last: iceberg-go v0.7.0's
// schema visitor loses its place on a struct-in-list followed by siblings.
const (
	FieldPartition         = 1
	FieldOffset            = 2
	FieldTimestamp         = 3
	FieldTopic             = 4
	FieldKey               = 5
	FieldValue             = 6
	FieldSource            = 7
	FieldClientID          = 8
	FieldNode              = 9
	FieldProducerTimestamp = 10
	FieldHeaders           = 11
	fieldHeaderElement     = 12
	fieldHeaderKey         = 13
	fieldHeaderValue       = 14
	FieldPrincipal         = 15 // added by evolution (issue 13)

	// Columns of a dead-letter table after the envelope (dlq.go).
	FieldDLQError         = 16
	FieldDLQSchemaVersion = 17

	// PartitionFieldDay is the field ID of the day(timestamp) partition field.
	PartitionFieldDay = 1000
)

// Column names of the envelope.
const (
	ColPartition         = "partition"
	ColOffset            = "offset"
	ColTimestamp         = "timestamp"
	ColTopic             = "topic"
	ColKey               = "key"
	ColValue             = "value"
	ColHeaders           = "headers"
	ColSource            = "source"
	ColClientID          = "client_id"
	ColNode              = "node"
	ColProducerTimestamp = "producer_timestamp"
	ColPrincipal         = "principal"

	ColDLQError         = "error"
	ColDLQSchemaVersion = "schema_version"

	// ColEventTime is the event-time column of a typed stream that names
	// an event-time field (typedcols.go): that field's time, timestamptz.
	ColEventTime = "event_time"
)

// envelopeNames are the envelope's column names (and the dead-letter
// table's): a payload member of such a name is not a typed column.
var envelopeNames = []string{ColPartition, ColOffset, ColTimestamp, ColTopic, ColKey, ColValue, ColHeaders,
	ColSource, ColClientID, ColNode, ColProducerTimestamp, ColPrincipal, ColDLQError, ColDLQSchemaVersion, ColEventTime}

// DLQSuffix ends the name of a stream's dead-letter table:
// <namespace>.<stream>_dlq. Stream names with it are reserved.
const DLQSuffix = "_dlq"

// DLQStream is the dead-letter table of stream.
func DLQStream(stream string) string { return stream + DLQSuffix }

// IsDLQ reports whether stream names a dead-letter table.
func IsDLQ(stream string) bool { return strings.HasSuffix(stream, DLQSuffix) }

// dlqColumns are the columns a dead-letter table has after the envelope.
func dlqColumns() []iceberg.NestedField {
	return []iceberg.NestedField{
		{ID: FieldDLQError, Name: ColDLQError, Type: iceberg.PrimitiveTypes.String, Required: false,
			Doc: "why the payload has no typed columns in the stream table"},
		{ID: FieldDLQSchemaVersion, Name: ColDLQSchemaVersion, Type: iceberg.PrimitiveTypes.Int32, Required: false,
			Doc: "schema id of the stream table the payload was checked against"},
	}
}

// addedColumnsOf are the columns added after the first release to the
// table id: the envelope's, and a dead-letter table's own.
func addedColumnsOf(id table.Identifier) []iceberg.NestedField {
	if len(id) > 0 && IsDLQ(id[len(id)-1]) {
		return append(addedColumns(), dlqColumns()...)
	}
	return addedColumns()
}

// EnvelopeSchema is the Iceberg schema of a stream table: InitialSchema
// followed by the columns added since (addedColumns). It is the schema of
// every data file Tributary writes and of every table once evolved. Headers
// are a list of (key, value) structs rather than a map because Kafka allows
// repeated header keys and their order matters. producer_timestamp is the
// Kafka record's own timestamp (null for MQTT); principal is the
// authenticated sender (null for anonymous clients and for rows written
// before the column existed).
func EnvelopeSchema() *iceberg.Schema {
	fields := append(InitialSchema().Fields(), addedColumns()...)
	return iceberg.NewSchemaWithIdentifiers(0, []int{FieldPartition, FieldOffset}, fields...)
}

// addedColumns are the envelope columns added after the first release, in
// the order they were added (so each one's ID is the previous one's + 1).
// All are optional: rows written before a column existed read as null.
func addedColumns() []iceberg.NestedField {
	return []iceberg.NestedField{
		{ID: FieldPrincipal, Name: ColPrincipal, Type: iceberg.PrimitiveTypes.String, Required: false,
			Doc: "authenticated principal that sent the message (user, certificate CN or JWT subject); null = anonymous"},
	}
}

// InitialSchema is the envelope as first released (field IDs 1–14). Tables
// are created with it and then evolved to EnvelopeSchema (evolve.go): a create
// assigns IDs afresh, top-level fields first, so creating with a column
// after headers would give that column headers' IDs.
func InitialSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{FieldPartition, FieldOffset},
		iceberg.NestedField{ID: FieldPartition, Name: ColPartition, Type: iceberg.PrimitiveTypes.Int32, Required: true,
			Doc: "partition number, global per table"},
		iceberg.NestedField{ID: FieldOffset, Name: ColOffset, Type: iceberg.PrimitiveTypes.Int64, Required: true,
			Doc: "dense per-partition offset assigned by the edge WAL; the Kafka offset and Pulsar entry id"},
		iceberg.NestedField{ID: FieldTimestamp, Name: ColTimestamp, Type: iceberg.PrimitiveTypes.Timestamp, Required: true,
			Doc: "time the edge node accepted the message"},
		iceberg.NestedField{ID: FieldTopic, Name: ColTopic, Type: iceberg.PrimitiveTypes.String, Required: true,
			Doc: "original MQTT or Kafka topic"},
		iceberg.NestedField{ID: FieldKey, Name: ColKey, Type: iceberg.PrimitiveTypes.Binary, Required: false,
			Doc: "Kafka key; null for MQTT"},
		iceberg.NestedField{ID: FieldValue, Name: ColValue, Type: iceberg.PrimitiveTypes.Binary, Required: true,
			Doc: "payload bytes, byte-exact"},
		iceberg.NestedField{ID: FieldSource, Name: ColSource, Type: iceberg.PrimitiveTypes.String, Required: true,
			Doc: "mqtt or kafka"},
		iceberg.NestedField{ID: FieldClientID, Name: ColClientID, Type: iceberg.PrimitiveTypes.String, Required: true,
			Doc: "MQTT client id or Kafka client id"},
		iceberg.NestedField{ID: FieldNode, Name: ColNode, Type: iceberg.PrimitiveTypes.String, Required: true,
			Doc: "edge node that accepted the message"},
		iceberg.NestedField{ID: FieldProducerTimestamp, Name: ColProducerTimestamp, Type: iceberg.PrimitiveTypes.Timestamp, Required: false,
			Doc: "Kafka record timestamp set by the producer; null for MQTT"},
		iceberg.NestedField{ID: FieldHeaders, Name: ColHeaders, Required: false,
			Doc: "Kafka headers / MQTT 5 user properties, in order",
			Type: &iceberg.ListType{
				ElementID: fieldHeaderElement, ElementRequired: true,
				Element: &iceberg.StructType{FieldList: []iceberg.NestedField{
					{ID: fieldHeaderKey, Name: "key", Type: iceberg.PrimitiveTypes.String, Required: true},
					{ID: fieldHeaderValue, Name: "value", Type: iceberg.PrimitiveTypes.Binary, Required: false},
				}},
			}},
	)
}

// PartitionSpec returns the table's partition spec: day(timestamp), or
// hour(timestamp) when granularity is "hour".
func PartitionSpec(granularity string) (iceberg.PartitionSpec, error) {
	var tr iceberg.Transform
	name := "timestamp_day"
	switch granularity {
	case "", "day":
		tr = iceberg.DayTransform{}
	case "hour":
		tr = iceberg.HourTransform{}
		name = "timestamp_hour"
	default:
		return iceberg.PartitionSpec{}, fmt.Errorf("partition granularity %q: want day or hour", granularity)
	}
	return iceberg.NewPartitionSpec(iceberg.PartitionField{
		SourceIDs: []int{FieldTimestamp}, FieldID: PartitionFieldDay, Name: name, Transform: tr,
	}), nil
}
