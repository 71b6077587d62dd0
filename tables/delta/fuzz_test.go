package delta

import (
	"errors"
	"testing"
)

// FuzzDecodeCommit: any bytes a log entry may hold decode to actions or a
// clear error (ErrCorrupt, ErrUnsupported), never a panic; what decodes
// re-encodes to something that decodes to the same actions.
func FuzzDecodeCommit(f *testing.F) {
	f.Add([]byte(`{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}` + "\n" + `{"txn":{"appId":"a/0","version":5}}`))
	f.Add([]byte(`{"add":{"path":"a%20b.parquet","partitionValues":{"x":null},"size":3,"modificationTime":1,"dataChange":true,"stats":"{}"}}`))
	f.Add([]byte(`{"remove":{"path":"a","deletionTimestamp":1,"dataChange":true}}` + "\n\n" + `{"commitInfo":{"x":[1,2]}}`))
	f.Add([]byte(`{"metaData":{"id":"i","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"m\",\"type\":{\"type\":\"map\",\"keyType\":\"string\",\"valueType\":{\"type\":\"array\",\"elementType\":\"long\",\"containsNull\":true},\"valueContainsNull\":true},\"nullable\":true,\"metadata\":{}}]}","partitionColumns":[],"configuration":{}}}`))
	f.Add([]byte(`{"sidecar":{"path":"x"}}`))
	f.Add([]byte(`{"add":null}`))
	f.Add([]byte(`{"cdc":{}}` + "\n" + `{"add":{"path":"","size":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		acts, err := DecodeCommit(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupported", err)
			}
			return
		}
		s := newSnapshot()
		for i := range acts {
			if err := s.apply(&acts[i]); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("apply: %v", err)
			}
		}
		var kept []Action
		for _, a := range acts {
			if a.Other == "" {
				kept = append(kept, a)
			}
		}
		enc, err := EncodeCommit(kept)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeCommit(enc)
		if err != nil || len(again) != len(kept) {
			t.Fatalf("re-decode of %q: %d actions, %v", enc, len(again), err)
		}
	})
}
