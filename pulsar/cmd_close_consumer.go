package pulsar

// CLOSE_CONSUMER → SUCCESS: the consumer leaves its subscription; its
// unacknowledged messages go back for redelivery to the others (or to
// whoever subscribes next). Closing an unknown consumer id succeeds.

import "github.com/tributary-io/tributary/pulsar/pb"

func (c *conn) handleCloseConsumer(cmd *pb.CommandCloseConsumer) {
	if k := c.dropConsumer(cmd.GetConsumerId()); k != nil {
		k.detach()
	}
	c.sendSuccess(cmd.GetRequestId())
}
