package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestDecode: every type, nulls, headers, the producer timestamp, and the
// refusals, each naming its field.
func TestDecode(t *testing.T) {
	for _, c := range []struct {
		in        string
		key, val  string // "<nil>" for nil
		vt, field string
	}{
		{`{"value":{"type":"BINARY","data":"AAEC"}}`, "<nil>", "\x00\x01\x02", Binary, ""},
		{`{"key":{"type":"STRING","data":"k"},"value":{"type":"STRING","data":"héllo"}}`, "k", "héllo", String, ""},
		{`{"value":{"type":"JSON","data":{"a": [1, 2]}}}`, "<nil>", `{"a":[1,2]}`, JSON, ""},
		{`{"value":{"data":"x"}}`, "<nil>", `"x"`, JSON, ""},
		{`{"key":{"type":"BINARY","data":null},"value":null}`, "<nil>", "", "", ""},
		{`{}`, "<nil>", "", "", ""},
		{`{"value":{"type":"XML","data":"x"}}`, "", "", "", "value.type"},
		{`{"value":{"type":"AVRO","data":{}}}`, "", "", "", "value.type"},
		{`{"value":{"schema_id":3,"data":{}}}`, "", "", "", "value"},
		{`{"value":{"type":"BINARY","data":"***"}}`, "", "", "", "value.data"},
		{`{"value":{"type":"BINARY","data":7}}`, "", "", "", "value.data"},
		{`{"key":{"type":"STRING","data":{}}}`, "", "", "", "key.data"},
		{`{"partition_id":-1}`, "", "", "", "partition_id"},
		{`{"headers":[{"name":"","value":null}]}`, "", "", "", "headers[0].name"},
		{`{"headers":[{"name":"h","value":"%%"}]}`, "", "", "", "headers[0].value"},
		{`{"timestamp":"1960-01-01T00:00:00Z"}`, "", "", "", "timestamp"},
	} {
		r, err := DecodeProduce(json.NewDecoder(strings.NewReader(c.in)))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		d, err := r.Decode()
		var fe *FieldError
		if c.field != "" {
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("%s: error %v, want one on %s", c.in, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		key := "<nil>"
		if d.Key != nil {
			key = string(d.Key)
		}
		if key != c.key || string(d.Value) != c.val || d.Value == nil || d.ValueType != c.vt {
			t.Errorf("%s: key %q value %q (%s)", c.in, key, d.Value, d.ValueType)
		}
	}
	r, _ := DecodeProduce(json.NewDecoder(strings.NewReader(`{"partition_id":2,"headers":[{"name":"a","value":"eA=="},{"name":"b","value":null}],"timestamp":"2021-02-05T19:14:42Z","value":{"data":1}}`)))
	d, err := r.Decode()
	if err != nil || d.Partition != 2 || len(d.Headers) != 2 || string(d.Headers[0].Value) != "x" || d.Headers[1].Value != nil || d.Timestamp != 1612552482000 {
		t.Fatalf("%+v %v", d, err)
	}
}

// TestDecodeStream: concatenated records, then the end, a syntax error
// (field body) and a truncated record.
func TestDecodeStream(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"value":{"data":1}} {"value":{"data":2}}` + "\n"))
	for range 2 {
		if _, err := DecodeProduce(dec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := DecodeProduce(dec); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for _, in := range []string{`{"value":}`, `{"value":{"data":1}`, `[1,2]`, `{"partition_id":"x"}`} {
		_, err := DecodeProduce(json.NewDecoder(strings.NewReader(in)))
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FieldError", in, err)
		}
	}
}

// TestEncode: a read renders what a produce would send again, and never
// loses bytes.
func TestEncode(t *testing.T) {
	for _, c := range []struct {
		b      []byte
		format string
		want   string
	}{
		{[]byte(`{"a":1}`), FormatJSON, `{"type":"JSON","data":{"a":1}}`},
		{[]byte(`{ "a": 1 }`), FormatJSON, `{"type":"BINARY","data":"eyAiYSI6IDEgfQ=="}`},
		{[]byte(`"<&>"`), FormatJSON, `{"type":"JSON","data":"<&>"}`},
		{[]byte(`not json`), FormatJSON, `{"type":"BINARY","data":"bm90IGpzb24="}`},
		{[]byte("héllo"), FormatString, `{"type":"STRING","data":"héllo"}`},
		{[]byte{0xff}, FormatString, `{"type":"BINARY","data":"/w=="}`},
		{[]byte(`{"a":1}`), FormatBinary, `{"type":"BINARY","data":"eyJhIjoxfQ=="}`},
	} {
		got := Marshal(Encode(c.b, c.format))
		if string(got) != c.want {
			t.Errorf("%q %s: %s, want %s", c.b, c.format, got, c.want)
		}
		var back ProduceRecord
		json.Unmarshal([]byte(`{"value":`+string(got)+`}`), &back)
		d, err := back.Decode()
		if err != nil || !bytes.Equal(d.Value, c.b) {
			t.Errorf("%q %s: produced again as %q (%v)", c.b, c.format, d.Value, err)
		}
	}
	if Encode(nil, FormatJSON) != nil {
		t.Error("nil must stay null")
	}
}

// FuzzProduceRecord decodes a produce body as the edge does: it must never
// panic, and whatever it accepts is re-encoded and decoded to the same
// bytes.
func FuzzProduceRecord(f *testing.F) {

	// The committed corpus (testdata/fuzz/FuzzProduceRecord) has the
	// Confluent shapes, streams and a malformed record.
	f.Add([]byte(`{"value":{"type":"BINARY","data":"AAEC"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := json.NewDecoder(bytes.NewReader(b))
		for range 8 {
			r, err := DecodeProduce(dec)
			if err != nil {
				return
			}
			d, err := r.Decode()
			if err != nil {
				continue
			}
			for _, format := range []string{FormatBinary, FormatString, FormatJSON} {
				enc := Marshal(Encode(d.Value, format))
				var back ProduceRecord
				if err := json.Unmarshal([]byte(`{"value":`+string(enc)+`}`), &back); err != nil {
					t.Fatalf("re-encoded %s: %v", enc, err)
				}
				bd, err := back.Decode()
				if err != nil || !bytes.Equal(bd.Value, d.Value) {
					t.Fatalf("value %q as %s: %s back as %q (%v)", d.Value, format, enc, bd.Value, err)
				}
			}
		}
	})
}
