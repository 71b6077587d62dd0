package pulsar

// PRODUCER → ERROR NotAllowedError.
//
// The cloud server only reads: messages enter Tributary at the edge (MQTT
// or Kafka), where the WAL assigns their offsets. The error says so.

import (
	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleProducer(cmd *pb.CommandProducer) {
	c.sendError(cmd.GetRequestId(), pb.ServerError_NotAllowedError,
		"topic "+cmd.GetTopic()+" is read-only here: Tributary's Pulsar server serves consumers; produce at an edge node over MQTT or Kafka")
}
