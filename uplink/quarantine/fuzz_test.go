package quarantine

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tributary-io/tributary"
)

// FuzzDecodeQuarantine: whatever a quarantine file holds (it may be cut
// short by a crash, or edited by hand), reading it returns records or an
// error, never panics, and what it returns encodes back to a file that
// reads the same.
func FuzzDecodeQuarantine(f *testing.F) {
	good, _ := json.Marshal(&tributary.Record{Stream: "a.b", Partition: 1, Offset: 7, Value: []byte("v"),
		Headers: []tributary.Header{{Key: "k", Value: []byte{0, 1}}}, Source: "kafka"})
	f.Add(append(append(good, '\n'), good...))
	withPrincipal, _ := json.Marshal(&tributary.Record{Stream: "a.b", Offset: 8, Value: []byte("w"), Source: "mqtt", Principal: "CN=dev"})
	f.Add(withPrincipal)
	old, err := os.ReadFile(filepath.Join("testdata", "v1.quarantine.jsonl")) // written before Record.Principal existed
	if err != nil {
		f.Fatal(err)
	}
	f.Add(old)
	f.Add([]byte(`{"Stream":"a.b","Offset":1,"Value":"not base64!"}`))
	f.Add([]byte(`{"Stream":"a.b"`))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := Decode(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out []byte
		for _, r := range recs {
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(append(out, line...), '\n')
		}
		again, err := Decode(bytes.NewReader(out))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-read: %d records, %v; want %d", len(again), err, len(recs))
		}
	})
}
