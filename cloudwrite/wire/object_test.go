package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/tributary-io/tributary"
)

func testSegment(stream string, p int32, pid int64, seq int32, n int) *Segment {
	s := &Segment{Stream: stream, Partition: p, ProducerID: pid, ProducerEpoch: 0, BaseSequence: seq,
		Topic: stream, Source: "kafka", ClientID: "c1", Principal: "alice", Node: "s1"}
	for i := 0; i < n; i++ {
		r := &tributary.Record{Timestamp: int64(1000 + i), Value: []byte{byte('a' + i%26)}, ProducerTimestamp: int64(i)}
		if i%2 == 0 {
			r.Key = []byte("k")
			r.Headers = []tributary.Header{{Key: "h", Value: []byte("v")}}
		}
		s.Records = append(s.Records, r)
	}
	return s
}

func TestObjectRoundTrip(t *testing.T) {
	segs := []*Segment{testSegment("a.b", 3, 7, 0, 5), testSegment("a.c", 0, -1, 0, 1), testSegment("a.b", 3, 7, 5, 0)}
	b, refs := EncodeObject(nil, "s1", 42, segs)
	h, got, grefs, err := DecodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Server != "s1" || h.Created != 42 || h.Segments != 3 || !reflect.DeepEqual(refs, grefs) {
		t.Fatalf("header %+v refs %v want %v", h, grefs, refs)
	}
	for i, s := range got {
		one, err := DecodeSegment(b[refs[i].Pos : refs[i].Pos+refs[i].Len])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one, s) {
			t.Fatalf("segment %d alone differs", i)
		}
		if s.Stream != segs[i].Stream || len(s.Records) != len(segs[i].Records) {
			t.Fatalf("segment %d: %+v", i, s)
		}
		for j, r := range s.Records {
			w := segs[i].Records[j]
			if !bytes.Equal(r.Value, w.Value) || (r.Key == nil) != (w.Key == nil) || r.Timestamp != w.Timestamp ||
				!reflect.DeepEqual(r.Headers, w.Headers) || r.ProducerTimestamp != w.ProducerTimestamp {
				t.Fatalf("segment %d record %d: %+v want %+v", i, j, r, w)
			}
			if s.ProducerID >= 0 && r.Sequence != s.BaseSequence+int32(j) {
				t.Fatalf("sequence %d", r.Sequence)
			}
		}
	}
	// Every flipped byte is caught by a checksum or a length.
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x5a
		if _, _, _, err := DecodeObject(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: err %v", i, err)
		}
	}
	if _, _, _, err := DecodeObject(b[:len(b)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
}

// FuzzDecodeObject: no input panics or allocates beyond its size, and
// what decodes encodes back to the same bytes.
func FuzzDecodeObject(f *testing.F) {
	b, _ := EncodeObject(nil, "s1", 42, []*Segment{testSegment("a.b", 3, 7, 0, 3), testSegment("a.c", 0, -1, 0, 1)})
	f.Add(b)
	f.Add([]byte("TRBW\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, segs, _, err := DecodeObject(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, _ := EncodeObject(nil, h.Server, h.Created, segs)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// FuzzDecodeSegment: a segment read alone at a (possibly wrong) range.
func FuzzDecodeSegment(f *testing.F) {
	b, refs := EncodeObject(nil, "s1", 42, []*Segment{testSegment("a.b", 3, 7, 0, 3)})
	f.Add(b[refs[0].Pos:])
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodeSegment(b); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not ErrCorrupt: %v", err)
		}
	})
}
