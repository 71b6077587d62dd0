// Package wire is the cloud MQTT listener's input side, kept apart from
// the tables so that it fuzzes fast: reading one MQTT control packet off a
// connection (framing with a size cap, then mochi-mqtt's packet codec),
// the `$stream/<namespace.stream>/<filter>` and `$share/<group>/…`
// subscription addresses, the `stream-offset` start positions and topic
// matching.
//
// Every function here takes bytes a client controls: each has a cap or a
// check, none panics (a panic inside mochi's decoder is turned into
// ErrMalformed), and FuzzReadPacket / FuzzParse cover them.
package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Errors of ReadPacket.
var (
	// ErrMalformed: the bytes are not an MQTT packet of the kind the
	// header says (the connection ends with reason 0x81).
	ErrMalformed = errors.New("mqtt: malformed packet")
	// ErrTooLarge: the remaining length is above the cap (reason 0x95).
	ErrTooLarge = errors.New("mqtt: packet too large")
)

// ReadPacket reads one control packet of a client speaking version (3, 4
// or 5; 0 before CONNECT, when only a CONNECT is accepted) from r. A
// remaining length above max is refused before any of the body is read.
func ReadPacket(r *bufio.Reader, max int, version byte) (pk packets.Packet, err error) {
	hb, err := r.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	n, err := readLength(r)
	if err != nil {
		return pk, err
	}
	if n > max {
		return pk, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, n, max)
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return pk, err
	}
	pk.ProtocolVersion = version
	if err := decode(&pk, body); err != nil {
		return pk, err
	}
	return pk, nil
}

// readLength reads the variable byte integer of the fixed header (at most
// four bytes).
func readLength(r *bufio.Reader) (int, error) {
	n, mul := 0, 1
	for i := 0; ; i++ {
		if i == 4 {
			return 0, fmt.Errorf("%w: remaining length longer than four bytes", ErrMalformed)
		}
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			return n, nil
		}
		mul <<= 7
	}
}

// decode runs mochi's decoder for the packet's type; a panic in it (mochi
// 2.7.9 indexes some buffers unchecked) is a malformed packet.
func decode(pk *packets.Packet, body []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	if pk.ProtocolVersion == 0 && pk.FixedHeader.Type != packets.Connect {
		return fmt.Errorf("%w: the first packet must be CONNECT", ErrMalformed)
	}
	switch pk.FixedHeader.Type {
	case packets.Connect:
		if pk.ProtocolVersion != 0 {
			return fmt.Errorf("%w: second CONNECT", ErrMalformed)
		}
		err = pk.ConnectDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Subscribe:
		err = pk.SubscribeDecode(body)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(body)
	case packets.Pingreq:
		err = pk.PingreqDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Auth:
		err = pk.AuthDecode(body)
	default:
		return fmt.Errorf("%w: a client does not send packet type %d", ErrMalformed, pk.FixedHeader.Type)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// Encode encodes pk (a packet the server sends) with mochi's encoder.
func Encode(pk *packets.Packet) ([]byte, error) {
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Puback:
		err = pk.PubackEncode(&b)
	case packets.Pubrec:
		err = pk.PubrecEncode(&b)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&b)
	case packets.Suback:
		err = pk.SubackEncode(&b)
	case packets.Unsuback:
		err = pk.UnsubackEncode(&b)
	case packets.Pingresp:
		err = pk.PingrespEncode(&b)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&b)
	default:
		return nil, fmt.Errorf("mqtt: the server does not send packet type %d", pk.FixedHeader.Type)
	}
	return b.Bytes(), err
}

// StreamPrefix starts the filter of a subscription to one stream.
const StreamPrefix = "$stream/"

// Target is what a subscription filter addresses.
type Target struct {
	// Share is the group of a `$share/<group>/…` filter ("" otherwise).
	Share string
	// Stream is the namespace.stream of a `$stream/…` filter; "" for a
	// plain topic filter (resolved through the edge's routes).
	Stream string
	// Filter is the topic filter the rows' original topics must match.
	Filter string
}

// Errors of ParseFilter.
var (
	ErrBadFilter = errors.New("invalid topic filter")
	ErrBadStream = errors.New("invalid stream name")
)

// MaxFilterLevels caps the levels of a topic filter.
const MaxFilterLevels = 64

// ParseFilter parses a SUBSCRIBE filter: `[$share/<group>/]$stream/<ns.stream>/<filter>`
// or `[$share/<group>/]<filter>`.
func ParseFilter(f string) (Target, error) {
	var t Target
	if rest, ok := strings.CutPrefix(f, "$share/"); ok {
		g, inner, ok := strings.Cut(rest, "/")
		if !ok || g == "" || strings.ContainsAny(g, "+#") || inner == "" {
			return t, fmt.Errorf("%w: %q: want $share/<group>/<filter>", ErrBadFilter, f)
		}
		t.Share, f = g, inner
	}
	if rest, ok := strings.CutPrefix(f, StreamPrefix); ok {
		s, inner, ok := strings.Cut(rest, "/")
		if !ok || inner == "" {
			return t, fmt.Errorf("%w: %q: want $stream/<namespace.stream>/<topic filter>", ErrBadFilter, f)
		}
		if err := ValidStream(s); err != nil {
			return t, err
		}
		t.Stream, f = s, inner
	}
	if err := ValidFilter(f); err != nil {
		return t, err
	}
	t.Filter = f
	return t, nil
}

