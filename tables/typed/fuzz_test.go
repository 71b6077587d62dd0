package typed

import (
	"encoding/json"
	"testing"
)

// FuzzDecode: Decode and ParseJSONSchema never panic; Decode accepts only what encoding/json
// accepts, and what it accepts Extend and Check take without panicking;
// after Extend a payload always passes Check (the schema now has its
// columns).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"device":"device7","line":"line3","seq":123,"ts":"2025-01-02T03:04:05.123456789Z","temp_c":21.53,"humidity":40.1,"vibration_mm_s":1.21,"status":"ok"}`,
		`{"a":[{"b":[1,2.5]},{"c":null}],"d":{"e":{"f":"\u00e9"}}}`,
		`[1,2]`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `{"a":1e400}`, `{"a":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if root, err := ParseJSONSchema(b); err == nil {
			_, _ = Diff(root, root)
		}
		v, err := Decode(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("Decode accepted what encoding/json refuses: %q", b)
		}
		s := NewSchema(nil, Options{Timestamps: true, MaxColumns: 64})
		if err := s.Extend(v); err != nil {
			return
		}
		if err := Check(v, s.Root, nil, true); err != nil {
			t.Fatalf("after Extend, Check(%q) = %v (schema %s)", b, err, s.Root)
		}
		_ = s.Additions()
	})
}
