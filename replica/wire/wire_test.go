package wire

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tributary-io/tributary"
)

func sampleAppend() *Append {
	m := &Append{Stream: "factory.telemetry", Partition: 3, Epoch: 2, Base: 10}
	for i := int64(0); i < 3; i++ {
		m.Records = append(m.Records, &tributary.Record{Stream: m.Stream, Partition: 3, Offset: 10 + i, Epoch: 2, Timestamp: 1700000000000000 + i,
			Topic: "factory/line1", Value: []byte{byte(i), 'x'}, Source: "mqtt", ClientID: "dev-1", Node: "n1",
			Headers: []tributary.Header{{Key: "k", Value: []byte("v")}}})
	}
	// An authenticated sender's record (wal's record format version 2)
	// next to anonymous ones (version 1).
	m.Records[1].Principal = "sensor-7"
	return m
}

// sampleChunks is a version 2 Append: two chunk values (opaque here).
func sampleChunks() *Append {
	return &Append{Stream: "factory.telemetry", Partition: 3, Epoch: 2, Base: 10, Incarnation: 1764600000000, From: 12,
		Chunks: [][]byte{{1, 0, 0, 0, 0, 0, 0, 0, 10, 1, 1, 'x', 0, 0, 0, 0}, {1, 2, 3}}}
}

func TestAppendRoundTrip(t *testing.T) {
	for _, m := range []*Append{sampleAppend(), {Stream: "a.b", Partition: 0, Epoch: 0, Base: 7, Records: []*tributary.Record{}},
		sampleChunks(), {Stream: "a.b", Base: 3, Incarnation: 1, Chunks: [][]byte{}}} {
		got, err := DecodeAppend(m.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, m)
		}
	}
	rep := Reply{Status: StatusFenced, Next: 42, Epoch: 3}
	if got, err := DecodeReply(rep.Encode()); err != nil || got != rep {
		t.Fatalf("reply round trip: %+v, %v", got, err)
	}
	q := Query{Origin: "n1", Stream: "a.b", Partition: 3}
	if got, err := DecodeQuery(q.Encode()); err != nil || got != q {
		t.Fatalf("query round trip: %+v, %v", got, err)
	}
	rel := Release{Stream: "a.b", Partition: 9, UpTo: 1 << 40}
	if got, err := DecodeRelease(rel.Encode()); err != nil || got != rel {
		t.Fatalf("release round trip: %+v, %v", got, err)
	}
}

func TestAppendRefused(t *testing.T) {
	good := sampleAppend()
	wrongPart := sampleAppend()
	wrongPart.Records[1].Partition = 4
	gap := sampleAppend()
	gap.Records[2].Offset = 20
	cases := map[string][]byte{
		"empty":           nil,
		"version":         append([]byte{2}, good.Encode()[1:]...),
		"truncated":       good.Encode()[:len(good.Encode())-3],
		"trailing":        append(good.Encode(), 0),
		"other partition": wrongPart.Encode(),
		"offset gap":      gap.Encode(),
		"empty stream":    (&Append{Stream: ""}).Encode(),
		"count bomb":      {wireV1, 1, 'a', 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"negative base":   {wireV1, 1, 'a', 0, 0, 1, 0},
	}
	v2 := sampleChunks().Encode()
	for name, b := range map[string][]byte{
		"v2 truncated":         v2[:len(v2)-1],
		"v2 trailing":          append(v2, 0),
		"v2 zero incarnation":  (&Append{Stream: "a.b", Chunks: [][]byte{}}).Encode(),
		"v2 negative from":     (&Append{Stream: "a.b", Incarnation: 1, From: -1, Chunks: [][]byte{}}).Encode(),
		"v2 empty chunk":       (&Append{Stream: "a.b", Incarnation: 1, Chunks: [][]byte{{}}}).Encode(),
		"v2 empty stream":      (&Append{Incarnation: 1, Chunks: [][]byte{{1}}}).Encode(),
		"v2 chunk count bomb":  {wireV2, 1, 'a', 0, 0, 0, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"v2 chunk length bomb": {wireV2, 1, 'a', 0, 0, 0, 2, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"version 3":            append([]byte{3}, v2[1:]...),
	} {
		cases[name] = b
	}
	for name, b := range cases {
		if _, err := DecodeAppend(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeReply([]byte{wireV1, 9, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad status: %v", err)
	}
}

func FuzzDecodeAppend(f *testing.F) {
	f.Add(sampleAppend().Encode())
	f.Add((&Append{Stream: "a.b", Base: 1, Records: []*tributary.Record{}}).Encode())
	f.Add(sampleChunks().Encode())
	f.Add((&Append{Stream: "a.b", Base: 1, Incarnation: 2, Chunks: [][]byte{}}).Encode())
	f.Add([]byte{wireV1, 1, 'a', 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeAppend(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		m2, err := DecodeAppend(m.Encode())
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip\n got %+v\nwant %+v", m2, m)
		}
	})
}

// FuzzDecodeReply covers the small messages: append replies, releases and
// queries.
func FuzzDecodeReply(f *testing.F) {
	f.Add(Reply{Status: StatusGap, Next: 5}.Encode())
	f.Add(Reply{Status: StatusStale, Next: 5}.Encode())
	f.Add(Release{Stream: "a.b", Partition: 1, UpTo: 9}.Encode())
	f.Add(Query{Origin: "n2", Stream: "a.b", Partition: 1}.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := DecodeReply(data); err == nil {
			if r2, err := DecodeReply(r.Encode()); err != nil || r2 != r {
				t.Fatalf("reply round trip %+v -> %+v, %v", r, r2, err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
		if q, err := DecodeQuery(data); err == nil {
			if q2, err := DecodeQuery(q.Encode()); err != nil || q2 != q {
				t.Fatalf("query round trip %+v -> %+v, %v", q, q2, err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
		if m, err := DecodeRelease(data); err == nil {
			if m2, err := DecodeRelease(m.Encode()); err != nil || m2 != m {
				t.Fatalf("release round trip %+v -> %+v, %v", m, m2, err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
	})
}
