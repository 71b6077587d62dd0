package mqtt

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

func sampleBatch() forwardBatch {
	return forwardBatch{Epoch: 0xdeadbeef, Seq: 42, Msgs: []fwdMsg{
		{Topic: "plant/a/temp", Payload: []byte(`{"c":21.5}`), QoS: 1, Retain: true,
			Props: packets.Properties{PayloadFormat: 1, PayloadFormatFlag: true, MessageExpiryInterval: 60,
				ContentType: "application/json", ResponseTopic: "reply/a", CorrelationData: []byte{1, 2},
				User: []packets.UserProperty{{Key: "k", Val: "v"}, {Key: "k", Val: "w"}}},
			Groups: []string{"$share/g/plant/#", "$share/h/plant/+/temp"}},
		{Topic: "x", QoS: 0},
		{Topic: "y", Payload: []byte{0}, QoS: 2},
	}}
}

func TestWireRoundTrip(t *testing.T) {
	fb := sampleBatch()
	got, err := decodeForward(fb.encode())
	if err != nil {
		t.Fatal(err)
	}
	// Empty payloads decode as empty (non-nil) slices; compare bytes.
	for i := range got.Msgs {
		if !bytes.Equal(got.Msgs[i].Payload, fb.Msgs[i].Payload) {
			t.Fatalf("msg %d payload %q, want %q", i, got.Msgs[i].Payload, fb.Msgs[i].Payload)
		}
		got.Msgs[i].Payload = fb.Msgs[i].Payload
	}
	if !reflect.DeepEqual(got, fb) {
		t.Fatalf("forward round trip:\n got %+v\nwant %+v", got, fb)
	}

	im := interestMsg{Full: true, Epoch: 3, Base: 0, Version: 9, Entries: []interestEntry{{"a/#", 2}, {"$share/g/b", 1}}}
	gotI, err := decodeInterest(im.encode())
	if err != nil || !reflect.DeepEqual(gotI, im) {
		t.Fatalf("interest round trip: %+v, %v", gotI, err)
	}

	for name, b := range map[string][]byte{
		"empty":         nil,
		"version 2":     {2},
		"truncated":     fb.encode()[:20],
		"trailing":      append(fb.encode(), 0),
		"forged count":  {wireVersion, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad qos flags": {wireVersion, 0, 0, 1, 3, 0, 0, 0, 0},
	} {
		if _, err := decodeForward(b); !errors.Is(err, errBadWire) {
			t.Errorf("%s: err %v, want errBadWire", name, err)
		}
	}
}

// FuzzDecodeForward: any input decodes or fails with errBadWire, never
// panics or allocates beyond the input; what decodes re-encodes to a
// batch that decodes to the same thing.
func FuzzDecodeForward(f *testing.F) {
	f.Add(sampleBatch().encode())
	f.Add(forwardBatch{Epoch: 1}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		fb, err := decodeForward(b)
		if err != nil {
			if !errors.Is(err, errBadWire) {
				t.Fatalf("error %v does not wrap errBadWire", err)
			}
			return
		}
		again, err := decodeForward(fb.encode())
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !bytes.Equal(again.encode(), fb.encode()) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

// FuzzDecodeInterest: as FuzzDecodeForward, for interest messages.
func FuzzDecodeInterest(f *testing.F) {
	f.Add(interestMsg{Full: true, Epoch: 3, Version: 9, Entries: []interestEntry{{"a/#", 2}, {"$share/g/b", 1}}}.encode())
	f.Add(interestMsg{Epoch: 3, Base: 9, Version: 10, Entries: []interestEntry{{"a/#", 0}}}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeInterest(b)
		if err != nil {
			if !errors.Is(err, errBadWire) {
				t.Fatalf("error %v does not wrap errBadWire", err)
			}
			return
		}
		again, err := decodeInterest(m.encode())
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip: %+v %v, want %+v", again, err, m)
		}
		// Applying whatever decodes must not break the table.
		r := newRemoteInterest()
		r.apply("n", m)
		r.match("a/b")
		r.drop("n")
		if r.count() != 0 {
			t.Fatalf("count %d after drop", r.count())
		}
	})
}
