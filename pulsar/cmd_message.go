package pulsar

// MESSAGE (server to client): one row as one non-batched message.
//
//   - message id: ledger 1, entry = offset, partition = partition;
//     redelivery_count from the subscription.
//   - MessageMetadata: producer_name = the edge node that accepted the row,
//     sequence_id = offset, publish_time = the row's timestamp (ms),
//     partition_key = the Kafka key (absent for a null key: MQTT),
//     event_time = the Kafka producer timestamp if any, properties = the
//     headers (Kafka headers / MQTT 5 user properties) in order; no
//     compression, no batch (num_messages_in_batch absent).
//   - payload: the value, byte-exact.
//   - broker entry metadata (0x0e02), when the client supports it:
//     index = offset, broker_timestamp = publish time.

import (
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

// appendMessage appends the MESSAGE frame of d for consumer id.
func appendMessage(b []byte, id uint64, partition int32, d Delivery, brokerEntry bool) ([]byte, error) {
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
	if len(r.Headers) > 0 {
		md.Properties = make([]*pb.KeyValue, len(r.Headers))
		for i, h := range r.Headers {
			md.Properties[i] = &pb.KeyValue{Key: proto.String(h.Key), Value: proto.String(string(h.Value))}
		}
	}
	var bem *pb.BrokerEntryMetadata
	if brokerEntry {
		bem = &pb.BrokerEntryMetadata{Index: proto.Uint64(uint64(d.Offset)), BrokerTimestamp: &publish}
	}
	return appendPayloadCommand(b, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: msg}, bem, md, r.Value)
}
