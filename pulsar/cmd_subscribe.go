package pulsar

// SUBSCRIBE → SUCCESS or ERROR.
//
// The topic must be a partition topic of an existing stream (or the topic
// of a single-partition stream): unknown streams are TopicNotFound (topics
// are never created), bad names InvalidTopicName. All four subscription
// types; durable subscriptions keep their cursor in the cursor store,
// non-durable ones (readers) in memory. A reader's start_message_id is
// the offset it starts at, inclusive (the client drops the start message
// itself unless it asked for it inclusive); the earliest/latest ids and
// the initial position map to Earliest/Latest; a start rollback duration
// starts a reader at the first offset published that long ago. Key_Shared
// in AUTO_SPLIT mode (the default) or STICKY with the client's ranges is
// up to the subscription. The subscription's errors map to ServerError
// codes (ConsumerBusy for a second Exclusive consumer or a type mismatch).
// A consumer id already in use on the connection is ConsumerBusy. The
// principal needs Consume on the stream, the subscription name as its
// group (AuthorizationError otherwise).

import (
	"context"
	"fmt"
	"time"

	"github.com/tributary-io/tributary/subscription"

	"github.com/tributary-io/tributary/pulsar/pb"
)

func (c *conn) handleSubscribe(ctx context.Context, cmd *pb.CommandSubscribe) {
	req := cmd.GetRequestId()
	if c.consumer(cmd.GetConsumerId()) != nil {
		c.sendError(req, pb.ServerError_ConsumerBusy, fmt.Sprintf("consumer id %d is already in use on this connection", cmd.GetConsumerId()))
		return
	}
	c.cmu.Lock()
	n := len(c.consumers)
	c.cmu.Unlock()
	if n >= c.s.cfg.MaxConsumersPerConn {
		c.sendError(req, pb.ServerError_TooManyRequests, fmt.Sprintf("at most %d consumers on one connection", c.s.cfg.MaxConsumersPerConn))
		return
	}
	t, err := c.s.resolve(ctx, cmd.GetTopic())
	if err != nil {
		c.sendError(req, errorCode(err), err.Error())
		return
	}
	if cmd.GetSubscription() == "" {
		c.sendError(req, pb.ServerError_InvalidTopicName, "empty subscription name")
		return
	}
	if err := c.authorize(t.stream, cmd.GetSubscription()); err != nil {
		c.sendError(req, errorCode(err), fmt.Sprintf("subscribe %s to %s: %v", cmd.GetSubscription(), cmd.GetTopic(), err))
		return
	}
	src := subscription.NewTableSource(c.s.r, t.stream, t.partition)
	o := SubscribeOptions{
		Topic:                      t.String(c.s.cfg.Catalog),
		Subscription:               cmd.GetSubscription(),
		Type:                       SubType(cmd.GetSubType()),
		Durable:                    cmd.GetDurable(),
		Initial:                    InitialPosition(cmd.GetInitialPosition()),
		KeySharedAutoSplit:         cmd.GetKeySharedMeta().GetKeySharedMode() == pb.KeySharedMode_AUTO_SPLIT,
		ReplicateSubscriptionState: cmd.GetReplicateSubscriptionState(),
		ReadCompacted:              cmd.GetReadCompacted(),
	}
	if !o.Durable {
		if d := cmd.GetStartMessageRollbackDurationSec(); d > 0 {
			off, err := src.OffsetForTime(ctx, time.Now().Add(-time.Duration(d)*time.Second))
			if err != nil {
				c.sendError(req, pb.ServerError_PersistenceError, err.Error())
				return
			}
			o.StartOffset = &off
		} else if id := cmd.GetStartMessageId(); id != nil {
			switch {
			case id.GetLedgerId() == earliestID:
				o.Initial = Earliest
			case id.GetLedgerId() == latestID:
				o.Initial = Latest
			default:
				if off, ok := offsetOf(id); ok {
					o.StartOffset = &off
				}
			}
		}
	}
	k := &consumer{c: c, id: cmd.GetConsumerId(), name: cmd.GetConsumerName(), priority: cmd.GetPriorityLevel(),
		topic: t, full: o.Topic, subName: o.Subscription}
	if k.name == "" {
		k.name = fmt.Sprintf("%s-%d", c.nc.RemoteAddr(), k.id)
	}
	sub, err := c.s.m.Subscribe(ctx, src, o, k)
	if err != nil {
		c.sendError(req, errorCode(err), fmt.Sprintf("subscribe %s to %s: %v", o.Subscription, o.Topic, err))
		return
	}
	k.sub = sub
	c.cmu.Lock()
	c.consumers[k.id] = k
	c.cmu.Unlock()
	c.log.Debug("pulsar subscribed", "topic", o.Topic, "subscription", o.Subscription, "type", o.Type, "consumer", k.name)
	c.sendSuccess(req)
}
