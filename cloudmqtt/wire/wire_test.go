package wire

import (
	"bufio"
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

func TestParseFilter(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Target
		bad  error
	}{
		{"$stream/factory.telemetry/factory/+/temp", Target{Stream: "factory.telemetry", Filter: "factory/+/temp"}, nil},
		{"$stream/a.b/#", Target{Stream: "a.b", Filter: "#"}, nil},
		{"$share/g1/$stream/a.b/x", Target{Share: "g1", Stream: "a.b", Filter: "x"}, nil},
		{"factory/#", Target{Filter: "factory/#"}, nil},
		{"$stream/a.b", Target{}, ErrBadFilter},
		{"$stream/a.b/", Target{}, ErrBadFilter},
		{"$stream/+/#", Target{}, ErrBadStream},
		{"$stream/a.*/#", Target{}, ErrBadStream},
		{"$stream/a.b.c/#", Target{}, ErrBadStream},
		{"$stream/.b/#", Target{}, ErrBadStream},
		{"$stream/a.b/x/#/y", Target{}, ErrBadFilter},
		{"$stream/a.b/x+", Target{}, ErrBadFilter},
		{"$share//x", Target{}, ErrBadFilter},
		{"$share/g+/x", Target{}, ErrBadFilter},
		{"", Target{}, ErrBadFilter},
		{"a/\x00", Target{}, ErrBadFilter},
		{strings.Repeat("a/", MaxFilterLevels) + "b", Target{}, ErrBadFilter},
	} {
		got, err := ParseFilter(c.in)
		if c.bad != nil {
			if !errors.Is(err, c.bad) {
				t.Errorf("%q: error %v, want %v", c.in, err, c.bad)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		f, topic string
		want     bool
	}{
		{"#", "a/b", true}, {"#", "$SYS/x", false}, {"+/b", "$x/b", false},
		{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"a/#", "ab", false},
		{"a/+", "a/b", true}, {"a/+", "a/b/c", false}, {"a/+", "a", false}, {"a/+", "a/", true},
		{"a/b", "a/b", true}, {"a/b", "a/b/", false}, {"+", "", true}, {"+/+", "/", true},
		{"factory/+/temp", "factory/l1/temp", true}, {"factory/+/temp", "factory/l1/hum", false},
	} {
		if got := Match(c.f, c.topic); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.f, c.topic, got)
		}
	}
}

func TestParseStart(t *testing.T) {
	at := "2026-12-01T10:00:00.123456Z"
	tm, _ := time.Parse(time.RFC3339Nano, at)
	for _, c := range []struct {
		in   string
		want Start
	}{
		{"earliest", Start{Kind: Earliest}}, {"LATEST", Start{Kind: Latest}}, {"", Start{Kind: Latest}},
		{"42", Start{Kind: Offset, All: 42}},
		{at, Start{Kind: Time, Time: tm}},
	} {
		got, err := ParseStart(c.in)
		if err != nil || got.Kind != c.want.Kind || got.All != c.want.All || !got.Time.Equal(c.want.Time) {
			t.Errorf("%q: %+v %v", c.in, got, err)
		}
	}
	s, err := ParseStart("0:5, 3:7")
	if err != nil || s.Kind != Offset || s.All != -1 || s.Offsets[0] != 5 || s.Offsets[3] != 7 || len(s.Offsets) != 2 {
		t.Fatalf("per partition: %+v %v", s, err)
	}
	for _, bad := range []string{"-1", "x", "0:", ":3", "0:-1", "-1:2", "1:2:3", "2026-13-01T00:00:00Z", "99999999999:1"} {
		if _, err := ParseStart(bad); !errors.Is(err, ErrBadStart) {
			t.Errorf("%q: error %v", bad, err)
		}
	}
	var many strings.Builder
	for i := range MaxStartPartitions + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(strconv.Itoa(i) + ":1")
	}
	if _, err := ParseStart(many.String()); !errors.Is(err, ErrBadStart) {
		t.Fatalf("%d partitions: error %v", MaxStartPartitions+1, err)
	}
}

// encode is a client packet in mochi's encoding.
func encode(t testing.TB, pk packets.Packet) []byte {
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&b)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Puback:
		err = pk.PubackEncode(&b)
	case packets.Pingreq:
		err = pk.PingreqEncode(&b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func connect5() packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: "c1", Clean: true, Keepalive: 30}}
}

func TestReadPacket(t *testing.T) {
	raw := encode(t, connect5())
	pk, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw)), 1024, 0)
	if err != nil || pk.Connect.ClientIdentifier != "c1" || pk.ProtocolVersion != 5 {
		t.Fatalf("connect: %+v %v", pk, err)
	}
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 7,
		Filters:    packets.Subscriptions{{Filter: "$stream/a.b/#", Qos: 1}},
		Properties: packets.Properties{User: []packets.UserProperty{{Key: "stream-offset", Val: "earliest"}}}}
	pk, err = ReadPacket(bufio.NewReader(bytes.NewReader(encode(t, sub))), 1024, 5)
	if err != nil || pk.PacketID != 7 || pk.Filters[0].Filter != "$stream/a.b/#" || pk.Properties.User[0].Val != "earliest" {
		t.Fatalf("subscribe: %+v %v", pk, err)
	}
	for name, c := range map[string]struct {
		raw     []byte
		max     int
		version byte
		want    error
	}{
		"too large":            {append([]byte{0x10}, 0xff, 0xff, 0x03), 1024, 0, ErrTooLarge},
		"five length bytes":    {[]byte{0x10, 0x80, 0x80, 0x80, 0x80, 0x01}, 1 << 30, 0, ErrMalformed},
		"publish first":        {encode(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, ProtocolVersion: 5, TopicName: "a"}), 1024, 0, ErrMalformed},
		"second connect":       {raw, 1024, 5, ErrMalformed},
		"server packet":        {[]byte{0x20, 0x02, 0, 0}, 1024, 5, ErrMalformed},
		"bad flags":            {[]byte{0x83, 0x00}, 1024, 5, ErrMalformed},
		"qos 3":                {[]byte{0x36, 0x00}, 1024, 5, ErrMalformed},
		"subscribe no options": {[]byte{0x82, 0x06, 0, 1, 0, 0, 1, 'a'}, 1024, 5, ErrMalformed}, // mochi 2.7.9 panics on it
	} {
		_, err := ReadPacket(bufio.NewReader(bytes.NewReader(c.raw)), c.max, c.version)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", name, err, c.want)
		}
	}
}

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"#", "factory/+/temp", true}, {"factory/#", "factory/+/temp", true}, {"factory/#", "factory", true},
		{"office/#", "factory/+/temp", false}, {"a/+/c", "a/b/+", true}, {"a/b", "a/b/c", false},
		{"a/b/#", "a/b", true}, {"a/+", "a/b/c", false}, {"+/+", "a", false}, {"a", "a", true},
		{"#", "$SYS/x", false}, {"$SYS/#", "$SYS/x", true}, {"+/x", "$SYS/x", false},
	} {
		if got, rev := Overlap(c.a, c.b), Overlap(c.b, c.a); got != c.want || rev != c.want {
			t.Errorf("Overlap(%q, %q) = %v / %v, want %v", c.a, c.b, got, rev, c.want)
		}
	}
}
