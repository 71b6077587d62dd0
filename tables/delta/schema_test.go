package delta

import (
	"testing"

	"github.com/apache/iceberg-go"
)

func TestFromIceberg(t *testing.T) {
	sch := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "offset", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "timestamp", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 3, Name: "headers", Type: &iceberg.ListType{ElementID: 4, ElementRequired: true, Element: &iceberg.StructType{FieldList: []iceberg.NestedField{
			{ID: 5, Name: "key", Type: iceberg.PrimitiveTypes.String, Required: true},
			{ID: 6, Name: "value", Type: iceberg.PrimitiveTypes.Binary},
		}}}},
		iceberg.NestedField{ID: 7, Name: "tags", Type: &iceberg.MapType{KeyID: 8, KeyType: iceberg.PrimitiveTypes.String, ValueID: 9, ValueType: iceberg.PrimitiveTypes.Float64}},
		iceberg.NestedField{ID: 10, Name: "amount", Type: iceberg.DecimalTypeOf(10, 2)},
		iceberg.NestedField{ID: 11, Name: "n", Type: iceberg.PrimitiveTypes.Int32},
	)
	st, err := FromIceberg(sch)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"struct","fields":[{"name":"offset","type":"long","nullable":false,"metadata":{}},` +
		`{"name":"timestamp","type":"timestamp","nullable":false,"metadata":{}},` +
		`{"name":"headers","type":{"type":"array","elementType":{"type":"struct","fields":[{"name":"key","type":"string","nullable":false,"metadata":{}},{"name":"value","type":"binary","nullable":true,"metadata":{}}]},"containsNull":false},"nullable":true,"metadata":{}},` +
		`{"name":"tags","type":{"type":"map","keyType":"string","valueType":"double","valueContainsNull":true},"nullable":true,"metadata":{}},` +
		`{"name":"amount","type":"decimal(10,2)","nullable":true,"metadata":{}},` +
		`{"name":"n","type":"integer","nullable":true,"metadata":{}}]}`
	if st.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", st, want)
	}
	// It parses back as itself, and covers its own prefix.
	m := Metadata{SchemaString: st.String()}
	back, err := m.Schema()
	if err != nil || back.String() != want {
		t.Fatalf("round trip: %v", err)
	}
	prefix := &StructType{Type: "struct", Fields: st.Fields[:3]}
	if err := st.Covers(prefix); err != nil {
		t.Fatal(err)
	}
	if err := prefix.Covers(st); err == nil {
		t.Fatal("a prefix covers the whole")
	}
}
