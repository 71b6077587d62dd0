package typed

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Type is a column type: a primitive kind, a struct of named fields (in
// the order they were added) or a list of one element type.
type Type struct {
	Kind   Kind
	Fields []*Field // Struct
	Elem   *Type    // List
	// Closed (a declared Struct): members other than Fields are invalid.
	Closed bool
}

// Field is one named field of a struct type. New marks a field that a
// batch added and the table does not have yet (Additions lists them).
type Field struct {
	Name string
	Type *Type
	New  bool
	// Required (a declared field): a payload without it is invalid.
	Required bool
}

// Field returns t's field called name, or nil.
func (t *Type) Field(name string) *Field {
	for _, f := range t.Fields {
		if f.Name == name {
			return f
		}
	}
	return nil
}

func (t *Type) String() string {
	switch t.Kind {
	case Struct:
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			parts[i] = f.Name + ": " + f.Type.String()
		}
		return "struct<" + strings.Join(parts, ", ") + ">"
	case List:
		return "list<" + t.Elem.String() + ">"
	}
	return t.Kind.String()
}

// Errors of inference and of checking a value against columns: each is a
// reason a payload goes to the dead-letter table.
var (
	ErrNotObject      = errors.New("payload is not a JSON object")
	ErrConflict       = errors.New("type conflict")
	ErrTooManyColumns = errors.New("column limit reached")
)

// DefaultMaxColumns is the default cap on a table's typed fields (at every
// level of nesting): a device that invents field names cannot grow the
// schema without bound.
const DefaultMaxColumns = 512

// MaxNameBytes is the longest field name that becomes a column.
const MaxNameBytes = 128

// Options say how payloads become columns.
type Options struct {
	// Timestamps: a new string field whose first value is an RFC 3339
	// date-time becomes a timestamptz column.
	Timestamps bool
	// MaxColumns caps the typed fields of a table (DefaultMaxColumns if 0).
	MaxColumns int
	// Longs: a new number field whose first value is an integer literal
	// becomes a long column (widened to double while pending if a
	// fraction follows). Otherwise every new number field is a double,
	// since a serializer that drops ".0" must not make 21.5 a dead letter.
	Longs bool
	// Reserved are the top-level names that are not typed (the envelope's
	// columns): a payload member with such a name is left in value only.
	Reserved []string
}

// Usable reports whether a member name becomes a column: not empty, at
// most MaxNameBytes, without '.' (Iceberg's path separator), and at the
// top level not one of reserved. Other members stay in value only.
func Usable(name string, top bool, reserved []string) bool {
	if name == "" || len(name) > MaxNameBytes || strings.ContainsRune(name, '.') {
		return false
	}
	if top {
		for _, r := range reserved {
			if r == name {
				return false
			}
		}
	}
	return true
}

// Schema is the typed part of a table as one batch sees it: the columns
// the table had when the batch began and those the batch adds (New).
type Schema struct {
	Root    *Type // Struct
	opts    Options
	columns int
	widens  bool // the last dry run of extend found a pending field to widen
}

// NewSchema starts from root, the typed columns a table has (a Struct;
// nil for none). root is modified by Extend.
func NewSchema(root *Type, opts Options) *Schema {
	if root == nil {
		root = &Type{Kind: Struct}
	}
	if opts.MaxColumns <= 0 {
		opts.MaxColumns = DefaultMaxColumns
	}
	return &Schema{Root: root, opts: opts, columns: count(root)}
}

func count(t *Type) int {
	switch t.Kind {
	case Struct:
		n := 0
		for _, f := range t.Fields {
			n += 1 + count(f.Type)
		}
		return n
	case List:
		return count(t.Elem)
	}
	return 0
}

// Columns is the number of typed fields at every level.
func (s *Schema) Columns() int { return s.columns }

// Extend adds to s the fields of v, a decoded payload, that s lacks, as
// New fields (numbers as double unless Options.Longs); a New field seen as
// long and then as a fraction becomes double, one seen as timestamptz and then as another string becomes
// string. If v conflicts with a column (a string where a long is, an
// object where a list is, …) or would pass the column limit, s is left
// as it was and the error says why.
func (s *Schema) Extend(v Value) error {
	if v.Kind != Object {
		return notObject(v)
	}
	s.widens = false
	n, err := s.extend(s.Root, v, "", false)
	if err != nil {
		return err
	}
	if n == 0 && !s.widens {
		return nil // nothing to apply (the common case: every field known)
	}
	if n > 0 && s.columns+n > s.opts.MaxColumns {
		return fmt.Errorf("%w: %d typed columns, this payload would add %d (max %d)", ErrTooManyColumns, s.columns, n, s.opts.MaxColumns)
	}
	if _, err := s.extend(s.Root, v, "", true); err != nil {
		return err // not reached: the dry run found none
	}
	s.columns += n
	return nil
}

