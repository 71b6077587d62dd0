package mqtt

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Peer message types of the MQTT namespace (package peer reserves 32–63
// for it). Every payload starts with wireVersion; a receiver refuses other
// versions with an error reply, so a mixed-version cluster fails loudly.
const (
	// msgInterest carries the sender's subscription interest, full or as a
	// delta (interestMsg). Reply: one byte, replyOK or replyNeedFull.
	msgInterest uint8 = 32
	// msgForward carries forwarded publishes (forwardBatch). Reply: empty,
	// sent after the publishes were handed to local delivery.
	msgForward uint8 = 33
	// msgRetained carries (part of) the sender's retained messages for a
	// node catching up (a forwardBatch with Seq 0, no groups). Reply: empty.
	msgRetained uint8 = 34
)

const wireVersion = 1

// Interest replies.
const (
	replyOK       = 0
	replyNeedFull = 1
)

// errBadWire is wrapped by every decoding error.
var errBadWire = errors.New("mqtt cluster: malformed message")

// interestEntry is one subscription filter of a node and how many of its
// sessions subscribe to it. A shared subscription's filter is the full
// "$share/<group>/<filter>", so the count is the group's subscribers on
// that node. In a delta, Count 0 removes the filter.
type interestEntry struct {
	Filter string
	Count  uint32
}

// interestMsg is a node's interest: the full set (Full) or the entries
// changed between versions Base and Version. Epoch identifies the
// sender's run (a restarted node has a new one), so a receiver never
// applies a delta to state from another run.
type interestMsg struct {
	Full          bool
	Epoch         uint64
	Base, Version uint64
	Entries       []interestEntry
}

// fwdMsg is one forwarded publish: what mochi needs to deliver it as the
// origin would have, and the shared-subscription groups ("$share/g/f")
// the receiving node delivers it to (none: only its ordinary subscribers).
type fwdMsg struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	Props   packets.Properties // the subset in encodeProps
	Groups  []string
}

// forwardBatch is a run of publishes from one origin run (Epoch) with
// consecutive sequence numbers from Seq, so that a batch re-sent after a
// broken link is not delivered twice.
type forwardBatch struct {
	Epoch uint64
	Seq   uint64
	Msgs  []fwdMsg
}

const (
	flagFull = 1

	fwdRetain = 4 // fwdMsg flags: bits 0-1 QoS, bit 2 retain
)

// Presence bits of forwarded MQTT 5 properties.
const (
	propPayloadFormat = 1 << iota
	propExpiry
	propContentType
	propResponseTopic
	propCorrelation
	propUser
)

func (m interestMsg) encode() []byte {
	b := []byte{wireVersion, 0}
	if m.Full {
		b[1] = flagFull
	}
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, m.Base)
	b = binary.AppendUvarint(b, m.Version)
	b = binary.AppendUvarint(b, uint64(len(m.Entries)))
	for _, e := range m.Entries {
		b = appendStr(b, e.Filter)
		b = binary.AppendUvarint(b, uint64(e.Count))
	}
	return b
}

func decodeInterest(b []byte) (interestMsg, error) {
	var m interestMsg
	r, err := newWireReader(b)
	if err != nil {
		return m, err
	}
	flags := r.byte()
	m.Full = flags&flagFull != 0
	m.Epoch, m.Base, m.Version = r.uvarint(), r.uvarint(), r.uvarint()
	n := r.count(2)
	for i := 0; i < n && r.err == nil; i++ {
		f := r.str()
		c := r.uvarint()
		if c > 1<<32-1 {
			r.fail("count out of range")
		}
		m.Entries = append(m.Entries, interestEntry{Filter: f, Count: uint32(c)})
	}
	return m, r.done()
}

func (fb forwardBatch) encode() []byte {
	b := []byte{wireVersion}
	b = binary.AppendUvarint(b, fb.Epoch)
	b = binary.AppendUvarint(b, fb.Seq)
	b = binary.AppendUvarint(b, uint64(len(fb.Msgs)))
	for i := range fb.Msgs {
		b = fb.Msgs[i].append(b)
	}
	return b
}

func (m *fwdMsg) append(b []byte) []byte {
	flags := m.QoS & 3
	if m.Retain {
		flags |= fwdRetain
	}
	b = append(b, flags)
	b = appendStr(b, m.Topic)
	b = appendBytes(b, m.Payload)
	b = appendProps(b, &m.Props)
	b = binary.AppendUvarint(b, uint64(len(m.Groups)))
	for _, g := range m.Groups {
		b = appendStr(b, g)
	}
	return b
}

