package pulsar

// REDELIVER_UNACKNOWLEDGED_MESSAGES: the client's negative acks and ack
// timeouts. With message ids, those of the consumer's unacknowledged
// messages are redelivered (to any consumer of a Shared subscription);
// without, all of them. Redelivered messages carry an incremented
// redelivery_count.

import "github.com/tributary-io/tributary/pulsar/pb"

func (c *conn) handleRedeliver(cmd *pb.CommandRedeliverUnacknowledgedMessages) {
	k := c.consumer(cmd.GetConsumerId())
	if k == nil {
		return
	}
	var offsets []int64
	if len(cmd.GetMessageIds()) > 0 {
		if offsets = offsetsOf(cmd.GetMessageIds()); len(offsets) == 0 {
			return
		}
	}
	k.sub.Redeliver(k, offsets)
}
