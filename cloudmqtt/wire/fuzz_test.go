package wire

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// FuzzReadPacket: whatever a client sends, ReadPacket returns a packet or
// an error — never a panic (mochi's decoder panics on some inputs) — and
// never reads a body above the cap. version 0 is the first packet.
func FuzzReadPacket(f *testing.F) {
	f.Add(encode(f, connect5()), byte(0))
	f.Add(encode(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 1,
		Filters:    packets.Subscriptions{{Filter: "$stream/a.b/#", Qos: 1}},
		Properties: packets.Properties{User: []packets.UserProperty{{Key: "stream-offset", Val: "0:5"}}}}), byte(5))
	f.Add(encode(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 5, PacketID: 2,
		TopicName: "a/b", Payload: []byte("x")}), byte(5))
	f.Add(encode(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, ProtocolVersion: 4, PacketID: 3}), byte(4))
	f.Add([]byte{0x82, 0x06, 0, 1, 0, 0, 1, 'a'}, byte(5))
	f.Add([]byte{0xe0, 0x00}, byte(5))
	f.Fuzz(func(t *testing.T, raw []byte, version byte) {
		version %= 6
		const max = 4096
		pk, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw)), max, version)
		if err == nil && pk.FixedHeader.Remaining > max {
			t.Fatalf("a %d-byte body read under a %d cap", pk.FixedHeader.Remaining, max)
		}
		if err == nil && version == 0 && pk.FixedHeader.Type != packets.Connect {
			t.Fatalf("first packet of type %d accepted", pk.FixedHeader.Type)
		}
		if err == nil && pk.FixedHeader.Type == packets.Subscribe {
			for _, f := range pk.Filters {
				ParseFilter(f.Filter)
			}
			for _, u := range pk.Properties.User {
				ParseStart(u.Val)
			}
		}
	})
}

// FuzzParse: the subscription address, the start position and topic
// matching take any string without a panic, and what ParseFilter accepts
// is a valid filter of a valid stream.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"$stream/factory.telemetry/factory/+/temp", "$share/g/$stream/a.b/#", "a/#/b", "earliest",
		"0:5,1:7", "2026-12-01T10:00:00Z", "$stream/+/#", "42"} {
		f.Add(s, "factory/l1/temp")
	}
	f.Fuzz(func(t *testing.T, s, topic string) {
		if tg, err := ParseFilter(s); err == nil {
			if ValidFilter(tg.Filter) != nil || (tg.Stream != "" && ValidStream(tg.Stream) != nil) {
				t.Fatalf("%q accepted as %+v", s, tg)
			}
			Match(tg.Filter, topic)
			if ValidFilter(topic) == nil && Overlap(tg.Filter, topic) != Overlap(topic, tg.Filter) {
				t.Fatalf("Overlap(%q, %q) is not symmetric", tg.Filter, topic)
			}
		}
		if st, err := ParseStart(s); err == nil && st.Kind == Offset && len(st.Offsets) > MaxStartPartitions {
			t.Fatalf("%q: %d partitions", s, len(st.Offsets))
		}
	})
}
