package pulsar

// GET_LAST_MESSAGE_ID → GET_LAST_MESSAGE_ID_RESPONSE: the id of the last
// committed message of the consumer's partition (entry = committed mark -
// 1; entry -1 when the partition is empty), which readers compare with
// what they received for HasNext.

import (
	"context"

	"github.com/tributary-io/tributary/subscription"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleGetLastMessageID(ctx context.Context, cmd *pb.CommandGetLastMessageId) {
	req := cmd.GetRequestId()
	k := c.consumer(cmd.GetConsumerId())
	if k == nil {
		c.sendError(req, pb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	end, err := subscription.NewTableSource(c.s.r, k.topic.stream, k.partition()).End(ctx)
	if err != nil {
		c.sendError(req, pb.ServerError_PersistenceError, err.Error())
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
		RequestId: proto.Uint64(req), LastMessageId: messageID(end-1, k.partition())}})
}