// ValidStream checks the "namespace.stream" form: two non-empty parts of
// letters, digits, '_' and '-', one dot between (no wildcards).
func ValidStream(s string) error {
	ns, name, ok := strings.Cut(s, ".")
	if !ok || ns == "" || name == "" || len(s) > 255 {
		return fmt.Errorf("%w: %q is not namespace.stream", ErrBadStream, s)
	}
	for _, c := range ns + name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: only letters, digits, '_' and '-' around one dot (no wildcards)", ErrBadStream, s)
		}
	}
	return nil
}

// ValidFilter checks an MQTT topic filter: non-empty, '#' only as the
// whole last level, '+' only as a whole level, no NUL, at most
// MaxFilterLevels levels.
func ValidFilter(f string) error {
	if f == "" || strings.ContainsRune(f, 0) {
		return fmt.Errorf("%w: %q", ErrBadFilter, f)
	}
	levels := strings.Split(f, "/")
	if len(levels) > MaxFilterLevels {
		return fmt.Errorf("%w: more than %d levels", ErrBadFilter, MaxFilterLevels)
	}
	for i, lv := range levels {
		if strings.Contains(lv, "#") && (lv != "#" || i != len(levels)-1) {
			return fmt.Errorf("%w: %q: '#' must be the whole last level", ErrBadFilter, f)
		}
		if strings.Contains(lv, "+") && lv != "+" {
			return fmt.Errorf("%w: %q: '+' must be a whole level", ErrBadFilter, f)
		}
	}
	return nil
}

// Match tells whether topic matches filter (MQTT 5 section 4.7: '+' one
// level, a trailing '#' the parent and any children, a topic starting
// with '$' not matched by a leading wildcard).
func Match(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			return frest == "#" // "a/#" matches "a"
		case !fmore:
			return false
		}
		filter, topic = frest, trest
	}
}

// StartKind is where a new subscription starts reading.
type StartKind int

// The start positions of the `stream-offset` user property.
const (
	// Latest: rows committed after the subscription (the default).
	Latest StartKind = iota
	// Earliest: the first row still in the table.
	Earliest
	// Offset: the offset of Start.Offsets (per partition; Start.All for
	// partitions it does not name).
	Offset
	// Time: the first row accepted at or after Start.Time.
	Time
)

// Start is a parsed `stream-offset` value.
type Start struct {
	Kind    StartKind
	All     int64           // Offset: for every partition not in Offsets (-1: none given)
	Offsets map[int32]int64 // Offset: per partition
	Time    time.Time
}

// MaxStartPartitions caps the partitions one `stream-offset` value names.
const MaxStartPartitions = 4096

// ErrBadStart is wrapped by ParseStart.
var ErrBadStart = errors.New("invalid stream-offset")

// ParseStart parses `stream-offset`: earliest, latest, an offset N (every
// partition), a list "P:N,P:N" (per partition; others start at latest) or
// an RFC 3339 time.
func ParseStart(v string) (Start, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "earliest":
		return Start{Kind: Earliest}, nil
	case "latest", "":
		return Start{Kind: Latest}, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return Start{}, fmt.Errorf("%w: %q: negative offset", ErrBadStart, v)
		}
		return Start{Kind: Offset, All: n}, nil
	}
	if strings.Contains(v, ":") && !strings.Contains(v, "T") {
		s := Start{Kind: Offset, All: -1, Offsets: map[int32]int64{}}
		for part := range strings.SplitSeq(v, ",") {
			ps, ns, ok := strings.Cut(strings.TrimSpace(part), ":")
			p, err1 := strconv.ParseInt(ps, 10, 32)
			n, err2 := strconv.ParseInt(ns, 10, 64)
			if !ok || err1 != nil || err2 != nil || p < 0 || n < 0 {
				return Start{}, fmt.Errorf("%w: %q: want PARTITION:OFFSET[,PARTITION:OFFSET...]", ErrBadStart, part)
			}
			if len(s.Offsets) >= MaxStartPartitions {
				return Start{}, fmt.Errorf("%w: more than %d partitions", ErrBadStart, MaxStartPartitions)
			}
			s.Offsets[int32(p)] = n
		}
		return s, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return Start{}, fmt.Errorf("%w: %q: want earliest, latest, an offset, PARTITION:OFFSET,... or an RFC 3339 time", ErrBadStart, v)
	}
	return Start{Kind: Time, Time: t}, nil
}

// Overlap tells whether some topic matches both filters a and b.
func Overlap(a, b string) bool {
	// A topic starting with '$' is not matched by a leading wildcard: a
	// filter whose first level is '$…' overlaps no filter that starts with
	// one.
	if fa, fb := firstLevel(a), firstLevel(b); strings.HasPrefix(fa, "$") && (fb == "+" || fb == "#") ||
		strings.HasPrefix(fb, "$") && (fa == "+" || fa == "#") {
		return false
	}
	for {
		al, arest, amore := strings.Cut(a, "/")
		bl, brest, bmore := strings.Cut(b, "/")
		if al == "#" || bl == "#" {
			return true
		}
		if al != "+" && bl != "+" && al != bl {
			return false
		}
		switch {
		case !amore && !bmore:
			return true
		case !amore:
			return brest == "#"
		case !bmore:
			return arest == "#"
		}
		a, b = arest, brest
	}
}

func firstLevel(f string) string {
	l, _, _ := strings.Cut(f, "/")
	return l
}
