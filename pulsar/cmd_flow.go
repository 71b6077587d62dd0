package pulsar

// FLOW: the client grants a consumer more permits (messages it may be
// sent); the subscription dispatches as permits allow. FLOW for an unknown
// consumer id is ignored (the client may race a close), as Pulsar does.

import "github.com/tributary-io/tributary/pulsar/pb"

func (c *conn) handleFlow(cmd *pb.CommandFlow) {
	if k := c.consumer(cmd.GetConsumerId()); k != nil {
		k.sub.Flow(k, cmd.GetMessagePermits())
	}
}
