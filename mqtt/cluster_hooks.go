package mqtt

import (
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// clusterHook connects mochi to the cluster namespace (see cluster.go):
// it follows local subscriptions and routes accepted publishes.
//
// What mochi v2.7.9 calls, verified in its server.go: OnSubscribed after
// a SUBSCRIBE updated the client's Subscriptions; OnUnsubscribed after an
// UNSUBSCRIBE, and from UnsubscribeClient when a clean session ends
// (disconnect with expiry, or a clean takeover of the id) — but not for a
// persistent session's takeover, which moves the subscriptions to the new
// connection of the same id without a hook; OnClientExpired when a
// persistent session expires (its subscriptions stay in mochi's topic tree
// without a client, so they receive nothing). The hook therefore re-reads
// the client's whole subscription set on each event, keyed by client id.
type clusterHook struct {
	mochi.HookBase
	s *Server
}

func (h *clusterHook) ID() string { return "tributary-cluster" }

func (h *clusterHook) Provides(b byte) bool {
	switch b {
	case mochi.OnSubscribed, mochi.OnUnsubscribed, mochi.OnClientExpired, mochi.OnPublish, mochi.OnSelectSubscribers,
		mochi.OnWillSent:
		return true
	}
	return false
}

func (h *clusterHook) follow(cl *mochi.Client) {
	if cl.Net.Inline {
		return // the node's own inline subscriptions are not cluster interest
	}
	subs := cl.State.Subscriptions.GetAll()
	filters := make([]string, 0, len(subs))
	for f := range subs {
		filters = append(filters, f)
	}
	h.s.interest.setClient(cl.ID, filters)
}

func (h *clusterHook) OnSubscribed(cl *mochi.Client, pk packets.Packet, reasonCodes []byte) {
	h.follow(cl)
}

func (h *clusterHook) OnUnsubscribed(cl *mochi.Client, pk packets.Packet) { h.follow(cl) }

func (h *clusterHook) OnClientExpired(cl *mochi.Client) {
	if !cl.Net.Inline {
		h.s.interest.setClient(cl.ID, nil)
	}
}

// OnPublish runs after the WAL hook accepted a network client's publish
// (hooks run in the order added and stop at a refusal) and before mochi
// retains and delivers it: it queues the publish for the peers that need it
// and marks the packet with the shared groups delivered here. Inline
// publishes (forwarded ones among them) are never forwarded.
func (h *clusterHook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	c := h.s.cluster.Load()
	if c == nil || cl.Net.Inline || pk.Ignore { // Ignore: held by the pipeline, routed once durable
		return pk, nil
	}
	return c.route(pk), nil
}

// OnSelectSubscribers drops the shared groups that the cluster routed to
// another node (mochi calls it only when local shared groups match, before
// picking one subscriber per group).
func (h *clusterHook) OnSelectSubscribers(subs *mochi.Subscribers, pk packets.Packet) *mochi.Subscribers {
	keep, routed := routedGroups(pk)
	if !routed {
		return subs
	}
	for g := range subs.Shared {
		if !keep[g] {
			delete(subs.Shared, g)
		}
	}
	return subs
}

// OnWillSent forwards a will message after mochi delivered (and, if
// flagged, retained) it locally; mochi calls it for immediate and delayed
// wills (server.go sendLWT, sendDelayedLWT).
func (h *clusterHook) OnWillSent(cl *mochi.Client, pk packets.Packet) {
	if c := h.s.cluster.Load(); c != nil && !cl.Net.Inline {
		c.routeWill(pk)
	}
}
