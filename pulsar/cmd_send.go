package pulsar

// SEND → SEND_RECEIPT or SEND_ERROR.
//
// A SEND of a producer (cmd_producer.go) is one write of the write path
// (Config.Produce): its message, or each message of a batch
// (num_messages_in_batch > 1, SingleMessageMetadata), becomes one record
// of the producer's partition, mapped as the consumer side maps records
// back (cmd_message.go), so a consumer reads back the same bytes:
// payload = value (null_value: none), partition_key = key
// (partition_key_b64_encoded: the base64 decoded; absent or
// null_partition_key: a null key), properties = headers in order,
// event_time = the producer timestamp; the publish time is the accept
// time. The payload may be compressed with LZ4, ZLIB, ZSTD or SNAPPY
// (uncompressed at most MaxFrameBytes); a batch holds at most
// MaxBatchMessages messages. Chunked messages, transactions, markers and
// encrypted producers are refused (NotAllowedError).
//
// The write is named by the producer's name and its sequence ids
// (sequence_id to highest_sequence_id; tributary.Dedup): a resend at or
// below the last stored one lands once and is answered with the original
// message id (ledger 1, entry = the first record's offset; a batch's
// message i is at offset entry+i) — or -1:-1, as Apache Pulsar answers,
// when it is older than the producer's last write. Each write follows
// the producer's previous one (tributary.Write.After), so a write after
// one that failed fails too, and a resend of both cannot lose the first
// to deduplication.
//
// Pipelining: a producer has any number of SENDs in flight (the write
// path bounds what it holds); their receipts and errors go back in SEND
// order. A failed write is SEND_ERROR, which Pulsar clients answer by
// reconnecting and resending everything unacknowledged: PersistenceError
// when the object store or state database failed (tributary.
// ErrUnavailable), ServiceNotReady for back-pressure, NotAllowedError for
// a partition no longer the write path's. A bad payload is SEND_ERROR
// (ChecksumError for a corrupt checksum, conn.go); a SEND of a producer
// the connection does not have (before PRODUCER_SUCCESS, or closed) is
// SEND_ERROR NotAllowedError; nothing is stored for any of them.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/pulsar/wire"
)

// pendingSend is a SEND in flight; answer is set once it is decided.
type pendingSend struct {
	seq, highest uint64
	recs         []*tributary.Record
	answer       *pb.BaseCommand
}

func (c *conn) handleSend(ctx context.Context, f wire.Frame) {
	cmd := f.Cmd.Send
	c.pmu.Lock()
	p := c.producers[cmd.GetProducerId()]
	c.pmu.Unlock()
	if p == nil {
		c.send(sendError(cmd, pb.ServerError_NotAllowedError,
			fmt.Sprintf("producer %d does not exist on this connection (SEND before PRODUCER_SUCCESS, or after CLOSE_PRODUCER)", cmd.GetProducerId())))
		return
	}
	recs, err := c.records(p, f)
	if err != nil {
		c.refuseSend(p, cmd, errorCode(err), err)
		return
	}
	ps := &pendingSend{seq: cmd.GetSequenceId(), highest: max(cmd.GetHighestSequenceId(), cmd.GetSequenceId()), recs: recs}
	if ps.highest > 1<<63-1 {
		c.refuseSend(p, cmd, pb.ServerError_NotAllowedError, fmt.Errorf("%w: sequence id %d", errBadSend, ps.highest))
		return
	}
	w := tributary.WriteTo(p.topic.partition, recs...)
	w.Dedup = &tributary.Dedup{Producer: p.name, First: int64(ps.seq), Last: int64(ps.highest)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		ps.answer = sendError(cmd, pb.ServerError_PersistenceError, "an earlier message of this producer was not stored: reconnect and resend")
		p.pending = append(p.pending, ps)
		c.answerLocked(p)
		return
	}
	if len(p.pending) >= c.s.cfg.MaxPendingSends {
		ps.answer = sendError(cmd, pb.ServerError_ServiceNotReady, fmt.Sprintf("at most %d messages in flight per producer", c.s.cfg.MaxPendingSends))
		p.pending = append(p.pending, ps)
		p.broken = true
		c.answerLocked(p)
		return
	}
	w.After = p.last
	p.pending = append(p.pending, ps)
	// done never runs inside Submit (tributary.Appender), so p.mu may
	// be held across it; it takes p.mu to answer in SEND order.
	t, err := c.s.cfg.Produce.Submit(ctx, w, tributary.Durable, func(err error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		ps.answer = c.sendOutcome(p, cmd, ps, err)
		c.answerLocked(p)
	})
	p.last = t
	if err != nil {
		ps.answer = c.sendOutcome(p, cmd, ps, err)
		c.answerLocked(p)
	}
}

// errBadSend is a SEND this server does not store.
var errBadSend = errors.New("pulsar: SEND refused")

// refuseSend answers a SEND refused before it was written, in order.
func (c *conn) refuseSend(p *producer, cmd *pb.CommandSend, code pb.ServerError, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, &pendingSend{answer: sendError(cmd, code, err.Error())})
	c.answerLocked(p)
}

// answerLocked sends the answers of the producer's decided SENDs from
// the front, so that they go out in SEND order.
func (c *conn) answerLocked(p *producer) {
	i := 0
	for ; i < len(p.pending) && p.pending[i].answer != nil; i++ {
		c.send(p.pending[i].answer)
		p.pending[i] = nil
	}
	p.pending = p.pending[i:]
}

