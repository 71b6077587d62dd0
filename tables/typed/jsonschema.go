package typed

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// JSON Schema (Draft-07), the subset a stream in schema mode declares:
//
//   - type: "object", "integer" (→ long), "number" (→ double), "string"
//     (→ string; with "format": "date-time" → timestamptz), "boolean",
//     "array" (→ list); or [T, "null"] (null is always allowed: every
//     column is optional).
//   - properties (object), required (object: names that must be present
//     and not null), additionalProperties: false (object: no other members;
//     true, the default, leaves them in value only), items (array: one
//     schema).
//   - $schema, $id, title, description, $comment, default, examples: read
//     and ignored.
//
// Anything else (enum, minimum, pattern, oneOf, $ref, …) is refused when
// the file is loaded rather than silently not enforced. The top level must
// be an object; property names follow Usable.

// ErrSchemaFile is the error of a schema file outside the subset.
var ErrSchemaFile = errors.New("json schema")

// ParseJSONSchema reads a schema file: the Struct type of its columns,
// with Required and Closed set from required and additionalProperties.
func ParseJSONSchema(b []byte) (*Type, error) {
	v, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchemaFile, err)
	}
	t, err := schemaType(v, "", 1)
	if err != nil {
		return nil, err
	}
	if t.Kind != Struct {
		return nil, fmt.Errorf("%w: the top level is %s, want an object", ErrSchemaFile, t.Kind)
	}
	return t, nil
}

var ignoredKeywords = map[string]bool{"$schema": true, "$id": true, "title": true, "description": true, "$comment": true,
	"default": true, "examples": true}

func schemaType(v Value, path string, depth int) (*Type, error) {
	where := path
	if where == "" {
		where = "the top level"
	}
	if v.Kind != Object {
		return nil, fmt.Errorf("%w: %s: a schema must be an object", ErrSchemaFile, where)
	}
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: %s: nested deeper than %d", ErrSchemaFile, where, MaxDepth)
	}
	kw := map[string]Value{}
	for _, m := range v.Members {
		if ignoredKeywords[m.Name] {
			continue
		}
		switch m.Name {
		case "type", "properties", "required", "additionalProperties", "items", "format":
			kw[m.Name] = m.Value
		default:
			return nil, fmt.Errorf("%w: %s: keyword %q is not supported (docs/tables.md \"Typed columns\" lists the subset)", ErrSchemaFile, where, m.Name)
		}
	}
	typ, err := typeKeyword(kw["type"], where)
	if err != nil {
		return nil, err
	}
	only := func(allowed ...string) error {
		for k := range kw {
			if k != "type" && !contains(allowed, k) {
				return fmt.Errorf("%w: %s: %q does not apply to type %s", ErrSchemaFile, where, k, typ)
			}
		}
		return nil
	}
	switch typ {
	case "object":
		if err := only("properties", "required", "additionalProperties"); err != nil {
			return nil, err
		}
		t := &Type{Kind: Struct}
		if ap, ok := kw["additionalProperties"]; ok {
			if ap.Kind != Bool {
				return nil, fmt.Errorf("%w: %s: additionalProperties must be true or false", ErrSchemaFile, where)
			}
			t.Closed = !ap.Bool
		}
		if p, ok := kw["properties"]; ok {
			if p.Kind != Object {
				return nil, fmt.Errorf("%w: %s: properties must be an object", ErrSchemaFile, where)
			}
			for _, m := range p.Members {
				if !Usable(m.Name, false, nil) {
					return nil, fmt.Errorf("%w: %s: property name %q cannot be a column (empty, longer than %d bytes, or with '.')", ErrSchemaFile, where, m.Name, MaxNameBytes)
				}
				ft, err := schemaType(m.Value, join(path, m.Name), depth+1)
				if err != nil {
					return nil, err
				}
				t.Fields = append(t.Fields, &Field{Name: m.Name, Type: ft})
			}
		}
		if r, ok := kw["required"]; ok {
			if r.Kind != Array {
				return nil, fmt.Errorf("%w: %s: required must be an array of names", ErrSchemaFile, where)
			}
			for _, e := range r.Elems {
				f := t.Field(e.Str)
				if e.Kind != String || f == nil {
					return nil, fmt.Errorf("%w: %s: required name %q is not a property", ErrSchemaFile, where, e.Str)
				}
				f.Required = true
			}
		}
		return t, nil
	case "array":
		if err := only("items"); err != nil {
			return nil, err
		}
		it, ok := kw["items"]
		if !ok {
			return nil, fmt.Errorf("%w: %s: an array needs items", ErrSchemaFile, where)
		}
		et, err := schemaType(it, path+"[]", depth+1)
		if err != nil {
			return nil, err
		}
		return &Type{Kind: List, Elem: et}, nil
	case "string":
		if err := only("format"); err != nil {
			return nil, err
		}
		if f, ok := kw["format"]; ok {
			if f.Kind != String {
				return nil, fmt.Errorf("%w: %s: format must be a string", ErrSchemaFile, where)
			}
			if f.Str == "date-time" {
				return &Type{Kind: Timestamp}, nil
			}
			return nil, fmt.Errorf("%w: %s: format %q is not supported (date-time is)", ErrSchemaFile, where, f.Str)
		}
		return &Type{Kind: String}, nil
	}
	if err := only(); err != nil {
		return nil, err
	}
	return &Type{Kind: map[string]Kind{"integer": Long, "number": Double, "boolean": Bool}[typ]}, nil
}

