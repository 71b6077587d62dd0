package mqtt

// One MQTT namespace across the nodes of a cluster.
//
// Invariants:
//
//   - Forward after accept. A publish from a network client is forwarded
//     only from OnPublish after the WAL hook accepted it (QoS 1/2: fsynced;
//     QoS 0: queued), and at most once per peer node per accepted publish
//     (re-sends after a broken link carry the same sequence number and the
//     receiver skips what it already delivered in this run of both nodes).
//   - Never twice through the cluster. A node delivers a forwarded publish
//     to its local sessions only: it is injected through an inline client,
//     which the WAL hook does not log and this hook does not forward.
//   - Order. Publishes to one peer leave in the order their OnPublish calls
//     ran (one connection's publishes are sequential there), over one link
//     whose handler delivers them in arrival order: per publisher, a remote
//     subscriber sees the order the publisher sent.
//   - One delivery per shared group. For every "$share/g/f" group matching
//     a publish anywhere in the cluster, the origin node picks one node
//     (weighted round robin over the group's subscriber counts per node)
//     and only that node's mochi delivers to the group: the choice rides
//     with the packet (Packet.Filters, see routeMarker) into
//     OnSelectSubscribers, which drops every other group, on the origin and
//     on the receiver alike.
//   - Retained messages go to every live peer, whatever its interest; a node
//     that a peer has not heard from (new, or restarted: a new epoch) gets
//     the peer's retained set to fill in the topics it lacks.
//
// Outline: localInterest follows this node's subscriptions from mochi's
// hooks (OnSubscribed, OnUnsubscribed — also called for a clean session's
// disconnect and takeover — and OnClientExpired). StartCluster registers
// the peer handlers and starts a loop that follows membership (Peers,
// polled); each live peer gets a clusterLink with two goroutines: push
// sends our interest (full on first contact and when the peer asks for it,
// else a delta since the version it acknowledged, woken on every change and
// on an anti-entropy tick), send drains the peer's forward queue in
// batches over peer Call, re-sending a batch until it is acknowledged.
// remoteInterest indexes what peers told us in a mochi topic tree, so
// matching is mochi's own. Will messages bypass OnPublish: OnWillSent
// forwards them after mochi delivered them here (routeWill).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// PeerLink is a long-lived, ordered request/reply link to one peer node
// (package peer's *Link): calls are handled by the remote in the order they
// were entered.
type PeerLink interface {
	Call(ctx context.Context, typ uint8, payload []byte) ([]byte, error)
}

// ClusterPeer is a live peer node and the address of its peer listener.
type ClusterPeer struct {
	ID, Addr string
}

// ClusterTransport is how a Server reaches the other nodes: the peer links
// (package peer) and the live membership (package cluster), adapted by the
// node.
type ClusterTransport interface {
	// Handle registers a handler for a peer message type (package peer's
	// Peer.Handle); handlers of one link run in arrival order.
	Handle(typ uint8, h func(from string, payload []byte, reply func(resp []byte, err error)))
	// Link returns the link to a peer (package peer's Peer.Link).
	Link(id, addr string) PeerLink
	// Peers lists the live peers (alive or suspect, this node excluded).
	Peers() []ClusterPeer
}

// ClusterConfig tunes a Server's part of the cluster-wide namespace.
type ClusterConfig struct {
	// PeersInterval is how often Peers is polled; default 250ms.
	PeersInterval time.Duration
	// AntiEntropy is how often each peer's copy of our interest is checked
	// (a version compare; the full set only when it differs); default 5s.
	AntiEntropy time.Duration
	// QueueLimit and QueueBytes bound the publishes queued for one peer
	// (beyond either they are dropped for that peer and counted); default
	// 100,000 publishes and 64 MiB.
	QueueLimit int
	QueueBytes int
}

// Limits of the retained catch-up a node sends a peer that is new or
// restarted: at most this many messages and bytes, in chunks.
const (
	RetainedSyncMaxMessages = 100_000
	RetainedSyncMaxBytes    = 64 << 20
	retainedChunkBytes      = 256 << 10
	maxBatchMsgs            = 512
	maxBatchBytes           = 1 << 20
	callTimeout             = 10 * time.Second
)

