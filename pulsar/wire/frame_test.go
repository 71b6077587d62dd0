package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func TestFrameRoundTrip(t *testing.T) {
	ping := &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}}
	msg := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
		ConsumerId: proto.Uint64(7), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(42), Partition: proto.Int32(3)},
	}}
	md := &pb.MessageMetadata{ProducerName: proto.String("edge-1"), SequenceId: proto.Uint64(42), PublishTime: proto.Uint64(1700000000000),
		Properties: []*pb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}, PartitionKey: proto.String("dev-1")}
	bem := &pb.BrokerEntryMetadata{Index: proto.Uint64(42), BrokerTimestamp: proto.Uint64(5)}
	for _, tc := range []struct {
		name    string
		cmd     *pb.BaseCommand
		bem     *pb.BrokerEntryMetadata
		md      *pb.MessageMetadata
		payload []byte
	}{
		{name: "simple", cmd: ping},
		{name: "payload", cmd: msg, md: md, payload: []byte("{\"c\":21.5}")},
		{name: "broker entry", cmd: msg, bem: bem, md: md, payload: []byte{0, 1, 2, 0xff}},
		{name: "empty payload", cmd: msg, bem: bem, md: md, payload: []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			var err error
			if tc.md == nil {
				b, err = AppendCommand([]byte("junk"), tc.cmd)
			} else {
				b, err = AppendPayloadCommand([]byte("junk"), tc.cmd, tc.bem, tc.md, tc.payload)
			}
			if err != nil {
				t.Fatal(err)
			}
			f, _, err := ReadFrame(bytes.NewReader(b[4:]), DefaultMaxFrameBytes, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(f.Cmd, tc.cmd) {
				t.Fatalf("cmd %v, want %v", f.Cmd, tc.cmd)
			}
			if (f.Metadata == nil) != (tc.md == nil) || (tc.md != nil && !proto.Equal(f.Metadata, tc.md)) {
				t.Fatalf("metadata %v, want %v", f.Metadata, tc.md)
			}
			if (f.BrokerEntry == nil) != (tc.bem == nil) || (tc.bem != nil && !proto.Equal(f.BrokerEntry, tc.bem)) {
				t.Fatalf("broker entry %v, want %v", f.BrokerEntry, tc.bem)
			}
			if !bytes.Equal(f.Payload, tc.payload) {
				t.Fatalf("payload %q, want %q", f.Payload, tc.payload)
			}
		})
	}
}

func TestFrameErrors(t *testing.T) {
	msg := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
		ConsumerId: proto.Uint64(1), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}}}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(2), PublishTime: proto.Uint64(3)}
	good, err := AppendPayloadCommand(nil, msg, nil, md, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	big := binary.BigEndian.AppendUint32(nil, DefaultMaxFrameBytes+1)
	noMagic := bytes.Clone(good)
	cs := binary.BigEndian.Uint32(noMagic[4:])
	noMagic[8+cs] = 0x0f
	// A BaseCommand without its required type.
	untyped, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(&pb.BaseCommand{Ping: &pb.CommandPing{}})
	untypedFrame := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(4+len(untyped))), uint32(len(untyped)))
	untypedFrame = append(untypedFrame, untyped...)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"checksum", corrupt, ErrChecksum},
		{"too large", big, ErrFrameTooLarge},
		{"no magic", noMagic, ErrMalformedFrame},
		{"command size beyond frame", []byte{0, 0, 0, 4, 0, 0, 1, 0}, ErrMalformedFrame},
		{"short", []byte{0, 0, 0, 2, 0, 0}, ErrMalformedFrame},
		{"required field missing", untypedFrame, ErrMalformedFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadFrame(bytes.NewReader(tc.in), DefaultMaxFrameBytes, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzFrame decodes arbitrary frame bodies (command, broker entry
// metadata, checksummed metadata and payload); whatever decodes must
// encode again and decode to the same frame.
func FuzzFrame(f *testing.F) {
	ping, _ := AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	sub, _ := AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String("persistent://tributary/factory/telemetry-partition-0"), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Key_Shared.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2),
		KeySharedMeta: &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_AUTO_SPLIT.Enum()}}})
	msg, _ := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
		ConsumerId: proto.Uint64(1), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(9)}}},
		&pb.BrokerEntryMetadata{Index: proto.Uint64(9)},
		&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(9), PublishTime: proto.Uint64(1)}, []byte("x"))
	for _, s := range [][]byte{ping, sub, msg} {
		f.Add(s[4:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		var out []byte
		if fr.Metadata == nil {
			out, err = AppendCommand(nil, fr.Cmd)
		} else {
			out, err = AppendPayloadCommand(nil, fr.Cmd, fr.BrokerEntry, fr.Metadata, fr.Payload)
		}
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeFrame(out[4:])
		if err != nil {
			t.Fatalf("decode re-encoded: %v", err)
		}
		if !proto.Equal(again.Cmd, fr.Cmd) || !proto.Equal(again.Metadata, fr.Metadata) ||
			!proto.Equal(again.BrokerEntry, fr.BrokerEntry) || !bytes.Equal(again.Payload, fr.Payload) {
			t.Fatalf("round trip changed the frame")
		}
	})
}
