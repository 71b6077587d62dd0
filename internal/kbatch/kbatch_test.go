package kbatch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tributary-io/tributary"
)

// TestVarintMatchesBinary: the reader's varint (with its one- and
// two-byte fast paths) decodes every one- and two-byte input, and random
// longer ones, as binary.Varint does, consuming the same bytes and
// failing on the same inputs.
func TestVarintMatchesBinary(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		want, n := binary.Varint(b)
		r := reader{b: b}
		got := r.varint()
		switch {
		case n <= 0 && !r.bad:
			t.Fatalf("% x: decoded %d, binary.Varint fails", b, got)
		case n > 0 && (r.bad || got != want || len(r.b) != len(b)-n):
			t.Fatalf("% x: %d with %d bytes left, want %d with %d", b, got, len(r.b), want, len(b)-n)
		}
	}
	check(nil)
	for a := range 256 {
		check([]byte{byte(a)})
		for b := range 256 {
			check([]byte{byte(a), byte(b)})
			check([]byte{byte(a), byte(b), 0x05})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		b := binary.AppendVarint(nil, int64(rng.Uint64()>>rng.IntN(64)))
		check(b)
		check(b[:len(b)-1])
	}
}

// FuzzParseRecordInPlace: on any bytes, ParseRecordInPlace (the uplink's
// in-place walk of stored batches) and ParseRecord agree: the same
// errors, sizes and fields, header keys and values included; nil and
// empty kept apart; the headers appended after those already in hs, which
// stay untouched.
func FuzzParseRecordInPlace(f *testing.F) {
	rec := func(key, value []byte, hs ...[2][]byte) []byte {
		var body []byte
		body = append(body, 0)
		body = binary.AppendVarint(body, 5) // timestamp delta
		body = binary.AppendVarint(body, 0) // offset delta
		for _, b := range [][]byte{key, value} {
			if b == nil {
				body = binary.AppendVarint(body, -1)
			} else {
				body = append(binary.AppendVarint(body, int64(len(b))), b...)
			}
		}
		body = binary.AppendVarint(body, int64(len(hs)))
		for _, h := range hs {
			for _, b := range h {
				if b == nil {
					body = binary.AppendVarint(body, -1)
				} else {
					body = append(binary.AppendVarint(body, int64(len(b))), b...)
				}
			}
		}
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	f.Add(rec(nil, []byte("v")))
	f.Add(rec([]byte{}, []byte{}, [2][]byte{[]byte("h"), nil}, [2][]byte{{}, {}}))
	f.Add(rec([]byte("key"), nil, [2][]byte{[]byte("a"), []byte("b")}))
	f.Add(rec(nil, nil, [2][]byte{nil, []byte("null key")}))
	f.Add([]byte{0x0c, 0, 0, 0, 1, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got Record
		n1, err1 := ParseRecord(data, &want, 0, math.MaxInt32)
		prior := []tributary.Header{{Key: "prior", Value: []byte("x")}}
		n2, hs, err2 := ParseRecordInPlace(data, &got, 0, prior)
		if (err1 == nil) != (err2 == nil) || n1 != n2 {
			t.Fatalf("ParseRecord %d, %v; in place %d, %v", n1, err1, n2, err2)
		}
		if len(hs) < 1 || hs[0].Key != "prior" || string(hs[0].Value) != "x" {
			t.Fatalf("headers already in hs changed: %+v", hs)
		}
		if err1 != nil {
			if len(hs) != 1 {
				t.Fatalf("a failed parse left %d headers appended", len(hs)-1)
			}
			return
		}
		same := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
		if want.TimestampDelta != got.TimestampDelta || !same(want.Key, got.Key) || !same(want.Value, got.Value) ||
			len(want.Headers) != len(got.Headers) || (want.Headers == nil) != (got.Headers == nil) || len(hs) != 1+len(got.Headers) {
			t.Fatalf("ParseRecord %+v, in place %+v", want, got)
		}
		for i := range want.Headers {
			if want.Headers[i].Key != got.Headers[i].Key || !same(want.Headers[i].Value, got.Headers[i].Value) {
				t.Fatalf("header %d: %+v, in place %+v", i, want.Headers[i], got.Headers[i])
			}
		}
	})
}