// routeMarker, as the first of a publish packet's Filters (unused by
// mochi for publishes, copied with the packet), says that the cluster has
// routed it: the following filters are the shared groups this node
// delivers it to, and OnSelectSubscribers drops every other group.
const routeMarker = "\x00tributary-route"

// clusterNode is the running namespace of one Server.
type clusterNode struct {
	s      *Server
	tr     ClusterTransport
	cfg    ClusterConfig
	epoch  uint64
	remote *remoteInterest
	bal    *balancer
	inline *mochi.Client

	links atomic.Pointer[map[string]*clusterLink] // live peers, replaced by refresh

	refreshMu sync.Mutex // one refreshPeers at a time

	mu   sync.Mutex
	seqs map[string]uint64    // peer -> next forward sequence number (this run)
	recv map[string]recvState // origin -> forwards delivered from it

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	forwardedIn, forwardedOut, dropped, retainedIn atomic.Uint64
	logLimit                                       rateLimiter
}

type recvState struct{ epoch, next uint64 }

var errShuttingDown = errors.New("mqtt cluster: shutting down")

// StartCluster joins the server to the cluster namespace. Call it once,
// after Start, before peer traffic arrives.
func (s *Server) StartCluster(tr ClusterTransport, cfg ClusterConfig) error {
	if tr == nil {
		return fmt.Errorf("cluster: a transport is required: %w", ErrConfig)
	}
	if cfg.PeersInterval <= 0 {
		cfg.PeersInterval = 250 * time.Millisecond
	}
	if cfg.AntiEntropy <= 0 {
		cfg.AntiEntropy = 5 * time.Second
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 100_000
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 64 << 20
	}
	c := &clusterNode{s: s, tr: tr, cfg: cfg, epoch: rand.Uint64() | 1, remote: newRemoteInterest(),
		bal: newBalancer(s.cfg.NodeID), seqs: map[string]uint64{}, recv: map[string]recvState{}}
	c.inline = s.broker.NewClient(nil, mochi.LocalListener, "tributary-cluster", true)
	c.inline.Properties.ProtocolVersion = 5 // keep MQTT 5 properties and expiry
	empty := map[string]*clusterLink{}
	c.links.Store(&empty)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !s.cluster.CompareAndSwap(nil, c) {
		c.cancel()
		return errors.New("mqtt: cluster already started")
	}
	tr.Handle(msgInterest, c.handleInterest)
	tr.Handle(msgForward, c.handleForward)
	tr.Handle(msgRetained, c.handleRetained)
	c.wg.Add(1)
	go c.peersLoop()
	s.log.Info("mqtt cluster namespace started", "epoch", fmt.Sprintf("%016x", c.epoch))
	return nil
}

// StopCluster stops the namespace's loops (queued forwards are dropped);
// Close calls it too. Call it before closing the peer links.
func (s *Server) StopCluster() {
	c := s.cluster.Load()
	if c == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
	for _, l := range *c.links.Load() {
		l.stop()
		c.dropped.Add(uint64(l.discard()))
	}
}

// ClusterStats are the namespace's counters (zero without a cluster).
type ClusterStats struct {
	ForwardedOut        uint64 // publishes acknowledged by a peer (one per peer)
	ForwardedIn         uint64 // publishes from peers delivered locally
	ForwardDropped      uint64 // publishes not forwarded: queue full or peer gone
	RetainedIn          uint64 // retained messages filled in from peers' catch-up
	RemoteSubscriptions int    // subscriptions on peers (sum of their counts)
	Peers               int    // live peers
}

// ClusterStats returns the namespace's counters.
func (s *Server) ClusterStats() ClusterStats {
	c := s.cluster.Load()
	if c == nil {
		return ClusterStats{}
	}
	return ClusterStats{ForwardedOut: c.forwardedOut.Load(), ForwardedIn: c.forwardedIn.Load(),
		ForwardDropped: c.dropped.Load(), RetainedIn: c.retainedIn.Load(),
		RemoteSubscriptions: c.remote.count(), Peers: len(*c.links.Load())}
}

