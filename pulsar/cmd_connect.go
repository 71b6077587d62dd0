package pulsar

// CONNECT → CONNECTED.
//
// The connection speaks the lower of the client's protocol version and
// ours (v19: everything up to transaction-coordinator connect; v20 adds
// TOPIC_MIGRATED, which this server never sends, so v19 loses nothing).
// Clients that announce supports_broker_entry_metadata get every MESSAGE
// with broker entry metadata whose index is the offset. max_message_size
// is the frame limit. The client authenticates with CONNECT (auth.go); one
// that does not gets ERROR AuthenticationError and is closed, and the
// listener's handshake deadline is met only by an authenticated CONNECT.
// A second CONNECT on a connection closes it.

import (
	"fmt"

	"github.com/tributary-io/tributary/pulsar/wire"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// protocolVersion is the newest protocol version this server speaks.
const protocolVersion = int32(pb.ProtocolVersion_v19)

// serverVersion is announced in CONNECTED.
const serverVersion = "tributary"

func (c *conn) handleConnect(cmd *pb.CommandConnect) error {
	if c.connected {
		return fmt.Errorf("%w: second CONNECT", wire.ErrMalformedFrame)
	}
	c.connected = true
	p, exp, err := c.authenticate(cmd)
	if err != nil {
		return c.refuseConnect(err)
	}
	c.principal = p
	c.authRefresh = cmd.GetAuthMethodName() == "token" && cmd.GetFeatureFlags().GetSupportsAuthRefresh()
	listen.Ready(c.nc) // the handshake deadline is met
	c.version = min(cmd.GetProtocolVersion(), protocolVersion)
	c.brokerEntry.Store(cmd.GetFeatureFlags().GetSupportsBrokerEntryMetadata())
	c.log = c.log.With("client", cmd.GetClientVersion(), "principal", p.String())
	c.expireAt(exp)
	c.log.Debug("pulsar connected", "protocol", c.version, "broker_entry_metadata", c.brokerEntry.Load())
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
		ServerVersion:   proto.String(serverVersion),
		ProtocolVersion: proto.Int32(c.version),
		MaxMessageSize:  proto.Int32(int32(c.s.cfg.MaxFrameBytes)),
	}})
	return nil
}
