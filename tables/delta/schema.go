package delta

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
)

// The Delta schema (PROTOCOL.md "Schema Serialization Format"): a struct
// of fields whose types are primitive names ("long", "decimal(10,2)") or
// nested struct, array and map objects.

// StructType is a struct type; a table's schema is one.
type StructType struct {
	Type   string        `json:"type"` // "struct"
	Fields []StructField `json:"fields"`
}

// StructField is one field of a struct.
type StructField struct {
	Name     string         `json:"name"`
	Type     DataType       `json:"type"`
	Nullable bool           `json:"nullable"`
	Metadata map[string]any `json:"metadata"`
}

// ArrayType is an array type.
type ArrayType struct {
	Type         string   `json:"type"` // "array"
	ElementType  DataType `json:"elementType"`
	ContainsNull bool     `json:"containsNull"`
}

// MapType is a map type.
type MapType struct {
	Type              string   `json:"type"` // "map"
	KeyType           DataType `json:"keyType"`
	ValueType         DataType `json:"valueType"`
	ValueContainsNull bool     `json:"valueContainsNull"`
}

// DataType is a field's type: exactly one member is set.
type DataType struct {
	Primitive string
	Struct    *StructType
	Array     *ArrayType
	Map       *MapType
}

// maxTypeDepth caps the nesting a schema may have.
const maxTypeDepth = 64

// MarshalJSON writes a primitive as its name, a nested type as its object.
func (t DataType) MarshalJSON() ([]byte, error) {
	switch {
	case t.Struct != nil:
		return json.Marshal(t.Struct)
	case t.Array != nil:
		return json.Marshal(t.Array)
	case t.Map != nil:
		return json.Marshal(t.Map)
	}
	return json.Marshal(t.Primitive)
}

// UnmarshalJSON reads either form.
func (t *DataType) UnmarshalJSON(b []byte) error {
	*t = DataType{}
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &t.Primitive)
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	switch head.Type {
	case "struct":
		t.Struct = &StructType{}
		return json.Unmarshal(b, t.Struct)
	case "array":
		t.Array = &ArrayType{}
		return json.Unmarshal(b, t.Array)
	case "map":
		t.Map = &MapType{}
		return json.Unmarshal(b, t.Map)
	}
	return fmt.Errorf("unknown nested type %q", head.Type)
}

// String renders the type compactly, for messages.
func (t DataType) String() string {
	b, _ := t.MarshalJSON()
	return string(b)
}

// Equal reports whether two types are the same (nullability included).
func (t DataType) Equal(u DataType) bool { return t.String() == u.String() }

// Field returns the named field.
func (s *StructType) Field(name string) (StructField, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return StructField{}, false
}

// Covers reports whether s holds every field of old with the same type:
// s is old or old with columns added (Tributary only ever adds columns).
// The error names the first field that differs.
func (s *StructType) Covers(old *StructType) error {
	for _, of := range old.Fields {
		nf, ok := s.Field(of.Name)
		if !ok {
			return fmt.Errorf("column %q of the Delta schema is not in the table's schema", of.Name)
		}
		if !sameShape(nf.Type, of.Type) {
			return fmt.Errorf("column %q is %s in the Delta schema and %s in the table's", of.Name, of.Type, nf.Type)
		}
	}
	return nil
}

// sameShape compares types, recursing into structs with Covers so that a
// nested struct may gain fields too.
func sameShape(a, b DataType) bool {
	switch {
	case a.Struct != nil && b.Struct != nil:
		return a.Struct.Covers(b.Struct) == nil
	case a.Array != nil && b.Array != nil:
		return sameShape(a.Array.ElementType, b.Array.ElementType)
	case a.Map != nil && b.Map != nil:
		return sameShape(a.Map.KeyType, b.Map.KeyType) && sameShape(a.Map.ValueType, b.Map.ValueType)
	}
	return a.Primitive != "" && a.Primitive == b.Primitive
}