// peersLoop follows membership: a link for every live peer, none for the
// others (their interest is dropped and their queue discarded).
func (c *clusterNode) peersLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.PeersInterval)
	defer t.Stop()
	for {
		c.refreshPeers()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *clusterNode) refreshPeers() {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	cur := *c.links.Load()
	want := map[string]string{}
	for _, p := range c.tr.Peers() {
		if p.ID != "" && p.ID != c.s.cfg.NodeID && p.Addr != "" {
			want[p.ID] = p.Addr
		}
	}
	// Interest from nodes that are not live peers (never linked, or told
	// us before membership said they were gone) is never routed to; drop it.
	c.remote.keepOnly(func(id string) bool { _, ok := want[id]; return ok })
	same := len(want) == len(cur)
	for id, addr := range want {
		if l := cur[id]; l == nil || l.addr != addr {
			same = false
		}
	}
	if same {
		return
	}
	next := make(map[string]*clusterLink, len(want))
	var gone []*clusterLink
	for id, l := range cur {
		if addr, ok := want[id]; ok && addr == l.addr {
			next[id] = l
		} else {
			gone = append(gone, l)
		}
	}
	for id, addr := range want {
		if next[id] == nil {
			l := newClusterLink(c, id, addr)
			next[id] = l
			c.s.log.Info("mqtt cluster: peer linked", "peer", id, "addr", addr)
		}
	}
	c.links.Store(&next)
	for _, l := range gone {
		l.stop()
		if _, still := next[l.id]; !still {
			c.remote.drop(l.id)
		}
		if n := l.discard(); n > 0 {
			c.dropped.Add(uint64(n))
			c.s.log.Warn("mqtt cluster: peer gone, queued forwards dropped", "peer", l.id, "dropped", n)
		} else {
			c.s.log.Info("mqtt cluster: peer unlinked", "peer", l.id)
		}
	}
	for _, l := range next {
		l.start() // no-op when running
	}
}

// interestChanged wakes every pusher.
func (c *clusterNode) interestChanged() {
	for _, l := range *c.links.Load() {
		l.wakePush()
	}
}

// route decides where a publish accepted on this node goes, queues it for
// the peers and returns the packet marked with the local shared groups.
func (c *clusterNode) route(pk packets.Packet) packets.Packet {
	links := *c.links.Load()
	if len(links) == 0 || c.ctx.Err() != nil {
		return pk
	}
	plain, shared := c.remote.match(pk.TopicName)
	var localShared map[string]int
	if len(shared) > 0 || c.s.interest.hasShared() {
		localShared = c.localGroups(pk.TopicName)
	}
	rt := c.dispatch(pk, links, plain, shared, localShared)
	if len(shared) > 0 || len(localShared) > 0 {
		pk.Filters = markRoute(rt.local)
	}
	return pk
}

// routeWill forwards a will message mochi has just delivered locally
// (wills bypass OnPublish): to the peers' ordinary subscribers, and to
// each shared group with no member here (those with one got it here).
func (c *clusterNode) routeWill(pk packets.Packet) {
	links := *c.links.Load()
	if len(links) == 0 || c.ctx.Err() != nil {
		return
	}
	plain, shared := c.remote.match(pk.TopicName)
	for g := range c.localGroups(pk.TopicName) {
		delete(shared, g)
	}
	c.dispatch(pk, links, plain, shared, nil)
}

// localGroups is this node's subscriber count per shared group matching topic.
func (c *clusterNode) localGroups(topic string) map[string]int {
	subs := c.s.broker.Topics.Subscribers(topic)
	if len(subs.Shared) == 0 {
		return nil
	}
	m := make(map[string]int, len(subs.Shared))
	for g, cls := range subs.Shared {
		m[g] = len(cls)
	}
	return m
}