func notObject(v Value) error {
	return fmt.Errorf("%w: a JSON %s", ErrNotObject, v.Kind)
}

// extend walks v (an Object) against t (a Struct); with apply false it
// only checks and counts the fields it would add.
func (s *Schema) extend(t *Type, v Value, path string, apply bool) (int, error) {
	added := 0
	for _, m := range v.Members {
		if !Usable(m.Name, path == "", s.opts.Reserved) {
			continue
		}
		p := join(path, m.Name)
		f := t.Field(m.Name)
		if f == nil {
			nt, err := s.typeOf(m.Value, p)
			if err != nil {
				return 0, err
			}
			if nt == nil {
				continue // null or empty: nothing to type yet
			}
			added += 1 + count(nt)
			if apply {
				t.Fields = append(t.Fields, &Field{Name: m.Name, Type: nt, New: true})
			}
			continue
		}
		n, err := s.merge(f, m.Value, p, apply)
		if err != nil {
			return 0, err
		}
		added += n
	}
	return added, nil
}

// merge fits value v into the existing field f.
func (s *Schema) merge(f *Field, v Value, path string, apply bool) (int, error) {
	n, widened, err := s.mergeType(f.Type, v, path, f.New, apply)
	if err != nil {
		return 0, err
	}
	if widened != nil {
		s.widens = true
		if apply {
			f.Type = widened
		}
	}
	return n, nil
}

// mergeType fits v into t. A pending (New) primitive may be widened: the
// widened type is returned.
func (s *Schema) mergeType(t *Type, v Value, path string, pending, apply bool) (int, *Type, error) {
	if v.Kind == Null {
		return 0, nil, nil
	}
	switch t.Kind {
	case Struct:
		if v.Kind != Object {
			return 0, nil, conflict(path, t, v)
		}
		n, err := s.extend(t, v, path, apply)
		return n, nil, err
	case List:
		if v.Kind != Array {
			return 0, nil, conflict(path, t, v)
		}
		added := 0
		for _, e := range v.Elems {
			n, w, err := s.mergeType(t.Elem, e, path+"[]", pending, apply)
			if err != nil {
				return 0, nil, err
			}
			if w != nil {
				s.widens = true
				if apply {
					t.Elem = w
				}
			}
			added += n
		}
		return added, nil, nil
	}
	if fits(t.Kind, v) {
		return 0, nil, nil
	}
	if pending {
		if vt := s.primitive(v); vt != nil {
			if w := widen(t.Kind, vt.Kind); w != 0 {
				return 0, &Type{Kind: w}, nil
			}
		}
	}
	return 0, nil, conflict(path, t, v)
}

// widen is the kind a pending column of kind have becomes when a value of
// kind got arrives, or 0.
func widen(have, got Kind) Kind {
	switch {
	case have == Long && got == Double:
		return Double
	case have == Timestamp && got == String:
		return String
	}
	return 0
}

// fits reports whether a primitive value can be stored in a column of kind k.
func fits(k Kind, v Value) bool {
	switch k {
	case Bool:
		return v.Kind == Bool
	case Long:
		return v.Kind == Long || v.Kind == Double && whole(v.Double)
	case Double:
		return v.Kind == Long || v.Kind == Double
	case String:
		return v.Kind == String
	case Timestamp:
		_, ok := ParseTime(v)
		return ok
	}
	return false
}

// whole reports a double that a long column stores exactly (22.0, not 21.5).
func whole(f float64) bool {
	return f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64
}

func conflict(path string, t *Type, v Value) error {
	if t.Kind == Long && v.Kind == Double {
		return fmt.Errorf("%w: field %s is a long column (the table's type, which it keeps) and %s is not a whole number",
			ErrConflict, path, strconv.FormatFloat(v.Double, 'g', -1, 64))
	}
	got := v.Kind.String()
	if v.Kind == String && t.Kind == Timestamp {
		got = "a string that is not an RFC 3339 date-time"
	}
	return fmt.Errorf("%w: field %s is %s, payload has %s", ErrConflict, path, t, got)
}

// primitive is the type a new primitive value gets, or nil.
func (s *Schema) primitive(v Value) *Type {
	switch v.Kind {
	case Long:
		if s.opts.Longs {
			return &Type{Kind: Long}
		}
		return &Type{Kind: Double}
	case Bool, Double:
		return &Type{Kind: v.Kind}
	case String:
		if s.opts.Timestamps {
			if _, ok := ParseTime(v); ok {
				return &Type{Kind: Timestamp}
			}
		}
		return &Type{Kind: String}
	}
	return nil
}