// typeKeyword reads type: one name, or a name and "null".
func typeKeyword(v Value, where string) (string, error) {
	var names []string
	switch v.Kind {
	case String:
		names = []string{v.Str}
	case Array:
		for _, e := range v.Elems {
			if e.Kind != String {
				return "", fmt.Errorf("%w: %s: type must be a name or an array of names", ErrSchemaFile, where)
			}
			if e.Str != "null" {
				names = append(names, e.Str)
			}
		}
	case Null:
		return "", fmt.Errorf("%w: %s: type is required", ErrSchemaFile, where)
	default:
		return "", fmt.Errorf("%w: %s: type must be a name or an array of names", ErrSchemaFile, where)
	}
	if len(names) != 1 {
		return "", fmt.Errorf("%w: %s: type %s: want one type (and optionally \"null\")", ErrSchemaFile, where, strings.Join(names, ", "))
	}
	switch names[0] {
	case "object", "array", "string", "integer", "number", "boolean":
		return names[0], nil
	}
	return "", fmt.Errorf("%w: %s: type %q is not supported", ErrSchemaFile, where, names[0])
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// Validate checks a decoded payload against a declared schema: the types
// of the declared members, required members present and not null, no
// undeclared members in a closed object. Undeclared members of an open
// object are ignored (they stay in value only).
func Validate(v Value, declared *Type) error {
	if v.Kind != Object {
		return notObject(v)
	}
	return validate(v, declared, "")
}

// ErrInvalid is a payload that does not satisfy the declared schema.
var ErrInvalid = errors.New("does not match the schema")

func validate(v Value, t *Type, path string) error {
	if v.Kind == Null {
		return nil
	}
	switch t.Kind {
	case Struct:
		if v.Kind != Object {
			return fmt.Errorf("%w: %s is %s, want an object", ErrInvalid, where(path), v.Kind)
		}
		for _, f := range t.Fields {
			if f.Required && empty0(member0(v, f.Name)) {
				return fmt.Errorf("%w: required %s is missing", ErrInvalid, join(path, f.Name))
			}
		}
		for _, m := range v.Members {
			f := t.Field(m.Name)
			if f == nil {
				if t.Closed {
					return fmt.Errorf("%w: %s is not declared (additionalProperties is false)", ErrInvalid, join(path, m.Name))
				}
				continue
			}
			if err := validate(m.Value, f.Type, join(path, m.Name)); err != nil {
				return err
			}
		}
		return nil
	case List:
		if v.Kind != Array {
			return fmt.Errorf("%w: %s is %s, want an array", ErrInvalid, where(path), v.Kind)
		}
		for _, e := range v.Elems {
			if err := validate(e, t.Elem, path+"[]"); err != nil {
				return err
			}
		}
		return nil
	}
	if !fits(t.Kind, v) {
		want := map[Kind]string{Long: "an integer", Double: "a number", Bool: "a boolean", String: "a string", Timestamp: "an RFC 3339 date-time string"}[t.Kind]
		return fmt.Errorf("%w: %s is %s, want %s", ErrInvalid, where(path), v.Kind, want)
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "the payload"
	}
	return path
}

func member0(obj Value, name string) (Value, bool) {
	for _, m := range obj.Members {
		if m.Name == name {
			return m.Value, true
		}
	}
	return Value{}, false
}

func empty0(v Value, ok bool) bool { return !ok || v.Kind == Null }

// Diff compares the typed columns a table has with a declared schema: the
// declared fields the table lacks (additions, allowed) and the changes
// Iceberg cannot make to the table's columns (refused): a column whose
// declared type differs (integer and number are long and double: neither
// becomes the other), or a column no longer declared.
func Diff(table, declared *Type) (adds []Addition, refused []string) {
	diff(table, declared, nil, &adds, &refused)
	sort.Strings(refused)
	return adds, refused
}

func diff(have, want *Type, path []string, adds *[]Addition, refused *[]string) {
	name := strings.Join(path, ".")
	if have.Kind != want.Kind {
		*refused = append(*refused, fmt.Sprintf("%s: the table's column is %s, the schema says %s (Iceberg cannot change it; add a new field instead)", name, have, want))
		return
	}
	switch have.Kind {
	case Struct:
		for _, f := range have.Fields {
			if want.Field(f.Name) == nil {
				*refused = append(*refused, fmt.Sprintf("%s: the table has this column, the schema no longer declares it (columns are never dropped: keep it, optional)", strings.Join(append(append([]string(nil), path...), f.Name), ".")))
			}
		}
		for _, f := range want.Fields {
			p := append(append([]string(nil), path...), f.Name)
			hf := have.Field(f.Name)
			if hf == nil {
				*adds = append(*adds, Addition{Path: p, Type: f.Type})
				continue
			}
			diff(hf.Type, f.Type, p, adds, refused)
		}
	case List:
		diff(have.Elem, want.Elem, append(append([]string(nil), path...), "element"), adds, refused)
	}
}
