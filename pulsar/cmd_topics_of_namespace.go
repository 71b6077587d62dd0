package pulsar

// GET_TOPICS_OF_NAMESPACE → GET_TOPICS_OF_NAMESPACE_RESPONSE (for
// pattern consumers).
//
// The namespace is <catalog>/<namespace>; the answer lists every partition
// topic (…-partition-N) of every stream of that namespace, as Pulsar lists
// a partitioned topic's partitions. The pattern is left to the client
// (filtered = false). Streams the principal may not consume are left out.
// NON_PERSISTENT mode lists nothing.

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleTopicsOfNamespace(ctx context.Context, cmd *pb.CommandGetTopicsOfNamespace) {
	resp := &pb.CommandGetTopicsOfNamespaceResponse{RequestId: proto.Uint64(cmd.GetRequestId()), Topics: []string{}}
	tenant, ns, ok := strings.Cut(cmd.GetNamespace(), "/")
	if !ok || tenant != c.s.cfg.Catalog || ns == "" || strings.Contains(ns, "/") {
		c.sendError(cmd.GetRequestId(), pb.ServerError_MetadataError, "namespace "+cmd.GetNamespace()+" is not <catalog>/<namespace> of catalog "+c.s.cfg.Catalog)
		return
	}
	if cmd.GetMode() != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		streams, err := c.s.r.ListStreams(ctx)
		if err != nil {
			c.sendError(cmd.GetRequestId(), pb.ServerError_MetadataError, err.Error())
			return
		}
		for _, st := range streams {
			if !strings.HasPrefix(st, ns+".") || !c.mayConsume(st) {
				continue
			}
			n, err := c.s.partitions(ctx, st)
			if err != nil {
				continue // dropped since listed
			}
			for p := range n {
				resp.Topics = append(resp.Topics, topicName{stream: st, partition: p}.String(c.s.cfg.Catalog))
			}
		}
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: resp})
}