// String renders the schema as schemaString.
func (s *StructType) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// check rejects a type nested deeper than maxTypeDepth or with an empty
// member.
func checkType(t DataType, depth int) error {
	if depth > maxTypeDepth {
		return fmt.Errorf("%w: schema nested deeper than %d", ErrCorrupt, maxTypeDepth)
	}
	switch {
	case t.Struct != nil:
		for _, f := range t.Struct.Fields {
			if err := checkType(f.Type, depth+1); err != nil {
				return err
			}
		}
	case t.Array != nil:
		return checkType(t.Array.ElementType, depth+1)
	case t.Map != nil:
		if err := checkType(t.Map.KeyType, depth+1); err != nil {
			return err
		}
		return checkType(t.Map.ValueType, depth+1)
	case t.Primitive == "":
		return fmt.Errorf("%w: a field without a type", ErrCorrupt)
	}
	return nil
}

// FromIceberg translates an Iceberg schema into the Delta schema of the
// same columns, by name (Delta without column mapping matches Parquet
// columns by name, which is how Tributary's files are written):
//
//	boolean, int → integer, long, float, double, decimal(P,S), date,
//	string, binary; fixed and uuid → binary; time → long (microseconds
//	of the day: Delta has no time type); timestamp and timestamptz →
//	timestamp (Delta's timestamp is UTC-adjusted microseconds; the
//	timestamp_ntz type would need reader version 3, and Tributary's
//	timestamp columns are all UTC); struct, list → array, map.
func FromIceberg(sch *iceberg.Schema) (*StructType, error) {
	st := &StructType{Type: "struct"}
	for _, f := range sch.Fields() {
		sf, err := fieldOf(f)
		if err != nil {
			return nil, err
		}
		st.Fields = append(st.Fields, sf)
	}
	return st, nil
}

func fieldOf(f iceberg.NestedField) (StructField, error) {
	t, err := typeOf(f.Type)
	if err != nil {
		return StructField{}, fmt.Errorf("column %s: %w", f.Name, err)
	}
	return StructField{Name: f.Name, Type: t, Nullable: !f.Required, Metadata: map[string]any{}}, nil
}

func typeOf(t iceberg.Type) (DataType, error) {
	switch t := t.(type) {
	case *iceberg.StructType:
		st := &StructType{Type: "struct"}
		for _, f := range t.FieldList {
			sf, err := fieldOf(f)
			if err != nil {
				return DataType{}, err
			}
			st.Fields = append(st.Fields, sf)
		}
		return DataType{Struct: st}, nil
	case *iceberg.ListType:
		e, err := typeOf(t.Element)
		if err != nil {
			return DataType{}, err
		}
		return DataType{Array: &ArrayType{Type: "array", ElementType: e, ContainsNull: !t.ElementRequired}}, nil
	case *iceberg.MapType:
		k, err := typeOf(t.KeyType)
		if err != nil {
			return DataType{}, err
		}
		v, err := typeOf(t.ValueType)
		if err != nil {
			return DataType{}, err
		}
		return DataType{Map: &MapType{Type: "map", KeyType: k, ValueType: v, ValueContainsNull: !t.ValueRequired}}, nil
	case iceberg.DecimalType:
		return DataType{Primitive: fmt.Sprintf("decimal(%d,%d)", t.Precision(), t.Scale())}, nil
	case iceberg.FixedType:
		return DataType{Primitive: "binary"}, nil
	}
	switch t.String() {
	case "boolean":
		return DataType{Primitive: "boolean"}, nil
	case "int":
		return DataType{Primitive: "integer"}, nil
	case "long", "time":
		return DataType{Primitive: "long"}, nil
	case "float", "double", "date", "string", "binary":
		return DataType{Primitive: t.String()}, nil
	case "uuid":
		return DataType{Primitive: "binary"}, nil
	case "timestamp", "timestamptz":
		return DataType{Primitive: "timestamp"}, nil
	}
	if strings.HasPrefix(t.String(), "timestamp") {
		return DataType{Primitive: "timestamp"}, nil
	}
	return DataType{}, fmt.Errorf("no Delta type for Iceberg %s", t)
}
