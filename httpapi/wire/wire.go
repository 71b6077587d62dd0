// Package wire is the JSON of Tributary's HTTP API: Confluent REST v3
// produce records and their delivery reports (what the edge accepts), and
// the records, partitions and group offsets the cloud's read API answers
// with. It decodes what clients send, with every size checked, and
// encodes what the servers answer; it knows nothing of the WAL or the
// tables, so its fuzz targets run in a small test binary.
//
// A key or value is {"type": T, "data": D} as in Confluent's v3 produce
// API: BINARY (D is base64), STRING (D is a JSON string, stored as its
// UTF-8 bytes) or JSON (D is any JSON value, stored as its compact JSON
// text, as Confluent's JSON serializer does); a missing type means JSON.
// A missing key, or data null, is a null key (a null value is an empty
// one: the table's value column is not nullable). Schema-registry formats
// (AVRO, PROTOBUF, JSONSCHEMA, schema ids and subjects) are refused with a
// 400 that names the field. Header values are base64, as in Confluent.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// Data types of keys and values.
const (
	Binary = "BINARY"
	String = "STRING"
	JSON   = "JSON"
)

// ProduceRecord is one record of a Confluent REST v3 produce request
// (POST /v3/clusters/{cluster}/topics/{topic}/records).
type ProduceRecord struct {
	PartitionID *int32          `json:"partition_id"`
	Headers     []ProduceHeader `json:"headers"`
	Key         *ProduceData    `json:"key"`
	Value       *ProduceData    `json:"value"`
	Timestamp   *time.Time      `json:"timestamp"`
}

// ProduceHeader is one record header; Value is base64 (null = empty).
type ProduceHeader struct {
	Name  string  `json:"name"`
	Value *string `json:"value"`
}

// ProduceData is a key or a value.
type ProduceData struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
	// Schema-registry fields: refused (there is no schema registry).
	SchemaID      *int            `json:"schema_id"`
	Subject       *string         `json:"subject"`
	SchemaVersion *int            `json:"schema_version"`
	Schema        json.RawMessage `json:"schema"`
}

// Limits of a decoded record.
const (
	MaxHeaders       = 1024
	MaxHeaderNameLen = 1024
)

// FieldError is a request that cannot be accepted, naming the field: a
// 400 with the field in the message.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func bad(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Decoded is a produce record as bytes.
type Decoded struct {
	Partition int32 // -1: the server's own partition
	Key       []byte
	Value     []byte
	Headers   []Header
	// Timestamp is the producer's timestamp in unix ms (0 = none).
	Timestamp int64
	KeyType   string // "" when the key is null
	ValueType string
}

// Header is a decoded header.
type Header struct {
	Key   string
	Value []byte
}

// Decode turns one produce record into bytes, checking each field.
func (r *ProduceRecord) Decode() (Decoded, error) {
	d := Decoded{Partition: -1}
	if r.PartitionID != nil {
		if *r.PartitionID < 0 {
			return d, bad("partition_id", "%d: want a partition number >= 0 (or leave it out)", *r.PartitionID)
		}
		d.Partition = *r.PartitionID
	}
	if len(r.Headers) > MaxHeaders {
		return d, bad("headers", "%d headers: at most %d", len(r.Headers), MaxHeaders)
	}
	for i, h := range r.Headers {
		if h.Name == "" || len(h.Name) > MaxHeaderNameLen || !utf8.ValidString(h.Name) {
			return d, bad(fmt.Sprintf("headers[%d].name", i), "want a UTF-8 name of 1-%d bytes", MaxHeaderNameLen)
		}
		var v []byte
		if h.Value != nil {
			var err error
			if v, err = base64.StdEncoding.DecodeString(*h.Value); err != nil {
				return d, bad(fmt.Sprintf("headers[%d].value", i), "not base64: %v", err)
			}
		}
		d.Headers = append(d.Headers, Header{Key: h.Name, Value: v})
	}
	var err error
	if d.Key, d.KeyType, err = r.Key.bytes("key"); err != nil {
		return d, err
	}
	if d.Value, d.ValueType, err = r.Value.bytes("value"); err != nil {
		return d, err
	}
	if d.Value == nil {
		d.Value = []byte{}
	}
	if r.Timestamp != nil {
		d.Timestamp = r.Timestamp.UnixMilli()
		if d.Timestamp <= 0 {
			return d, bad("timestamp", "%s: want a time after 1970", r.Timestamp.Format(time.RFC3339))
		}
	}
	return d, nil
}

// bytes is the data's bytes and type; nil, "" for a null.
func (p *ProduceData) bytes(field string) ([]byte, string, error) {
	if p == nil {
		return nil, "", nil
	}
	if p.SchemaID != nil || p.Subject != nil || p.SchemaVersion != nil || len(p.Schema) > 0 {
		return nil, "", bad(field, "schema registry formats are not supported: use type BINARY, STRING or JSON")
	}
	raw := bytes.TrimSpace(p.Data)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", nil
	}
	switch p.Type {
	case Binary:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, "", bad(field+".data", "BINARY data must be a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, "", bad(field+".data", "not base64: %v", err)
		}
		return b, Binary, nil
	case String:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, "", bad(field+".data", "STRING data must be a JSON string")
		}
		return []byte(s), String, nil
	case JSON, "":
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, "", bad(field+".data", "not JSON: %v", err)
		}
		return buf.Bytes(), JSON, nil
	case "AVRO", "PROTOBUF", "JSONSCHEMA":
		return nil, "", bad(field+".type", "%s needs a schema registry, which Tributary does not have: use BINARY, STRING or JSON", p.Type)
	}
	return nil, "", bad(field+".type", "%q: want BINARY, STRING or JSON", p.Type)
}

