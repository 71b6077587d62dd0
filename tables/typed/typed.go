// Package typed turns JSON payloads into typed columns: a strict JSON
// decoder (Decode), type inference and schema extension (Schema.Extend,
// Additions) and the check of a payload against a table's columns
// (Check). It is pure — no Iceberg, no Arrow, no I/O — so that it is
// cheap to fuzz and to test; package tables maps its types to Iceberg
// columns and writes the values to Parquet.
//
// # Rules
//
// A payload is typed only if it is one JSON object (RFC 8259, UTF-8,
// nesting at most MaxDepth, at most MaxMembers members an object, no
// duplicate names, integers within 64 bits, numbers within a double).
// Types: true/false → boolean; a number → double, or long for an
// integer literal when Options.Longs is set (a stream's numbers: long);
// a long column (inferred so, declared integer, or an existing table's)
// takes integers and whole doubles such as 22.0, and a fraction is a
// conflict; a double column takes every number; a string → string, or timestamptz when
// Options.Timestamps is set and its first value is an RFC 3339 date-time;
// an object → struct; an array → list of its elements' type. null, [] and
// {} add no column. Members whose names are empty, longer than
// MaxNameBytes, contain '.' or (at the top level) name an envelope column
// stay in value only.
//
// A payload that breaks a rule, or whose value does not fit an existing
// column, is not typed: its row has null typed columns and it goes to the
// dead-letter table with the error.
package typed

import "fmt"

// Mode is how a stream's payloads become columns.
type Mode string

// Modes.
const (
	// Raw: the envelope only (value holds the payload).
	Raw Mode = "raw"
	// Infer: JSON object payloads also land as typed columns, inferred
	// from the payloads; a new field adds a column.
	Infer Mode = "infer"
	// Declared ("schema"): JSON object payloads are validated against a declared JSON
	// Schema (ParseJSONSchema) and land as its typed columns.
	Declared Mode = "schema"
)

// ParseMode checks a configured mode ("" is Raw).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Raw:
		return Raw, nil
	case Infer:
		return Infer, nil
	case Declared:
		return Declared, nil
	}
	return "", fmt.Errorf("payload mode %q: want raw, infer or schema", s)
}

// Policy is one stream's payload configuration.
type Policy struct {
	Mode Mode
	// Timestamps: RFC 3339 strings of new fields become timestamptz.
	Timestamps bool
	// MaxColumns caps the typed fields (DefaultMaxColumns if 0).
	MaxColumns int
	// Longs (infer): integer literals of new fields become long columns
	// (Options.Longs); default double.
	Longs bool
	// SchemaFile and Columns (schema mode): the JSON Schema file and the
	// columns it declares (ParseJSONSchema).
	SchemaFile string
	Columns    *Type
	// EventTime names the top-level payload field (an RFC 3339 date-time)
	// whose time is the event_time column; PartitionByEventTime makes the
	// table's day or hour partition spec use it instead of the ingest
	// timestamp.
	EventTime            string
	PartitionByEventTime bool
}

// Typed reports whether payloads become columns.
func (p Policy) Typed() bool { return p.Mode == Infer || p.Mode == Declared }
