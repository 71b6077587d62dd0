// Package wire is the byte format of the Pulsar binary protocol as package
// pulsar speaks it: framing (ReadFrame, DecodeFrame, AppendCommand,
// AppendPayloadCommand). Its decoders check their input and never panic;
// it is apart from package pulsar so that they are fuzzed in a small test
// binary (pulsar's tests link the table stack).
package wire

// Framing of the Pulsar binary protocol.
//
// Every frame starts with a 4-byte big-endian total size (the bytes that
// follow it) and a 4-byte command size, then the command: one protobuf
// BaseCommand. A simple frame ends there. A payload frame (SEND from a
// producer, MESSAGE from the broker) continues with the entry:
//
//	[0x0e02][4: size][BrokerEntryMetadata]    optional, broker to client only
//	[0x0e01][4: CRC32C][4: size][MessageMetadata][payload]
//
// The CRC32C (Castagnoli) covers everything from the metadata size to the
// end of the frame. Decoding checks it and refuses a mismatch
// (ErrChecksum, returning the frame's command alone); encoding always
// writes it. A frame larger than the
// reader's limit is refused before its body is read (ErrFrameTooLarge):
// the connection cannot resynchronise after that and is closed.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

const (
	// DefaultMaxFrameBytes bounds a frame's total size: Pulsar's default
	// maximum message size (5 MiB), announced to clients in CONNECTED.
	DefaultMaxFrameBytes = 5 << 20
	// FramePadding is what a frame may carry beyond the maximum message
	// size (command and metadata), as Pulsar clients allow.
	FramePadding = 10 << 10

	MagicCRC         uint16 = 0x0e01
	MagicBrokerEntry uint16 = 0x0e02
)

// Errors of the framing layer; every one closes the connection.
var (
	ErrFrameTooLarge  = errors.New("pulsar: frame too large")
	ErrMalformedFrame = errors.New("pulsar: malformed frame")
	ErrChecksum       = errors.New("pulsar: payload checksum mismatch")
)

var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame is one decoded frame. Metadata is nil for a simple frame;
// BrokerEntry is nil unless the entry carried broker entry metadata.
// Payload aliases the buffer the frame was decoded from.
type Frame struct {
	Cmd         *pb.BaseCommand
	BrokerEntry *pb.BrokerEntryMetadata
	Metadata    *pb.MessageMetadata
	Payload     []byte
}

// ReadFrame reads one frame of at most max bytes (after the size field)
// into buf (grown as needed) and decodes it. It returns the buffer for
// reuse; the frame's Payload aliases it.
func ReadFrame(r io.Reader, max int, buf []byte) (Frame, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return Frame{}, buf, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, buf, err
	}
	f, err := DecodeFrame(buf)
	return f, buf, err
}

// DecodeFrame decodes a frame body (everything after the total size).
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) < 4 {
		return Frame{}, fmt.Errorf("%w: %d bytes", ErrMalformedFrame, len(b))
	}
	cs := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(cs) > uint64(len(b)) {
		return Frame{}, fmt.Errorf("%w: command size %d of %d bytes", ErrMalformedFrame, cs, len(b))
	}
	var f Frame
	f.Cmd = &pb.BaseCommand{}
	if err := proto.Unmarshal(b[:cs], f.Cmd); err != nil {
		return Frame{}, fmt.Errorf("%w: command: %v", ErrMalformedFrame, err)
	}
	b = b[cs:]
	if len(b) == 0 {
		return f, nil
	}
	if len(b) >= 2 && binary.BigEndian.Uint16(b) == MagicBrokerEntry {
		m, rest, err := sizedMessage(b[2:], "broker entry metadata", &pb.BrokerEntryMetadata{})
		if err != nil {
			return Frame{}, err
		}
		f.BrokerEntry, b = m.(*pb.BrokerEntryMetadata), rest
	}
	if len(b) < 6 || binary.BigEndian.Uint16(b) != MagicCRC {
		return Frame{}, fmt.Errorf("%w: no checksum magic after the command", ErrMalformedFrame)
	}
	want := binary.BigEndian.Uint32(b[2:])
	b = b[6:]
	if got := crc32.Checksum(b, Castagnoli); got != want {
		// The command is returned: the server answers a SEND with it.
		return Frame{Cmd: f.Cmd}, fmt.Errorf("%w: computed %08x, frame says %08x", ErrChecksum, got, want)
	}
	m, rest, err := sizedMessage(b, "message metadata", &pb.MessageMetadata{})
	if err != nil {
		return Frame{}, err
	}
	f.Metadata, f.Payload = m.(*pb.MessageMetadata), rest
	return f, nil
}

// sizedMessage decodes a 4-byte size and that many bytes into m.
func sizedMessage(b []byte, what string, m proto.Message) (proto.Message, []byte, error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %s size truncated", ErrMalformedFrame, what)
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: %s size %d of %d bytes", ErrMalformedFrame, what, n, len(b))
	}
	if err := proto.Unmarshal(b[:n], m); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrMalformedFrame, what, err)
	}
	return m, b[n:], nil
}

var marshal = proto.MarshalOptions{}

// appendSized appends m's 4-byte size and encoding.
func appendSized(dst []byte, m proto.Message) ([]byte, error) {
	n := marshal.Size(m)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	return marshal.MarshalAppend(dst, m)
}

// AppendCommand appends a simple frame holding cmd.
func AppendCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := appendSized(dst, cmd)
	if err != nil {
		return dst[:start], fmt.Errorf("encode %v: %w", cmd.GetType(), err)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst, nil
}

// AppendPayloadCommand appends a payload frame: cmd, the broker entry
// metadata if bem is not nil, the checksummed metadata and the payload.
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, bem *pb.BrokerEntryMetadata, md *pb.MessageMetadata, payload []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := appendSized(dst, cmd)
	if err == nil && bem != nil {
		dst = binary.BigEndian.AppendUint16(dst, MagicBrokerEntry)
		dst, err = appendSized(dst, bem)
	}
	if err != nil {
		return dst[:start], fmt.Errorf("encode %v: %w", cmd.GetType(), err)
	}
	dst = binary.BigEndian.AppendUint16(dst, MagicCRC)
	crcAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if dst, err = appendSized(dst, md); err != nil {
		return dst[:start], fmt.Errorf("encode message metadata: %w", err)
	}
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[crcAt:], crc32.Checksum(dst[crcAt+4:], Castagnoli))
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst, nil
}
