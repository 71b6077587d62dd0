package pulsar

// ACK: individual (any number of message ids) or cumulative (one id:
// everything up to it) acknowledgement, persisted in the subscription's
// cursor. Ids this server never handed out are ignored. When the client
// asks for a receipt (request_id set, protocol v17+), ACK_RESPONSE carries
// the outcome; otherwise a failed ack is only logged, as Pulsar does
// (e.g. a cumulative ack on a Shared subscription, NotAllowedError).

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleAck(ctx context.Context, cmd *pb.CommandAck) {
	k := c.consumer(cmd.GetConsumerId())
	var err error
	var code pb.ServerError
	if k == nil {
		code = pb.ServerError_ConsumerNotFound
	} else {
		offsets := offsetsOf(cmd.GetMessageId())
		cumulative := cmd.GetAckType() == pb.CommandAck_Cumulative
		if len(offsets) > 0 {
			err = k.sub.Ack(ctx, k, offsets, cumulative)
		}
		if err != nil {
			code = errorCode(err)
			c.log.Debug("pulsar ack", "topic", k.full, "subscription", k.subName, "err", err)
		}
	}
	if cmd.RequestId == nil {
		return
	}
	resp := &pb.CommandAckResponse{ConsumerId: proto.Uint64(cmd.GetConsumerId()), RequestId: proto.Uint64(cmd.GetRequestId())}
	if k == nil || err != nil {
		resp.Error = code.Enum()
		if err != nil {
			resp.Message = proto.String(err.Error())
		} else {
			resp.Message = proto.String("no such consumer")
		}
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: resp})
}
