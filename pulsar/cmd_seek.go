package pulsar

// SEEK → SUCCESS or ERROR: reset the subscription's cursor to a message
// id (the next message delivered is that one; the earliest and latest ids
// mean the start and the end of the partition) or to a publish time (ms:
// the first message published at or after it).
//
// As Pulsar does, every consumer of the subscription is then closed from
// the server side (CLOSE_CONSUMER; the seeking one's queued before SUCCESS):
// clients clear their receive queue and reconnect the consumer, which
// subscribes again and is dispatched from the new position with fresh
// permits. Closing only the seeking consumer would leave the others of a
// Shared subscription holding messages from before the seek.

import (
	"context"
	"time"

	"github.com/tributary-io/tributary/subscription"

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
		if end, err = subscription.NewTableSource(c.s.r, k.topic.stream, k.partition()).End(ctx); err == nil {
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
	sub := k.sub
	k.closeFromServer()
	for _, o := range sub.Consumers() {
		if kk, ok := o.(*consumer); ok && kk != k {
			kk.closeFromServer()
		}
	}
	c.sendSuccess(req)
}
