package httpapi

import (
	"bytes"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/httpapi/wire"
)

// TestAppendRecord: the hand-written encoding is wire.Marshal's, byte for
// byte, in every format.
func TestAppendRecord(t *testing.T) {
	for _, r := range []*tributary.Record{
		{Partition: 3, Offset: 42, Timestamp: 1700000000123456, Key: []byte("k"), Value: []byte{0, 1, 0xff}, Topic: "a.b", Source: "http",
			Headers: []tributary.Header{{Key: "h", Value: []byte("v")}, {Key: "é\"\n", Value: nil}}},
		{Value: nil},
		{Key: []byte{}, Value: []byte(`{"a":"<&>"}`), Topic: "t\u2028", Source: "kafka"},
	} {
		for _, f := range []string{wire.FormatBinary, wire.FormatString, wire.FormatJSON} {
			got := appendRecord(nil, "ns.str", r, f)
			want := wire.Marshal(render("ns.str", r, f))
			if !bytes.Equal(got, want) {
				t.Errorf("%s:\n got %s\nwant %s", f, got, want)
			}
		}
	}
}
