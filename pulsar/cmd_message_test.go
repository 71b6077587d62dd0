package pulsar

import (
	"bytes"
	"testing"

	"github.com/tributary-io/tributary/pulsar/wire"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// messageFrame is the MESSAGE frame of d built with protobuf's encoder:
// the reference for the hand-written appendMessage.
func messageFrame(t *testing.T, id uint64, partition int32, d Delivery, brokerEntry bool) []byte {
	t.Helper()
	r := d.Record
	msg := &pb.CommandMessage{ConsumerId: proto.Uint64(id), MessageId: messageID(d.Offset, partition)}
	if d.RedeliveryCount > 0 {
		msg.RedeliveryCount = proto.Uint32(d.RedeliveryCount)
	}
	publish := uint64(max(r.Timestamp, 0) / 1000)
	producer := r.Node
	if producer == "" {
		producer = serverVersion
	}
	md := &pb.MessageMetadata{ProducerName: &producer, SequenceId: proto.Uint64(uint64(d.Offset)), PublishTime: &publish}
	if r.Key != nil {
		md.PartitionKey = proto.String(string(r.Key))
	}
	if r.ProducerTimestamp > 0 {
		md.EventTime = proto.Uint64(uint64(r.ProducerTimestamp))
	}
	for _, h := range r.Headers {
		md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(h.Key), Value: proto.String(string(h.Value))})
	}
	var bem *pb.BrokerEntryMetadata
	if brokerEntry {
		bem = &pb.BrokerEntryMetadata{Index: proto.Uint64(uint64(d.Offset)), BrokerTimestamp: &publish}
	}
	b, err := wire.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: msg}, bem, md, r.Value)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAppendMessageMatchesProtobuf(t *testing.T) {
	recs := []*tributary.Record{
		{Offset: 0, Timestamp: 1700000000123456, Node: "edge-1", Value: []byte(`{"c":21.5}`)},
		{Offset: 1 << 40, Timestamp: 0, Value: nil},
		{Offset: 7, Timestamp: 5, Node: "n", Key: []byte{}, Value: []byte{}, ProducerTimestamp: 1700000000999,
			Headers: []tributary.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}, {Key: "", Value: []byte{0, 0xff}}}},
		{Offset: 300, Timestamp: 1, Node: "edge-2", Key: []byte{0x00, 0xfe, 'k'}, Value: bytes.Repeat([]byte{0xab}, 70000),
			Headers: []tributary.Header{{Key: string(bytes.Repeat([]byte("h"), 200)), Value: bytes.Repeat([]byte("v"), 300)}}},
	}
	for i, r := range recs {
		for _, redelivery := range []uint32{0, 1, 300} {
			for _, part := range []int32{0, 5, 1 << 20} {
				for _, bem := range []bool{false, true} {
					d := Delivery{Entry: Entry{Offset: r.Offset, Record: r}, RedeliveryCount: redelivery}
					want := messageFrame(t, 1<<33+uint64(i), part, d, bem)
					got := appendMessage([]byte("prefix"), 1<<33+uint64(i), part, d, bem)
					if !bytes.Equal(got[len("prefix"):], want) {
						t.Fatalf("record %d redelivery %d partition %d bem %v:\n got %x\nwant %x", i, redelivery, part, bem, got[6:], want)
					}
					if _, err := wire.DecodeFrame(got[len("prefix")+4:]); err != nil {
						t.Fatalf("record %d: decode: %v", i, err)
					}
				}
			}
		}
	}
}

// BenchmarkAppendMessage: one 1 KiB row with a key and two headers.
func BenchmarkAppendMessage(b *testing.B) {
	r := &tributary.Record{Offset: 123456, Timestamp: 1700000000123456, Node: "edge-1", Key: []byte("device-17"),
		Value: bytes.Repeat([]byte{1}, 1024), Headers: []tributary.Header{{Key: "i", Value: []byte("17")}, {Key: "empty", Value: []byte{}}}}
	d := Delivery{Entry: Entry{Offset: r.Offset, Record: r}}
	var buf []byte
	b.SetBytes(int64(len(r.Value)))
	for b.Loop() {
		buf = appendMessage(buf[:0], 1, 0, d, true)
	}
}
