package pulsar

// UNSUBSCRIBE → SUCCESS or ERROR: the consumer leaves and the subscription
// is deleted with its durable cursor. While other consumers are attached
// the subscription stays and the answer is ConsumerBusy (the consumer has
// left all the same, as in Pulsar, where it is then closed by the client).

import (
	"context"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleUnsubscribe(ctx context.Context, cmd *pb.CommandUnsubscribe) {
	req := cmd.GetRequestId()
	k := c.dropConsumer(cmd.GetConsumerId())
	if k == nil {
		c.sendError(req, pb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	k.detach()
	if err := c.s.m.Unsubscribe(ctx, k.full, k.subName); err != nil {
		c.sendError(req, errorCode(err), "unsubscribe "+k.subName+": "+err.Error())
		return
	}
	c.sendSuccess(req)
}
