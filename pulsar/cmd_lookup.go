package pulsar

// LOOKUP → LOOKUP_RESPONSE.
//
// Any cloud server can read any partition, but a subscription must be
// dispatched by one server: the answer names the owner of the topic
// partition (a rendezvous hash over Config.Peers, this server when alone)
// as pulsar://host:port (brokerServiceUrl) or, when the listener serves
// TLS, as pulsar+ssl://host:port (brokerServiceUrlTls, the field clients
// on pulsar+ssl:// read), response Connect, authoritative, so clients
// connect straight to it. Every cloud server is assumed to serve TLS
// alike. Unknown topics are TopicNotFound, bad names InvalidTopicName,
// streams the principal may not consume AuthorizationError.

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleLookup(ctx context.Context, cmd *pb.CommandLookupTopic) {
	resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	if _, err := c.partitionCount(ctx, cmd.GetTopic()); err != nil {
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = errorCode(err).Enum()
		resp.Message = proto.String(err.Error())
	} else {
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		if owner := c.s.owner(cmd.GetTopic()); c.s.cfg.Limits.TLS != nil {
			resp.BrokerServiceUrlTls = proto.String("pulsar+ssl://" + owner)
		} else {
			resp.BrokerServiceUrl = proto.String("pulsar://" + owner)
		}
		resp.Authoritative = proto.Bool(true)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
}
