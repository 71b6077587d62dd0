package pulsar

// SEEK → SUCCESS or ERROR: reset the subscription's cursor to a message
// id (the next message delivered is that one; the earliest and latest ids
// mean the start and the end of the partition) or to a publish time (ms:
// the first message published at or after it).
//
// As Pulsar does, the consumer is then closed from the server side
// (CLOSE_CONSUMER, queued before SUCCESS): clients clear their receive
// queue on SUCCESS and reconnect the consumer, which subscribes again and
// is dispatched from the new position with fresh permits.

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleSeek(ctx context.Context, cmd *pb.CommandSeek) {
	req := cmd.GetRequestId()
	k := c.consumer(cmd.GetConsumerId())
	if k == nil {
		c.sendError(req, pb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	var err error
	switch id := cmd.GetMessageId(); {
	case cmd.MessagePublishTime != nil:
		err = k.sub.SeekTime(ctx, time.UnixMilli(int64(cmd.GetMessagePublishTime())))
	case id == nil:
		c.sendError(req, pb.ServerError_MetadataError, "seek needs a message id or a publish time")
		return
	case id.GetLedgerId() == earliestID:
		err = k.sub.Seek(ctx, 0)
	case id.GetLedgerId() == latestID:
		var end int64
		if end, err = newSource(c.s.r, k.topic.stream, k.partition()).End(ctx); err == nil {
			err = k.sub.Seek(ctx, end)
		}
	default:
		off, ok := offsetOf(id)
		if !ok {
			c.sendError(req, pb.ServerError_MetadataError, "seek to a message id this server never handed out")
			return
		}
		err = k.sub.Seek(ctx, off)
	}
	if err != nil {
		c.sendError(req, errorCode(err), "seek: "+err.Error())
		return
	}
	if c.dropConsumer(k.id) != nil {
		k.detach()
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(k.id), RequestId: proto.Uint64(0)}})
	}
	c.sendSuccess(req)
}