// DecodeProduce reads one produce record (a JSON object) from dec.
// io.EOF at the end of the stream; a syntax error is a *FieldError on
// field "body" (the stream cannot be read past it).
func DecodeProduce(dec *json.Decoder) (*ProduceRecord, error) {
	var r ProduceRecord
	if err := dec.Decode(&r); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			f := te.Field
			if f == "" {
				f = "body"
			}
			return nil, bad(f, "want %s, not JSON %s", te.Type, te.Value)
		case errors.As(err, &se):
			return nil, bad("body", "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.EOF):
			return nil, err
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, bad("body", "truncated JSON: the body ended inside a record")
		}
		return nil, err
	}
	return &r, nil
}

// Report is the delivery report of one produced record (Confluent's
// ProduceResponse): ErrorCode 200 with the partition, offset and
// timestamp where the record is durable, or an HTTP status code and a
// message. Reason and RetryAfterMs are Tributary's, set on back-pressure
// (budget, replication) so a streaming client knows when to retry.
type Report struct {
	ErrorCode    int          `json:"error_code"`
	Message      string       `json:"message,omitempty"`
	ClusterID    string       `json:"cluster_id,omitempty"`
	TopicName    string       `json:"topic_name,omitempty"`
	PartitionID  *int32       `json:"partition_id,omitempty"`
	Offset       *int64       `json:"offset,omitempty"`
	Timestamp    string       `json:"timestamp,omitempty"`
	Key          *ReportValue `json:"key,omitempty"`
	Value        *ReportValue `json:"value,omitempty"`
	Reason       string       `json:"reason,omitempty"`
	RetryAfterMs int64        `json:"retry_after_ms,omitempty"`
}

// ReportValue describes a produced key or value.
type ReportValue struct {
	Type string `json:"type"`
	Size int    `json:"size"`
}

// Data is a key or value in a read response: {"type", "data"} as a
// produce request has it, so what a reader gets can be produced again.
type Data struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Formats a reader asks values in (the read API's format parameter).
const (
	FormatBinary = "binary" // every key and value BINARY (base64): lossless, the default
	FormatString = "string" // STRING where the bytes are UTF-8, else BINARY
	FormatJSON   = "json"   // JSON where the bytes are JSON, else BINARY
)

// Encode renders b in format; nil for a null.
func Encode(b []byte, format string) *Data {
	if b == nil {
		return nil
	}
	switch format {
	case FormatJSON:
		// Only compact JSON: produced again, JSON data is compacted, so
		// anything else would not come back as the same bytes.
		var c bytes.Buffer
		if json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b) {
			return &Data{Type: JSON, Data: json.RawMessage(b)}
		}
	case FormatString:
		if utf8.Valid(b) {
			s, _ := json.Marshal(string(b))
			return &Data{Type: String, Data: s}
		}
	}
	s, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
	return &Data{Type: Binary, Data: s}
}

// Marshal encodes v as JSON without escaping <, > and & (a JSON value
// embedded as data keeps its bytes).
func Marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Record is one record of a read response.
type Record struct {
	Stream    string      `json:"stream"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Timestamp string      `json:"timestamp"` // RFC 3339, the edge's acceptance time
	Key       *Data       `json:"key"`
	Value     *Data       `json:"value"`
	Headers   []OutHeader `json:"headers,omitempty"`
	Topic     string      `json:"topic,omitempty"`
	Source    string      `json:"source,omitempty"`
}

// OutHeader is a header of a read record; Value base64 as in produce.
type OutHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Records is the answer of a long-poll read.
type Records struct {
	Records []Record `json:"records"`
	// NextOffset is the offset to ask for next.
	NextOffset int64 `json:"next_offset"`
	// HighWatermark is the partition's committed end (the next offset
	// not yet readable).
	HighWatermark int64 `json:"high_watermark"`
}

// PartitionInfo describes one partition: Earliest is the lowest offset
// in the table, Latest the next offset to be committed.
type PartitionInfo struct {
	Stream    string `json:"stream"`
	Partition int32  `json:"partition"`
	Earliest  int64  `json:"earliest_offset"`
	Latest    int64  `json:"latest_offset"`
}

// OffsetForTime answers an offset look-up by timestamp: the first record
// accepted at or after the time, or (Found false) the partition's end.
type OffsetForTime struct {
	Stream    string `json:"stream"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Timestamp string `json:"timestamp,omitempty"`
	Found     bool   `json:"found"`
}

// GroupOffset is one committed offset of a consumer group.
type GroupOffset struct {
	Stream    string `json:"stream"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata,omitempty"`
}

// GroupOffsets is a commit request and a fetch answer.
type GroupOffsets struct {
	Group   string        `json:"group,omitempty"`
	Offsets []GroupOffset `json:"offsets"`
}

// Error is the body of every error answer (Confluent's error shape).
type Error struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
	Reason    string `json:"reason,omitempty"`
}

// Time formats unix microseconds as RFC 3339 (UTC, microseconds).
func Time(micros int64) string {
	return time.UnixMicro(micros).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}
