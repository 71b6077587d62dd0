package wal

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tributary-io/tributary"
)

func sampleRecords() []*tributary.Record {
	return []*tributary.Record{
		{},
		{Stream: "plant.telemetry", Partition: 3, Offset: 42, Epoch: 7, Timestamp: 1_700_000_000_000_000,
			Topic: "site/a/temp", Value: []byte(`{"t":21.5}`), Source: "mqtt", ClientID: "dev-1", Node: "edge-1"},
		{Stream: "s", Key: []byte{}, Value: []byte{}, Headers: []tributary.Header{{Key: "", Value: nil}, {Key: "h", Value: []byte{}}}},
		{Stream: "k.v", Partition: math.MaxInt32, Offset: math.MaxInt64, Epoch: math.MinInt64, Timestamp: -1,
			Topic: "orders", Key: []byte("key"), Value: []byte{0, 1, 2, 0xff},
			Headers: []tributary.Header{{Key: "trace", Value: []byte("abc")}, {Key: "trace", Value: []byte("dup")}},
			Source:  "kafka", ClientID: "producer-9", Node: "edge-2",
			ProducerID: 1 << 40, ProducerEpoch: math.MinInt16, Sequence: math.MinInt32, ProducerTimestamp: 1_700_000_000_000},
		{Stream: "x", Partition: math.MinInt32, ProducerEpoch: math.MaxInt16, Sequence: math.MaxInt32},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for i, r := range sampleRecords() {
		b := EncodeRecord([]byte("prefix"), r)
		got, err := DecodeRecord(b[len("prefix"):])
		if err != nil {
			t.Fatalf("record %d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d: round trip\n got %#v\nwant %#v", i, got, r)
		}
		// The decoded record must not alias its input.
		for j := range b {
			b[j] = 0xAA
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d: decoded record aliases its input", i)
		}
	}
}

func TestDecodeRecordCorrupt(t *testing.T) {
	good := EncodeRecord(nil, sampleRecords()[3])
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{2}, good[1:]...)},
		{"version only", []byte{formatV1}},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"stream length beyond input", []byte{formatV1, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a'}},
		{"overlong varint", []byte{formatV1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"huge header count", func() []byte {
			b := EncodeRecord(nil, &tributary.Record{})
			// version, stream, partition, offset, epoch, timestamp, topic,
			// key, value: one byte each for the zero record.
			prefix := b[:9]
			return append(append([]byte{}, prefix...), 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0)
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRecord(tt.in)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeRecord = %v, %v; want ErrCorrupt", r, err)
			}
		})
	}
	// A partition beyond int32 is corrupt, not truncated silently.
	b := []byte{formatV1, 0}
	b = binary.AppendVarint(b, math.MaxInt32+1)
	if _, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("partition beyond int32: %v", err)
	}
}

// FuzzDecodeRecord checks that arbitrary input never panics, and that any
// record that decodes encodes back to a record that decodes identically
// (every tributary.Record has an encoding, so this is the round trip of any tributary.Record).
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(EncodeRecord(nil, r))
	}
	f.Add([]byte{})
	f.Add([]byte{formatV1})
	f.Add([]byte{formatV1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		enc := EncodeRecord(nil, r)
		r2, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip\n got %#v\nwant %#v", r2, r)
		}
		if enc2 := EncodeRecord(nil, r2); string(enc2) != string(enc) {
			t.Fatalf("encoding not stable")
		}
	})
}

// TestSeedCorpus checks that the hand-written seeds mean what their names
// say: the records decode, the malformed ones are refused.
func TestSeedCorpus(t *testing.T) {
	for name, wantOK := range map[string]bool{
		"mqtt-record": true, "kafka-record-headers": true,
		"huge-value-length": false, "header-count-bomb": false, "version-2": false,
	} {
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeRecord", name))
		if err != nil {
			t.Fatal(err)
		}
		lit := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(string(raw), "\n", 2)[1], "[]byte("), ")\n")
		data, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := DecodeRecord([]byte(data))
		if (err == nil) != wantOK {
			t.Fatalf("%s: DecodeRecord = %+v, %v", name, r, err)
		}
	}
}
