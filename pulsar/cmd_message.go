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
//
// This is the one frame per message, so it is encoded by hand with
// protowire; cmd_message_test.go checks the bytes against protobuf's own
// (deterministic) encoding of the same messages.

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/tributary-io/tributary/pulsar/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// Field numbers of the messages appendMessage writes (PulsarApi.proto).
const (
	fBaseType, fBaseMessage                  = 1, 9
	fMsgConsumerID, fMsgID, fMsgRedelivery   = 1, 2, 3
	fIDLedger, fIDEntry, fIDPartition        = 1, 2, 3
	fMDProducer, fMDSequence, fMDPublish     = 1, 2, 3
	fMDProperties, fMDPartitionKey, fMDEvent = 4, 6, 12
	fKVKey, fKVValue                         = 1, 2
	fBEMBrokerTimestamp, fBEMIndex           = 1, 2
	varint                                   = protowire.VarintType
	bytesType                                = protowire.BytesType
	messageType                              = uint64(pb.BaseCommand_MESSAGE)
)

func sizeVarintField(num protowire.Number, v uint64) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, varint), v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, bytesType), v)
}

// appendMessage appends the MESSAGE frame of d for consumer id.
func appendMessage(b []byte, id uint64, partition int32, d Delivery, brokerEntry bool) []byte {
	start := len(b)
	b = appendMessageHead(b, id, partition, d, brokerEntry)
	b = appendMessageTail(b, d.Record, d.Offset)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// appendCachedMessage is appendMessage with the tail (appendMessageTail
// of the same record and offset) already encoded.
func appendCachedMessage(b []byte, id uint64, partition int32, d Delivery, brokerEntry bool, tail []byte) []byte {
	start := len(b)
	b = appendMessageHead(b, id, partition, d, brokerEntry)
	b = append(b, tail...)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// publishTime is the message's publish time, ms.
func publishTime(r *tributary.Record) uint64 { return uint64(max(r.Timestamp, 0) / 1000) }

// appendMessageHead appends the frame's parts that depend on the
// consumer and the delivery: the size (a placeholder the caller sets),
// the command and the broker entry metadata.
func appendMessageHead(b []byte, id uint64, partition int32, d Delivery, brokerEntry bool) []byte {
	off := uint64(d.Offset)
	part := uint64(int64(partition)) // int32 fields are sign-extended varints
	idSize := sizeVarintField(fIDLedger, ledgerID) + sizeVarintField(fIDEntry, off) + sizeVarintField(fIDPartition, part)
	msgSize := sizeVarintField(fMsgConsumerID, id) + protowire.SizeTag(fMsgID) + protowire.SizeBytes(idSize)
	if d.RedeliveryCount > 0 {
		msgSize += sizeVarintField(fMsgRedelivery, uint64(d.RedeliveryCount))
	}
	cmdSize := sizeVarintField(fBaseType, messageType) + protowire.SizeTag(fBaseMessage) + protowire.SizeBytes(msgSize)

	b = append(b, 0, 0, 0, 0) // total size, set by the caller
	b = binary.BigEndian.AppendUint32(b, uint32(cmdSize))
	b = appendVarintField(b, fBaseType, messageType)
	b = protowire.AppendVarint(protowire.AppendTag(b, fBaseMessage, bytesType), uint64(msgSize))
	b = appendVarintField(b, fMsgConsumerID, id)
	b = protowire.AppendVarint(protowire.AppendTag(b, fMsgID, bytesType), uint64(idSize))
	b = appendVarintField(b, fIDLedger, ledgerID)
	b = appendVarintField(b, fIDEntry, off)
	b = appendVarintField(b, fIDPartition, part)
	if d.RedeliveryCount > 0 {
		b = appendVarintField(b, fMsgRedelivery, uint64(d.RedeliveryCount))
	}
	if brokerEntry {
		publish := publishTime(d.Record)
		b = binary.BigEndian.AppendUint16(b, wire.MagicBrokerEntry)
		b = binary.BigEndian.AppendUint32(b, uint32(sizeVarintField(fBEMBrokerTimestamp, publish)+sizeVarintField(fBEMIndex, off)))
		b = appendVarintField(b, fBEMBrokerTimestamp, publish)
		b = appendVarintField(b, fBEMIndex, off)
	}
	return b
}

// appendMessageTail appends the frame's parts that depend on the record
// alone: the checksum magic and checksum, the metadata and the payload.
// These are what the message cache keeps (msgcache.go).
func appendMessageTail(b []byte, r *tributary.Record, offset int64) []byte {
	off := uint64(offset)
	publish := publishTime(r)
	producer := r.Node
	if producer == "" {
		producer = serverVersion
	}
	b = binary.BigEndian.AppendUint16(b, wire.MagicCRC)
	crcAt := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // checksum, metadata size
	mdAt := len(b)
	b = protowire.AppendString(protowire.AppendTag(b, fMDProducer, bytesType), producer)
	b = appendVarintField(b, fMDSequence, off)
	b = appendVarintField(b, fMDPublish, publish)
	for _, h := range r.Headers {
		kv := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(h.Key)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(len(h.Value))
		b = protowire.AppendVarint(protowire.AppendTag(b, fMDProperties, bytesType), uint64(kv))
		b = protowire.AppendString(protowire.AppendTag(b, fKVKey, bytesType), h.Key)
		b = appendBytesField(b, fKVValue, h.Value)
	}
	if r.Key != nil {
		b = appendBytesField(b, fMDPartitionKey, r.Key)
	}
	if r.ProducerTimestamp > 0 {
		b = appendVarintField(b, fMDEvent, uint64(r.ProducerTimestamp))
	}
	binary.BigEndian.PutUint32(b[crcAt+4:], uint32(len(b)-mdAt))
	b = append(b, r.Value...)
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[crcAt+4:], wire.Castagnoli))
	return b
}