// dispatch routes pk and queues it for the peers the route names.
func (c *clusterNode) dispatch(pk packets.Packet, links map[string]*clusterLink, plain map[string]bool,
	shared map[string]map[string]int, localShared map[string]int) route {
	live := make([]string, 0, len(links))
	for id := range links {
		live = append(live, id)
	}
	sort.Strings(live)
	rt := c.bal.route(pk.FixedHeader.Retain, plain, shared, localShared, live)
	for node, groups := range rt.remote {
		m := fwdMsg{Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos, Retain: pk.FixedHeader.Retain,
			Props: forwardProps(pk.Properties), Groups: groups}
		if !links[node].enqueue(m) {
			c.dropped.Add(1)
			if n, ok := c.logLimit.allow(); ok {
				c.s.log.Warn("mqtt cluster: forward queue full, publish not forwarded", "peer", node,
					"limit", c.cfg.QueueLimit, "limit_bytes", c.cfg.QueueBytes, "dropped_since_last_log", n)
			}
		}
	}
	return rt
}

func forwardProps(p packets.Properties) packets.Properties {
	return packets.Properties{PayloadFormat: p.PayloadFormat, PayloadFormatFlag: p.PayloadFormatFlag,
		MessageExpiryInterval: p.MessageExpiryInterval, ContentType: p.ContentType, ResponseTopic: p.ResponseTopic,
		CorrelationData: p.CorrelationData, User: p.User}
}

func markRoute(groups []string) packets.Subscriptions {
	f := make(packets.Subscriptions, 0, 1+len(groups))
	f = append(f, packets.Subscription{Filter: routeMarker})
	for _, g := range groups {
		f = append(f, packets.Subscription{Filter: g})
	}
	return f
}

// routedGroups returns the shared groups a routed packet goes to locally,
// and false for a packet the cluster did not route.
func routedGroups(pk packets.Packet) (map[string]bool, bool) {
	if len(pk.Filters) == 0 || pk.Filters[0].Filter != routeMarker {
		return nil, false
	}
	m := make(map[string]bool, len(pk.Filters)-1)
	for _, f := range pk.Filters[1:] {
		m[f.Filter] = true
	}
	return m, true
}

// handleInterest applies a peer's interest message.
func (c *clusterNode) handleInterest(from string, payload []byte, reply func([]byte, error)) {
	m, err := decodeInterest(payload)
	if err != nil {
		reply(nil, fmt.Errorf("interest from %s: %w", from, err))
		return
	}
	if c.ctx.Err() != nil {
		reply(nil, errShuttingDown)
		return
	}
	if (*c.links.Load())[from] == nil {
		// A peer we have no link to yet: membership (polled) may already
		// list it. Link it now, so that once it sees its interest
		// acknowledged, publishes here are forwarded to it.
		c.refreshPeers()
	}
	prev := c.remote.epoch(from)
	if c.remote.apply(from, m) {
		reply([]byte{replyNeedFull}, nil)
		return
	}
	reply([]byte{replyOK}, nil)
	if m.Full && prev != m.Epoch {
		// A new run of the peer (or first contact): it knows nothing of our
		// interest or retained messages yet.
		if l := (*c.links.Load())[from]; l != nil {
			l.forceFull()
		}
	}
}

// handleForward delivers a batch of forwarded publishes to local sessions,
// in order, skipping what this run already delivered from the sender's
// run, then acknowledges the batch.
func (c *clusterNode) handleForward(from string, payload []byte, reply func([]byte, error)) {
	fb, err := decodeForward(payload)
	if err != nil {
		reply(nil, fmt.Errorf("forward from %s: %w", from, err))
		return
	}
	if c.ctx.Err() != nil {
		reply(nil, errShuttingDown)
		return
	}
	c.mu.Lock()
	st := c.recv[from]
	c.mu.Unlock()
	skip := uint64(0)
	if st.epoch == fb.Epoch && st.next > fb.Seq {
		skip = st.next - fb.Seq
	}
	for i := range fb.Msgs {
		if uint64(i) < skip {
			continue
		}
		c.inject(&fb.Msgs[i])
	}
	next := fb.Seq + uint64(len(fb.Msgs))
	if st.epoch == fb.Epoch {
		next = max(next, st.next)
	}
	c.mu.Lock()
	c.recv[from] = recvState{epoch: fb.Epoch, next: next}
	c.mu.Unlock()
	reply(nil, nil)
}