// size is about the encoded size of m, for batching and queue bounds.
func (m *fwdMsg) size() int {
	n := 16 + len(m.Topic) + len(m.Payload) + len(m.Props.ContentType) + len(m.Props.ResponseTopic) + len(m.Props.CorrelationData)
	for _, u := range m.Props.User {
		n += 4 + len(u.Key) + len(u.Val)
	}
	for _, g := range m.Groups {
		n += 2 + len(g)
	}
	return n
}

func decodeForward(b []byte) (forwardBatch, error) {
	var fb forwardBatch
	r, err := newWireReader(b)
	if err != nil {
		return fb, err
	}
	fb.Epoch, fb.Seq = r.uvarint(), r.uvarint()
	n := r.count(4)
	for i := 0; i < n && r.err == nil; i++ {
		var m fwdMsg
		flags := r.byte()
		if flags&^(3|fwdRetain) != 0 || flags&3 == 3 {
			r.fail("bad publish flags")
		}
		m.QoS, m.Retain = flags&3, flags&fwdRetain != 0
		m.Topic = r.str()
		m.Payload = r.bytes()
		r.props(&m.Props)
		ng := r.count(1)
		for j := 0; j < ng && r.err == nil; j++ {
			m.Groups = append(m.Groups, r.str())
		}
		fb.Msgs = append(fb.Msgs, m)
	}
	return fb, r.done()
}

// appendProps writes the MQTT 5 properties a forwarded publish keeps: a
// presence bitmask, then each present one. Topic aliases and subscription
// identifiers are per connection and are not forwarded.
func appendProps(b []byte, p *packets.Properties) []byte {
	var mask byte
	if p.PayloadFormatFlag {
		mask |= propPayloadFormat
	}
	if p.MessageExpiryInterval > 0 {
		mask |= propExpiry
	}
	if p.ContentType != "" {
		mask |= propContentType
	}
	if p.ResponseTopic != "" {
		mask |= propResponseTopic
	}
	if len(p.CorrelationData) > 0 {
		mask |= propCorrelation
	}
	if len(p.User) > 0 {
		mask |= propUser
	}
	b = append(b, mask)
	if mask&propPayloadFormat != 0 {
		b = append(b, p.PayloadFormat)
	}
	if mask&propExpiry != 0 {
		b = binary.AppendUvarint(b, uint64(p.MessageExpiryInterval))
	}
	if mask&propContentType != 0 {
		b = appendStr(b, p.ContentType)
	}
	if mask&propResponseTopic != 0 {
		b = appendStr(b, p.ResponseTopic)
	}
	if mask&propCorrelation != 0 {
		b = appendBytes(b, p.CorrelationData)
	}
	if mask&propUser != 0 {
		b = binary.AppendUvarint(b, uint64(len(p.User)))
		for _, u := range p.User {
			b = appendStr(b, u.Key)
			b = appendStr(b, u.Val)
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b []byte, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// wireReader decodes the primitives above; the first error sticks and
// later reads return zero values.
type wireReader struct {
	b   []byte
	err error
}

func newWireReader(b []byte) (*wireReader, error) {
	if len(b) == 0 || b[0] != wireVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadWire)
	}
	return &wireReader{b: b[1:]}, nil
}

func (r *wireReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errBadWire, what)
	}
	r.b = nil
}

func (r *wireReader) byte() byte {
	if len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *wireReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads an element count, each element taking at least min bytes,
// so a forged count cannot make the decoder allocate beyond the input.
func (r *wireReader) count(min int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/min) {
		r.fail("count exceeds input")
		return 0
	}
	return int(n)
}

func (r *wireReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("length exceeds input")
		return nil
	}
	v := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return v
}

func (r *wireReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("length exceeds input")
		return ""
	}
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}

func (r *wireReader) props(p *packets.Properties) {
	mask := r.byte()
	if mask&^(propPayloadFormat|propExpiry|propContentType|propResponseTopic|propCorrelation|propUser) != 0 {
		r.fail("unknown properties")
		return
	}
	if mask&propPayloadFormat != 0 {
		p.PayloadFormat, p.PayloadFormatFlag = r.byte(), true
	}
	if mask&propExpiry != 0 {
		v := r.uvarint()
		if v > 1<<32-1 {
			r.fail("expiry out of range")
		}
		p.MessageExpiryInterval = uint32(v)
	}
	if mask&propContentType != 0 {
		p.ContentType = r.str()
	}
	if mask&propResponseTopic != 0 {
		p.ResponseTopic = r.str()
	}
	if mask&propCorrelation != 0 {
		p.CorrelationData = r.bytes()
	}
	if mask&propUser != 0 {
		n := r.count(2)
		for i := 0; i < n && r.err == nil; i++ {
			p.User = append(p.User, packets.UserProperty{Key: r.str(), Val: r.str()})
		}
	}
}

// done reports the sticky error, or trailing bytes.
func (r *wireReader) done() error {
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errBadWire, len(r.b))
	}
	return nil
}
