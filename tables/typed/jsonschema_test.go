package typed

import (
	"errors"
	"strings"
	"testing"
)

const telemetrySchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "telemetry",
  "type": "object",
  "required": ["device", "temp_c"],
  "properties": {
    "device": {"type": "string"},
    "seq": {"type": "integer"},
    "ts": {"type": "string", "format": "date-time"},
    "temp_c": {"type": "number"},
    "ok": {"type": ["boolean", "null"]},
    "loc": {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "number"}}},
    "tags": {"type": "array", "items": {"type": "string"}}
  }
}`

func TestJSONSchema(t *testing.T) {
	root, err := ParseJSONSchema([]byte(telemetrySchema))
	if err != nil {
		t.Fatal(err)
	}
	want := "struct<device: string, seq: long, ts: timestamptz, temp_c: double, ok: boolean, loc: struct<x: double>, tags: list<string>>"
	if got := root.String(); got != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
	for _, p := range []string{
		`{"device":"d","temp_c":21,"extra":"kept in value"}`,
		`{"device":"d","temp_c":21.5,"seq":3,"ts":"2025-01-02T03:04:05Z","ok":null,"loc":{"x":1},"tags":["a"]}`,
	} {
		if err := Validate(mustParse(t, p), root); err != nil {
			t.Errorf("Validate(%s): %v", p, err)
		}
	}
	for p, why := range map[string]string{
		`{"temp_c":1}`:                            "required device",
		`{"device":"d","temp_c":null}`:            "required temp_c",
		`{"device":"d","temp_c":"hot"}`:           "temp_c is string",
		`{"device":"d","temp_c":1,"seq":1.5}`:     "seq is double",
		`{"device":"d","temp_c":1,"ts":"monday"}`: "RFC 3339",
		`{"device":"d","temp_c":1,"loc":{"y":1}}`: "loc.y is not declared",
		`{"device":"d","temp_c":1,"tags":[1]}`:    "tags[] is long",
		`{"device":"d","temp_c":1,"loc":[]}`:      "want an object",
	} {
		err := Validate(mustParse(t, p), root)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("Validate(%s) = %v, want %q", p, err, why)
		}
	}
	for s, why := range map[string]string{
		`{"type":"array","items":{"type":"string"}}`:                              "top level",
		`{"type":"object","properties":{"a":{"type":"integer","minimum":0}}}`:     `"minimum" is not supported`,
		`{"type":"object","properties":{"a":{"enum":[1]}}}`:                       `"enum" is not supported`,
		`{"type":"object","properties":{"a.b":{"type":"string"}}}`:                "cannot be a column",
		`{"type":"object","required":["x"]}`:                                      "not a property",
		`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`: "format",
		`{"type":"object","properties":{"a":{"type":["string","integer"]}}}`:      "want one type",
		`{"type":"object","properties":{"a":{"type":"integer","items":{}}}}`:      "does not apply",
		`{"type":"object","properties":{"a":{}}}`:                                 "type is required",
		`not json`: "not JSON",
	} {
		if _, err := ParseJSONSchema([]byte(s)); !errors.Is(err, ErrSchemaFile) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseJSONSchema(%s) = %v, want %q", s, err, why)
		}
	}
}

func TestDiff(t *testing.T) {
	have, _ := ParseJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"s":{"type":"object","properties":{"x":{"type":"string"}}}}}`))
	same, _ := ParseJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"s":{"type":"object","properties":{"x":{"type":"string"},"y":{"type":"boolean"}}},"b":{"type":"number"}}}`))
	adds, refused := Diff(have, same)
	var paths []string
	for _, a := range adds {
		paths = append(paths, strings.Join(a.Path, ".")+":"+a.Type.String())
	}
	if strings.Join(paths, " ") != "s.y:boolean b:double" || len(refused) != 0 {
		t.Errorf("adds %v refused %v", paths, refused)
	}
	bad, _ := ParseJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"number"}}}`))
	_, refused = Diff(have, bad)
	if len(refused) != 2 || !strings.Contains(refused[0], "a: the table's column is long, the schema says double") || !strings.Contains(refused[1], "s: the table has this column, the schema no longer declares it") {
		t.Errorf("refused %q", refused)
	}
}
