package typed

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	good := []string{
		`{}`, `{"a":1}`, ` {"a" : [1, 2.5, -3e2], "b": {"c": null, "d": true}} `,
		`{"s":"\u00e9\ud83d\ude00\n\"\\\/"}`, `[1,2]`, `"x"`, `0`, `-0.5`,
		`{"big":9223372036854775807,"neg":-9223372036854775808}`,
	}
	for _, s := range good {
		v, err := Decode([]byte(s))
		if err != nil {
			t.Errorf("Decode(%s): %v", s, err)
			continue
		}
		// Compare with encoding/json's reading.
		var want any
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("encoding/json refuses %s: %v", s, err)
		}
		if got := toAny(v); !sameJSON(got, want) {
			t.Errorf("Decode(%s) = %#v, want %#v", s, got, want)
		}
	}
	bad := []struct {
		in   string
		want error
	}{
		{``, ErrSyntax}, {`{`, ErrSyntax}, {`{"a":1,}`, ErrSyntax}, {`{"a":1}x`, ErrSyntax}, {`[1,]`, ErrSyntax},
		{`{"a":01}`, ErrSyntax}, {`{"a":1.}`, ErrSyntax}, {`{"a":"` + "\x01" + `"}`, ErrSyntax}, {`{'a':1}`, ErrSyntax},
		{`{"a":"\x"}`, ErrSyntax}, {`{"a":tru}`, ErrSyntax}, {`not json`, ErrSyntax}, {`{"a":NaN}`, ErrSyntax},
		{"{\"a\":\"\xff\"}", ErrUTF8}, {`{"a":"\ud800"}`, ErrUTF8}, {`{"a":"\udc00x"}`, ErrUTF8}, {`{"a":"\ud800\u0041"}`, ErrUTF8},
		{`{"a":9223372036854775808}`, ErrRange}, {`{"a":1e400}`, ErrRange}, {`{"a":123456789012345678901234567890}`, ErrRange},
		{`{"a":1,"a":2}`, ErrDuplicate},
		{strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), ErrTooDeep},
		{strings.Repeat(`[`, 100000), ErrTooDeep},
	}
	for _, c := range bad {
		if _, err := Decode([]byte(c.in)); !errors.Is(err, c.want) {
			t.Errorf("Decode(%.60q) = %v, want %v", c.in, err, c.want)
		}
	}
	// Exactly MaxDepth levels are accepted.
	deep := strings.Repeat(`{"a":`, MaxDepth-1) + "{}" + strings.Repeat("}", MaxDepth-1)
	if _, err := Decode([]byte(deep)); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	wide := "{" + strings.Repeat(`"k":1,`, 0)
	var sb strings.Builder
	sb.WriteString(wide)
	for i := 0; i <= MaxMembers; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + itoa(i) + `":1`)
	}
	sb.WriteByte('}')
	if _, err := Decode([]byte(sb.String())); !errors.Is(err, ErrTooWide) {
		t.Errorf("%d members: %v", MaxMembers+1, err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func toAny(v Value) any {
	switch v.Kind {
	case Bool:
		return v.Bool
	case Long:
		return float64(v.Long)
	case Double:
		return v.Double
	case String:
		return v.Str
	case Object:
		m := map[string]any{}
		for _, mm := range v.Members {
			m[mm.Name] = toAny(mm.Value)
		}
		return m
	case Array:
		a := []any{}
		for _, e := range v.Elems {
			a = append(a, toAny(e))
		}
		return a
	}
	return nil
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func mustParse(t *testing.T, s string) Value {
	t.Helper()
	v, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return v
}

// TestExtend infers with Options.Longs (a stream's numbers: long);
// TestNumbersAreDoubles covers the default.
func TestExtend(t *testing.T) {
	s := NewSchema(nil, Options{Timestamps: true, Longs: true, Reserved: []string{"offset"}})
	for _, p := range []string{
		`{"device":"d1","seq":1,"temp_c":21,"ts":"2025-01-02T03:04:05.123456789Z","offset":3,"a.b":1,"":2}`,
		`{"temp_c":21.5,"loc":{"x":1,"y":null},"tags":["a","b"],"empty":[],"nothing":null}`,
		`{"readings":[{"v":1},{"v":2,"w":true}],"ts":"2025-01-02T03:04:06Z"}`,
	} {
		if err := s.Extend(mustParse(t, p)); err != nil {
			t.Fatalf("Extend(%s): %v", p, err)
		}
	}
	want := "struct<device: string, seq: long, temp_c: double, ts: timestamptz, loc: struct<x: long>, tags: list<string>, readings: list<struct<v: long, w: boolean>>>"
	if got := s.Root.String(); got != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
	if s.Columns() != 10 {
		t.Errorf("columns = %d, want 10", s.Columns())
	}
	adds := s.Additions()
	if len(adds) != 7 || strings.Join(adds[4].Path, ".") != "loc" {
		t.Errorf("additions = %+v", adds)
	}

	// The table has these columns now; a later batch adds only what is new.
	for _, f := range s.Root.Fields {
		f.New = false
	}
	markOld(s.Root)
	s2 := NewSchema(s.Root, Options{Timestamps: true})
	if err := s2.Extend(mustParse(t, `{"loc":{"x":2,"z":"n"},"readings":[{"u":1.5}]}`)); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, a := range s2.Additions() {
		paths = append(paths, strings.Join(a.Path, ".")+":"+a.Type.String())
	}
	if got := strings.Join(paths, " "); got != "loc.z:string readings.element.u:double" {
		t.Errorf("additions = %s", got)
	}

	// Conflicts leave the schema as it was.
	before := s2.Root.String()
	for _, p := range []string{
		`{"seq":"x","brand_new":1}`, `{"seq":1.5}`, `{"loc":[1]}`, `{"tags":"a"}`, `{"ts":"yesterday"}`,
		`{"readings":[{"v":"x"}]}`, `{"new":[1,"a"]}`, `{"device":{"a":1}}`,
	} {
		err := s2.Extend(mustParse(t, p))
		if !errors.Is(err, ErrConflict) {
			t.Errorf("Extend(%s) = %v, want a conflict", p, err)
		}
		if err := Check(mustParse(t, p), s2.Root, nil, true); !errors.Is(err, ErrConflict) && !strings.Contains(p, "new") {
			t.Errorf("Check(%s) = %v, want a conflict", p, err)
		}
	}
	if got := s2.Root.String(); got != before {
		t.Errorf("a conflict changed the schema:\n%s\n%s", before, got)
	}
	if err := Check(mustParse(t, `{"seq":2,"temp_c":3,"loc":{"x":null},"unknown":null}`), s2.Root, nil, true); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := Check(mustParse(t, `{"unknown":1}`), s2.Root, nil, true); !errors.Is(err, ErrTooManyColumns) {
		t.Errorf("Check strict of an unknown field: %v", err)
	}
	if err := Check(mustParse(t, `{"unknown":1}`), s2.Root, nil, false); err != nil {
		t.Errorf("Check lax of an unknown field: %v", err)
	}
}

// TestNumbersAreDoubles: by default a new number field is a double, so a
// sensor that reports 22 and then 21.5 keeps both readings; a table whose
// column is long keeps that type, takes a whole double (22.0) and refuses
// a fraction with a plain reason.
func TestNumbersAreDoubles(t *testing.T) {
	s := NewSchema(nil, Options{})
	for _, p := range []string{`{"c":22,"l":[1,2]}`, `{"c":21.5,"l":[0.5]}`} {
		if err := s.Extend(mustParse(t, p)); err != nil {
			t.Fatalf("Extend(%s): %v", p, err)
		}
		if err := Check(mustParse(t, p), s.Root, nil, true); err != nil {
			t.Fatalf("Check(%s): %v", p, err)
		}
	}
	if got := s.Root.String(); got != "struct<c: double, l: list<double>>" {
		t.Fatalf("schema %s", got)
	}

	long := &Type{Kind: Struct, Fields: []*Field{{Name: "c", Type: &Type{Kind: Long}}}}
	s = NewSchema(long, Options{})
	for _, p := range []string{`{"c":22}`, `{"c":22.0}`, `{"c":-3e2}`} {
		if err := s.Extend(mustParse(t, p)); err != nil {
			t.Errorf("Extend(%s) on a long column: %v", p, err)
		}
		if err := Check(mustParse(t, p), s.Root, nil, true); err != nil {
			t.Errorf("Check(%s) on a long column: %v", p, err)
		}
	}
	err := s.Extend(mustParse(t, `{"c":21.5}`))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "field c is a long column (the table's type, which it keeps) and 21.5 is not a whole number") {
		t.Fatalf("a fraction into a long column: %v", err)
	}
	if got := s.Root.String(); got != "struct<c: long>" {
		t.Fatalf("the table's type changed: %s", got)
	}
}

func markOld(t *Type) {
	for _, f := range t.Fields {
		f.New = false
		markOld(f.Type)
	}
	if t.Elem != nil {
		markOld(t.Elem)
	}
}

func TestColumnLimit(t *testing.T) {
	s := NewSchema(nil, Options{MaxColumns: 3})
	if err := s.Extend(mustParse(t, `{"a":1,"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(mustParse(t, `{"c":{"d":1}}`)); !errors.Is(err, ErrTooManyColumns) {
		t.Fatalf("over the limit: %v", err)
	}
	if err := s.Extend(mustParse(t, `{"c":1}`)); err != nil {
		t.Fatalf("up to the limit: %v", err)
	}
	if s.Columns() != 3 {
		t.Errorf("columns = %d", s.Columns())
	}
}

func TestNotObject(t *testing.T) {
	for _, p := range []string{`[1]`, `"s"`, `1`, `null`, `true`} {
		if _, err := Parse([]byte(p)); !errors.Is(err, ErrNotObject) {
			t.Errorf("Parse(%s) = %v", p, err)
		}
	}
}