// typeOf infers the type of a value not yet typed, or nil if it has none
// yet (null, an empty array, an object of such).
func (s *Schema) typeOf(v Value, path string) (*Type, error) {
	switch v.Kind {
	case Object:
		t := &Type{Kind: Struct}
		for _, m := range v.Members {
			if !Usable(m.Name, false, nil) {
				continue
			}
			ft, err := s.typeOf(m.Value, join(path, m.Name))
			if err != nil {
				return nil, err
			}
			if ft != nil {
				t.Fields = append(t.Fields, &Field{Name: m.Name, Type: ft, New: true})
			}
		}
		if len(t.Fields) == 0 {
			return nil, nil
		}
		return t, nil
	case Array:
		var elem *Type
		for _, e := range v.Elems {
			if elem == nil {
				et, err := s.typeOf(e, path+"[]")
				if err != nil {
					return nil, err
				}
				elem = et
				continue
			}
			_, w, err := s.mergeType(elem, e, path+"[]", true, true)
			if err != nil {
				return nil, err
			}
			if w != nil {
				elem = w
			}
		}
		if elem == nil {
			return nil, nil
		}
		return &Type{Kind: List, Elem: elem}, nil
	}
	return s.primitive(v), nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Check reports whether v, a decoded payload, fits the columns of root
// (a Struct) exactly: every usable member has a column and its value fits
// it. Members without a column are an error when strict (infer: after
// Extend every member has one unless the limit was reached), ignored
// otherwise (schema: undeclared members stay in value only).
func Check(v Value, root *Type, reserved []string, strict bool) error {
	if v.Kind != Object {
		return notObject(v)
	}
	return check(v, root, "", reserved, strict)
}

func check(v Value, t *Type, path string, reserved []string, strict bool) error {
	for _, m := range v.Members {
		if !Usable(m.Name, path == "", reserved) {
			continue
		}
		p := join(path, m.Name)
		f := t.Field(m.Name)
		if f == nil {
			if strict && !empty(m.Value) {
				return fmt.Errorf("%w: field %s has no column", ErrTooManyColumns, p)
			}
			continue
		}
		if err := checkType(m.Value, f.Type, p, reserved, strict); err != nil {
			return err
		}
	}
	return nil
}

// empty reports a value that adds no column (null, [], {} of such).
func empty(v Value) bool {
	switch v.Kind {
	case Null:
		return true
	case Array:
		for _, e := range v.Elems {
			if !empty(e) {
				return false
			}
		}
		return true
	case Object:
		for _, m := range v.Members {
			if Usable(m.Name, false, nil) && !empty(m.Value) {
				return false
			}
		}
		return true
	}
	return false
}

func checkType(v Value, t *Type, path string, reserved []string, strict bool) error {
	if v.Kind == Null {
		return nil
	}
	switch t.Kind {
	case Struct:
		if v.Kind != Object {
			return conflict(path, t, v)
		}
		return check(v, t, path, reserved, strict)
	case List:
		if v.Kind != Array {
			return conflict(path, t, v)
		}
		for _, e := range v.Elems {
			if err := checkType(e, t.Elem, path+"[]", reserved, strict); err != nil {
				return err
			}
		}
		return nil
	}
	if !fits(t.Kind, v) {
		return conflict(path, t, v)
	}
	return nil
}

// ParseTime returns the microseconds since the epoch of an RFC 3339
// date-time string value (fractions beyond microseconds are truncated).
func ParseTime(v Value) (int64, bool) {
	if v.Kind != String || len(v.Str) < 20 || len(v.Str) > 40 || v.Str[4] != '-' {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, v.Str)
	if err != nil {
		return 0, false
	}
	return t.UnixMicro(), true
}

// Additions are the fields a batch added to the table's columns.
type Addition struct {
	// Path to the new field: struct field names, with "element" for the
	// element of a list (Iceberg's naming).
	Path []string
	Type *Type
}

// Additions lists s's New fields, outermost first (a new struct field's
// own fields come with it, not separately).
func (s *Schema) Additions() []Addition {
	var out []Addition
	var walk func(t *Type, path []string)
	walk = func(t *Type, path []string) {
		switch t.Kind {
		case Struct:
			for _, f := range t.Fields {
				p := append(append([]string(nil), path...), f.Name)
				if f.New {
					out = append(out, Addition{Path: p, Type: f.Type})
					continue
				}
				walk(f.Type, p)
			}
		case List:
			walk(t.Elem, append(append([]string(nil), path...), "element"))
		}
	}
	walk(s.Root, nil)
	return out
}

// Parse decodes a payload that must be a JSON object.
func Parse(payload []byte) (Value, error) {
	v, err := Decode(payload)
	if err != nil {
		return Value{}, err
	}
	if v.Kind != Object {
		return Value{}, notObject(v)
	}
	return v, nil
}
