package pulsar

// PARTITIONED_METADATA → PARTITIONED_METADATA_RESPONSE.
//
// Every stream is a partitioned topic: partitions = the table's highest
// partition + 1 (at least 1, so a single-partition stream is
// <topic>-partition-0, as its Kafka partition is 0). Clients then
// subscribe to <topic>-partition-N for each N. Asking about a partition
// itself answers 0 (it is not partitioned), as Pulsar does. An unknown
// stream is TopicNotFound (topics are never created here), a bad name
// InvalidTopicName, one the principal may not consume AuthorizationError.
// A principal that may produce there (with Config.Produce) is answered
// as a producer: the partitions count those the write path writes,
// which it may allocate or create first (cmd_producer.go).

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handlePartitionedMetadata(ctx context.Context, cmd *pb.CommandPartitionedTopicMetadata) {
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(cmd.GetRequestId())}
	n, err := c.partitionCount(ctx, cmd.GetTopic())
	if err != nil {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error = errorCode(err).Enum()
		resp.Message = proto.String(err.Error())
	} else {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
		resp.Partitions = proto.Uint32(uint32(n))
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
}

// partitionCount is the partition count of a topic name: 0 for a
// partition of a topic. A stream the principal may not consume is
// AuthorizationError, whether it exists or not.
func (c *conn) partitionCount(ctx context.Context, name string) (int32, error) {
	t, err := c.s.parseTopic(name)
	if err != nil {
		return 0, err
	}
	if c.mayProduce(t.stream) {
		// A producer's lookup: the partitions as the write path has them
		// (it may allocate the stream's cloud partition, or create it).
		parts, err := c.s.cfg.Produce.Partitions(ctx, t.stream)
		if err != nil {
			return 0, err
		}
		n, err := c.s.producePartitionCount(ctx, t.stream, parts)
		switch {
		case err != nil:
			return 0, err
		case t.partition >= n:
			return 0, fmt.Errorf("%w: %s (the topic has %d partitions)", errNoPartition, name, n)
		case t.partition >= 0:
			return 0, nil
		}
		return n, nil
	}
	if err := c.authorize(t.stream, ""); err != nil {
		return 0, err
	}
	if t.partition >= 0 {
		if _, err := c.s.resolve(ctx, name); err != nil {
			return 0, err
		}
		return 0, nil
	}
	return c.s.partitions(ctx, t.stream)
}