// inject hands a forwarded publish to mochi as the cluster's inline
// client: retained if flagged, delivered to ordinary subscribers and to
// the shared groups the origin chose for this node.
func (c *clusterNode) inject(m *fwdMsg) {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: m.QoS, Retain: m.Retain},
		TopicName:   m.Topic,
		Payload:     m.Payload,
		Properties:  m.Props,
		PacketID:    uint16(m.QoS), // validity only: the inline client has no acks
		Filters:     markRoute(m.Groups),
	}
	if err := c.s.broker.InjectPacket(c.inline, pk); err != nil {
		if n, ok := c.logLimit.allow(); ok {
			c.s.log.Warn("mqtt cluster: forwarded publish not delivered", "topic", m.Topic, "err", err,
				"failed_since_last_log", n)
		}
		return
	}
	c.forwardedIn.Add(1)
}

// handleRetained fills in retained messages this node lacks.
func (c *clusterNode) handleRetained(from string, payload []byte, reply func([]byte, error)) {
	fb, err := decodeForward(payload)
	if err != nil {
		reply(nil, fmt.Errorf("retained from %s: %w", from, err))
		return
	}
	now := time.Now().Unix()
	topics := c.s.broker.Topics
	for _, m := range fb.Msgs {
		if !m.Retain || len(m.Payload) == 0 || !mochi.IsValidFilter(m.Topic, true) {
			continue
		}
		if _, ok := topics.Retained.Get(m.Topic); ok {
			continue // what this node has is at least as new (see docs/protocols/mqtt.md)
		}
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: m.QoS, Retain: true},
			TopicName: m.Topic, Payload: m.Payload, Properties: m.Props, Created: now, ProtocolVersion: 5,
			Origin: c.inline.ID}
		if m.Props.MessageExpiryInterval > 0 {
			pk.Expiry = now + int64(m.Props.MessageExpiryInterval)
		}
		topics.RetainMessage(pk)
		c.retainedIn.Add(1)
	}
	atomic.StoreInt64(&c.s.broker.Info.Retained, int64(topics.Retained.Len()))
	reply(nil, nil)
}

// retainedSet is this node's retained messages as catch-up batches.
func (c *clusterNode) retainedSet() [][]byte {
	all := c.s.broker.Topics.Retained.GetAll()
	topics := make([]string, 0, len(all))
	for t := range all {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	now := time.Now().Unix()
	var out [][]byte
	var cur forwardBatch
	curBytes, total, count := 0, 0, 0
	for _, t := range topics {
		pk := all[t]
		if len(pk.Payload) == 0 || (pk.Expiry > 0 && pk.Expiry < now) {
			continue
		}
		m := fwdMsg{Topic: t, Payload: pk.Payload, QoS: pk.FixedHeader.Qos, Retain: true, Props: forwardProps(pk.Properties)}
		if count >= RetainedSyncMaxMessages || total+m.size() > RetainedSyncMaxBytes {
			c.s.log.Warn("mqtt cluster: retained catch-up truncated", "sent", count, "retained", len(all))
			break
		}
		cur.Msgs = append(cur.Msgs, m)
		curBytes += m.size()
		total += m.size()
		count++
		if curBytes >= retainedChunkBytes {
			out = append(out, cur.encode())
			cur, curBytes = forwardBatch{}, 0
		}
	}
	if len(cur.Msgs) > 0 {
		out = append(out, cur.encode())
	}
	return out
}

// nextSeqs reserves n forward sequence numbers for a peer.
func (c *clusterNode) nextSeqs(peer string, n int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[peer]
	c.seqs[peer] = s + uint64(n)
	return s
}