// sendOutcome is the answer to a SEND whose write reported err.
func (c *conn) sendOutcome(p *producer, cmd *pb.CommandSend, ps *pendingSend, err error) *pb.BaseCommand {
	if err != nil {
		p.broken = true
		code := pb.ServerError_PersistenceError
		switch {
		case errors.Is(err, tributary.ErrFenced):
			code = pb.ServerError_NotAllowedError
		case errors.Is(err, tributary.ErrUnknownStream):
			code = pb.ServerError_TopicNotFound
		case errors.Is(err, tributary.ErrBudget):
			code = pb.ServerError_ServiceNotReady
		}
		c.log.Debug("pulsar send failed", "producer", p.name, "topic", p.full, "sequence_id", ps.seq, "err", err)
		return sendError(cmd, code, fmt.Sprintf("message %d of %s not stored: %v", ps.seq, p.name, err))
	}
	id := &pb.MessageIdData{LedgerId: proto.Uint64(ledgerID), EntryId: proto.Uint64(uint64(ps.recs[0].Offset)),
		Partition: proto.Int32(p.topic.partition)}
	if ps.recs[0].Offset < 0 { // a resend older than the producer's last write
		id.LedgerId, id.EntryId = proto.Uint64(^uint64(0)), proto.Uint64(^uint64(0))
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: cmd.ProducerId, SequenceId: cmd.SequenceId, MessageId: id, HighestSequenceId: proto.Uint64(ps.highest)}}
}

func sendError(cmd *pb.CommandSend, code pb.ServerError, msg string) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
		ProducerId: proto.Uint64(cmd.GetProducerId()), SequenceId: proto.Uint64(cmd.GetSequenceId()), Error: code.Enum(), Message: proto.String(msg)}}
}

// records turns a SEND's payload into the records it writes.
func (c *conn) records(p *producer, f wire.Frame) ([]*tributary.Record, error) {
	cmd, md := f.Cmd.Send, f.Metadata
	switch {
	case md == nil:
		return nil, fmt.Errorf("%w: SEND without a payload", errBadSend)
	case cmd.GetIsChunk() || md.GetNumChunksFromMsg() > 1 || md.GetChunkId() > 0:
		return nil, fmt.Errorf("%w: chunked messages are not supported: send messages of at most %d bytes", errBadSend, c.s.cfg.MaxFrameBytes)
	case cmd.GetMarker() || md.MarkerType != nil:
		return nil, fmt.Errorf("%w: marker messages are not supported", errBadSend)
	case cmd.GetTxnidMostBits() != 0 || cmd.GetTxnidLeastBits() != 0:
		return nil, fmt.Errorf("%w: transactions are not supported", errBadSend)
	}
	payload, err := wire.Decompress(md.GetCompression(), f.Payload, md.GetUncompressedSize(), c.s.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	if md.GetCompression() == pb.CompressionType_NONE {
		payload = bytes.Clone(payload) // the frame's buffer is the next frame's
	}
	base := tributary.Record{Stream: p.topic.stream, Partition: p.topic.partition, Topic: p.full, Source: "pulsar",
		ClientID: p.name, Principal: c.principal.Name}
	if md.NumMessagesInBatch == nil {
		r := base
		if err := fill(&r, md.GetPartitionKey(), md.PartitionKey != nil && !md.GetNullPartitionKey(), md.GetPartitionKeyB64Encoded(),
			md.GetProperties(), md.GetEventTime(), payload, md.GetNullValue()); err != nil {
			return nil, err
		}
		return []*tributary.Record{&r}, nil
	}
	n := int(md.GetNumMessagesInBatch())
	if cmd.NumMessages != nil && int(cmd.GetNumMessages()) != n {
		return nil, fmt.Errorf("%w: SEND of %d messages with a batch of %d", wire.ErrBadPayload, cmd.GetNumMessages(), n)
	}
	msgs, err := wire.SplitBatch(payload, n, c.s.cfg.MaxBatchMessages)
	if err != nil {
		return nil, err
	}
	out := make([]*tributary.Record, len(msgs))
	for i, m := range msgs {
		r := base
		sm := m.Metadata
		if err := fill(&r, sm.GetPartitionKey(), sm.PartitionKey != nil && !sm.GetNullPartitionKey(), sm.GetPartitionKeyB64Encoded(),
			sm.GetProperties(), sm.GetEventTime(), m.Payload, sm.GetNullValue()); err != nil {
			return nil, fmt.Errorf("message %d of the batch: %w", i, err)
		}
		out[i] = &r
	}
	return out, nil
}

// fill sets a record's key, headers, producer timestamp and value from a
// message's metadata (the inverse of appendMessageTail).
func fill(r *tributary.Record, key string, hasKey, b64 bool, props []*pb.KeyValue, event uint64, value []byte, null bool) error {
	if hasKey {
		r.Key = []byte(key)
		if b64 {
			k, err := base64.StdEncoding.DecodeString(key)
			if err != nil {
				return fmt.Errorf("%w: partition key is not base64: %v", wire.ErrBadPayload, err)
			}
			r.Key = k
		}
		if r.Key == nil {
			r.Key = []byte{}
		}
	}
	if len(props) > 0 {
		r.Headers = make([]tributary.Header, len(props))
		for i, kv := range props {
			r.Headers[i] = tributary.Header{Key: kv.GetKey(), Value: []byte(kv.GetValue())}
		}
	}
	if event <= 1<<62 {
		r.ProducerTimestamp = int64(event)
	}
	if !null {
		r.Value = value
	}
	return nil
}

// refuseCorrupt answers a SEND whose payload checksum is wrong with
// SEND_ERROR ChecksumError, in the producer's order.
func (c *conn) refuseCorrupt(cmd *pb.CommandSend, err error) {
	c.pmu.Lock()
	p := c.producers[cmd.GetProducerId()]
	c.pmu.Unlock()
	if p == nil {
		c.send(sendError(cmd, pb.ServerError_ChecksumError, err.Error()))
		return
	}
	c.refuseSend(p, cmd, pb.ServerError_ChecksumError, err)
}
