package httpapi

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/httpapi/wire"
)

// appendRecord appends r as the JSON of a read (wire.Record, as
// wire.Marshal encodes it) to dst. The binary format, every key and value
// base64, is written by hand: reflection and the RawMessage check cost an
// event stream most of its time; the other formats take wire.Marshal.
func appendRecord(dst []byte, stream string, r *tributary.Record, format string) []byte {
	if format != wire.FormatBinary {
		return append(dst, wire.Marshal(render(stream, r, format))...)
	}
	dst = append(dst, `{"stream":`...)
	dst = appendString(dst, stream)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = appendString(dst, wire.Time(r.Timestamp))
	dst = append(dst, `,"key":`...)
	dst = appendBinary(dst, r.Key)
	dst = append(dst, `,"value":`...)
	v := r.Value
	if v == nil {
		v = []byte{}
	}
	dst = appendBinary(dst, v)
	if len(r.Headers) > 0 {
		dst = append(dst, `,"headers":[`...)
		for i, h := range r.Headers {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"name":`...)
			dst = appendString(dst, h.Key)
			dst = append(dst, `,"value":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, h.Value)
			dst = append(dst, `"}`...)
		}
		dst = append(dst, ']')
	}
	if r.Topic != "" {
		dst = append(dst, `,"topic":`...)
		dst = appendString(dst, r.Topic)
	}
	if r.Source != "" {
		dst = append(dst, `,"source":`...)
		dst = appendString(dst, r.Source)
	}
	return append(dst, '}')
}

// appendBinary appends {"type":"BINARY","data":"<base64>"}, or null.
func appendBinary(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"type":"BINARY","data":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, `"}`...)
}

// appendString appends s as a JSON string: plain printable ASCII as it
// is, anything else as wire.Marshal quotes it.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return append(dst, wire.Marshal(s)...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
