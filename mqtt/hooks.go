package mqtt

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
)

// publishHook makes every network publish durable before mochi acks and
// delivers it; see the package comment.
type publishHook struct {
	mochi.HookBase
	s *Server
}

func (h *publishHook) ID() string { return "tributary-wal" }

func (h *publishHook) Provides(b byte) bool {
	switch b {
	case mochi.OnPublish, mochi.OnPacketRead, mochi.OnPacketEncode:
		return true
	case mochi.OnSessionEstablish:
		return h.s.pipe != nil // the asynchronous acknowledgements follow sessions (acks.go)
	case mochi.OnSessionEstablished, mochi.OnDisconnect, mochi.OnClientExpired:
		return true // so do the stored, unacknowledged publishes (stored.go)
	}
	return false
}

// OnSessionEstablish runs before mochi takes an existing session of the
// id over: pending acknowledgements stop going to the old connection.
func (h *publishHook) OnSessionEstablish(cl *mochi.Client, pk packets.Packet) {
	if !cl.Net.Inline {
		h.s.pipe.establish(cl)
	}
}

// OnSessionEstablished runs once the connection has its CONNACK.
// A clean start forgets the stored publishes the client did not get
// acknowledged: a re-send is a new message.
func (h *publishHook) OnSessionEstablished(cl *mochi.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	if pk.Connect.Clean {
		h.s.stored.forget(cl.ID)
	}
	if h.s.pipe != nil {
		h.s.pipe.established(cl, pk.Connect.Clean)
	}
}

func (h *publishHook) OnDisconnect(cl *mochi.Client, err error, expire bool) {
	if cl.Net.Inline {
		return
	}
	if expire && !cl.IsTakenOver() {
		h.s.stored.forget(cl.ID)
	}
	if h.s.pipe != nil {
		h.s.pipe.disconnected(cl, expire)
	}
}

func (h *publishHook) OnClientExpired(cl *mochi.Client) {
	if cl.Net.Inline {
		return
	}
	h.s.stored.forget(cl.ID)
	if h.s.pipe != nil {
		h.s.pipe.expired(cl)
	}
}

// OnPacketRead hands a PUBREL to the pipeline (acks.go: the PUBREC it
// releases enters mochi's inflight table on this, the read goroutine),
// and refuses publishes that mochi's processPublish would ignore
// without acking or telling anyone: topic names mochi reserves ($SYS/...,
// a bare $share or $share/group; see mochi's processPublish and
// IsValidFilter).
// Wildcards are left to mochi, which refuses them in PublishValidate.
func (h *publishHook) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Pubrel && h.s.pipe != nil && !cl.Net.Inline {
		h.s.pipe.released(cl, pk.PacketID)
		return pk, nil
	}
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline || pk.TopicName == "" ||
		mochi.IsValidFilter(pk.TopicName, true) || strings.ContainsAny(pk.TopicName, "+#") {
		return pk, nil
	}
	h.s.refusedTopic.Add(1)
	h.s.log.Warn("publish to reserved topic refused, disconnecting client",
		"client", cl.ID, "remote", cl.Net.Remote, "topic", pk.TopicName)
	if cl.Properties.ProtocolVersion == 5 {
		_ = h.s.broker.DisconnectClient(cl, packets.ErrTopicNameInvalid)
	}
	// ErrRejectPacket from OnPacketRead ends the read loop: the connection closes.
	return pk, packets.ErrRejectPacket
}

// OnPacketEncode keeps the user properties of a PUBLISH to a client that
// asked for no problem information (Request Problem Information 0, which
// paho.golang sends whenever it sends CONNECT properties): mochi v2.7.9
// then drops user properties from every packet, while MQTT 5 forbids
// them only on packets other than PUBLISH, CONNACK and DISCONNECT
// [MQTT-3.1.2-29] — a device's metadata must reach its subscribers.
func (h *publishHook) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Publish {
		pk.Mods.DisallowProblemInfo = false
	}
	return pk
}

// OnPublish runs on the client's read goroutine before mochi writes the
// PUBACK/PUBREC, retains or delivers, and after it resolved the topic
// alias: it checks the ACL, then either hands a QoS 1/2 record to the
// pipeline (acks.go) and lets the read loop go on, or (blocking
// acknowledgements) blocks until the record is durable. The pipeline
// delivers durable packets through an inline client, which this hook
// lets through like the node's own.
func (h *publishHook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil // the node's own messages: not logged, see package comment
	}
	s := h.s
	stream := s.router.StreamFor(pk.TopicName)
	p, err := s.auth.authorize(cl, auth.Publish, pk.TopicName, stream)
	if err != nil {
		if s.pipe != nil && pk.FixedHeader.Qos > 0 && cl.Properties.ProtocolVersion >= 5 &&
			s.pipe.refuseInOrder(cl, pk, "", auth.ErrDenied, &packets.ErrNotAuthorized) {
			s.refusedAuth.Add(1)
			return pk, packets.ErrRejectPacket
		}
		return pk, s.deny(cl, pk)
	}
	if pk.FixedHeader.Retain && !s.retained.admit(pk.TopicName, len(pk.Payload)) {
		if s.pipe != nil && pk.FixedHeader.Qos > 0 && s.pipe.refuseInOrder(cl, pk, stream, errRetainedQuota, nil) {
			return pk, packets.ErrRejectPacket
		}
		return pk, s.refuse(cl, pk, stream, errRetainedQuota)
	}
	rec := &tributary.Record{
		Stream:    stream,
		Topic:     pk.TopicName,
		Value:     pk.Payload,
		Source:    "mqtt",
		ClientID:  cl.ID,
		Node:      s.cfg.NodeID,
		Principal: p.Name,
	}
	if n := len(pk.Properties.User); n > 0 {
		rec.Headers = make([]tributary.Header, n)
		for i, u := range pk.Properties.User {
			rec.Headers[i] = tributary.Header{Key: u.Key, Value: []byte(u.Val)}
		}
	}
	if pk.FixedHeader.Qos == 0 {
		// QoS 0 has no acknowledgement to hold back: queue the record
		// for the next group commit and let the read loop go on. It is
		// delivered now; if it then cannot be made durable it is
		// counted and logged as dropped, like a refused QoS 0 publish.
		stream, size := rec.Stream, uint64(len(pk.Payload)) // not pk: the closure would move it to the heap
		if _, err := s.app.Submit(s.ctx, &tributary.Write{Records: []*tributary.Record{rec}}, tributary.Queued, func(err error) {
			if err != nil {
				s.dropQoS0(cl, stream, err)
				return
			}
			s.accepted[0].Add(1)
			s.payloadBytes.Add(size)
		}); err != nil {
			return pk, s.refuse(cl, pk, rec.Stream, err)
		}
		return pk, nil
	}
	if s.pipe != nil {
		if err := s.pipe.publish(cl, pk, rec); err != errReject {
			return pk, err
		}
		return held(pk), nil
	}
	start := time.Now()
	if e := s.stored.take(cl.ID, pk); e != nil {
		// The client's re-send of a publish stored but not acknowledged
		// (stored.go): confirm the stored record instead of appending it.
		s.resentStored.Add(1)
		if err = s.confirm(e); err != nil {
			s.stored.put(e)
			return pk, s.refuse(cl, pk, rec.Stream, err)
		}
	} else {
		err = s.app.Append(s.ctx, &tributary.Write{Records: []*tributary.Record{rec}})
	}
	if err == nil {
		if pk.FixedHeader.Qos > 0 {
			s.pubackLatency.Observe(time.Since(start).Seconds())
		}
		s.accepted[min(pk.FixedHeader.Qos, 2)].Add(1)
		s.payloadBytes.Add(uint64(len(pk.Payload)))
		s.budget.ok(s)
		return pk, nil
	}
	if pk.FixedHeader.Qos > 0 && s.storedUnconfirmed(err) {
		s.stored.remember(cl.ID, pk, rec, false)
	}
	return pk, s.refuse(cl, pk, rec.Stream, err)
}

// held is what OnPublish gives back to mochi for a publish the pipeline
// took: a copy that mochi's processPublish (v2.7.9) then neither
// acknowledges (QoS 0), retains (no retain flag) nor delivers (Ignore) —
// the pipeline does all three once the record is durable. It has the
// effect of packets.ErrRejectPacket without mochi's debug log of every
// rejected publish, whose arguments (the packet boxed, among them) cost
// three allocations a publish even with debug logging off (measured with
// BenchmarkPublishPipelined). The cluster hook, next in the chain, lets
// an ignored packet pass.
func held(pk packets.Packet) packets.Packet {
	pk.FixedHeader.Qos, pk.FixedHeader.Retain, pk.Ignore = 0, false, true
	return pk
}

// refuse answers a publish whose Append failed and returns
// packets.ErrRejectPacket, which makes mochi skip its ack, retain and
// delivery (server.go processPublish in v2.7.9).
func (s *Server) refuse(cl *mochi.Client, pk packets.Packet, stream string, cause error) error {
	reason := tributary.ReasonOf(cause)
	quota := errors.Is(cause, errRetainedQuota)
	if quota {
		s.refusedRet.Add(1)
		if n, ok := s.capLog.allow(); ok {
			s.log.Warn("retained publish refused: retained message limit reached (mqtt.max_retained, mqtt.max_retained_bytes)",
				"topic", pk.TopicName, "client", cl.ID, "qos", pk.FixedHeader.Qos, "refused_since_last_log", n)
		}
	}
	qos := pk.FixedHeader.Qos
	if qos == 0 {
		s.dropQoS0(cl, stream, cause)
		return packets.ErrRejectPacket
	}
	if reason == tributary.ReasonBudget {
		s.budget.exceeded(s, cause)
	}
	s.refused.Add(1)
	switch {
	case quota:
		// counted and logged above
	case reason == tributary.ReasonBudget:
		s.refusedBudget.Add(1) // logged once per episode by budget
	case reason == tributary.ReasonReplication:
		s.refusedRepl.Add(1)
		if n, ok := s.replLog.allow(); ok {
			s.log.Warn("publish refused: too few replicas to store it (cluster.replication_policy refuse)",
				"error", cause, "stream", stream, "client", cl.ID, "qos", qos, "refused_since_last_log", n)
		}
	default:
		if reason == tributary.ReasonFenced {
			s.refusedFenced.Add(1)
		}
		if n, ok := s.errLog.allow(); ok {
			s.log.Error("publish refused: append failed",
				"error", cause, "reason", reason.String(), "stream", stream, "client", cl.ID, "qos", qos, "refused_since_last_log", n)
		}
	}

	if s.storedUnconfirmed(cause) {
		// Stored, not confirmed (stored.go): no negative acknowledgement,
		// so the client keeps the publish and re-sends it (DUP) when it
		// resumes its session, and the re-send is confirmed, not stored again.
		s.withheld.Add(1)
		if cl.Properties.ProtocolVersion < 5 {
			cl.Stop(fmt.Errorf("publish stored, acknowledgement withheld: %w", cause))
			return packets.ErrRejectPacket
		}
		_ = s.broker.DisconnectClient(cl, codeStoredUnconfirmed)
		return packets.ErrRejectPacket
	}
	if cl.Properties.ProtocolVersion < 5 {
		// MQTT 3.1.1 has no negative acknowledgement: close the connection
		// without acking; the client re-sends the message after reconnecting.
		cl.Stop(fmt.Errorf("publish refused: %w", cause))
		return packets.ErrRejectPacket
	}
	code := refusalCode(reason)
	if quota {
		code = packets.ErrQuotaExceeded
	}
	return writeRefusal(cl, pk, code)
}

// deny answers a publish the ACL refused (the Authority has audited it):
// MQTT 5 PUBACK (QoS 1) or PUBREC (QoS 2) 0x87, nothing at QoS 0; an MQTT
// 3.1.1 client, which has no negative acknowledgement, is disconnected
// [MQTT-3.3.5-2]. Nothing is appended, retained or delivered.
func (s *Server) deny(cl *mochi.Client, pk packets.Packet) error {
	s.refusedAuth.Add(1)
	if cl.Properties.ProtocolVersion < 5 {
		cl.Stop(fmt.Errorf("publish to %q: %w", pk.TopicName, auth.ErrDenied))
		return packets.ErrRejectPacket
	}
	if pk.FixedHeader.Qos == 0 {
		return packets.ErrRejectPacket
	}
	return writeRefusal(cl, pk, packets.ErrNotAuthorized)
}

// writeRefusal answers an MQTT 5 QoS 1/2 publish with code and returns
// packets.ErrRejectPacket. It is written here rather than by returning
// code to mochi: for a code mochi v2.7.9 always writes a PUBACK, also for
// QoS 2, where PUBREC is due. A PUBREC with a failure code ends the QoS 2
// exchange, so it is not recorded in the client's inflight state.
func writeRefusal(cl *mochi.Client, pk packets.Packet, code packets.Code) error {
	ack := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Puback},
		PacketID:    pk.PacketID,
		ReasonCode:  code.Code,
		Properties:  packets.Properties{ReasonString: code.Reason},
	}
	if pk.FixedHeader.Qos == 2 {
		ack.FixedHeader.Type = packets.Pubrec
	}
	if err := cl.WritePacket(ack); err != nil {
		cl.Stop(fmt.Errorf("write refusal: %w", err))
	}
	return packets.ErrRejectPacket
}

// dropQoS0 counts and logs (rate-limited) a QoS 0 publish that could not
// be made durable.
func (s *Server) dropQoS0(cl *mochi.Client, stream string, cause error) {
	if tributary.ReasonOf(cause) == tributary.ReasonBudget {
		s.budget.exceeded(s, cause)
	}
	s.droppedQoS0.Add(1)
	if n, ok := s.dropLog.allow(); ok {
		s.log.Warn("qos 0 publish dropped: append failed",
			"error", cause, "stream", stream, "client", cl.ID, "dropped_since_last_log", n)
	}
}

// refusalCode is the MQTT 5 reason code for a publish refused for reason
// (docs/cluster.md "Refusal codes", one table for every protocol): 0x97 (quota
// exceeded) for back-pressure — the WAL's disk budget, and too few
// replicas under cluster.replication_policy refuse — which the same
// publish outlives after a pause; 0x83 (implementation specific error:
// "the receiver is not willing to accept it") for a partition owned by
// another node or being taken over, where a client retries, through
// another node if it can; 0x87 (not authorized) for a denial, never to
// retry; 0x80 (unspecified error) otherwise. The reason string says which.
// PUBACK allows no other failure code (0x89 server busy is not one of them).
func refusalCode(reason tributary.Reason) packets.Code {
	switch reason {
	case tributary.ReasonBudget:
		return packets.ErrQuotaExceeded
	case tributary.ReasonReplication:
		return packets.Code{Code: packets.ErrQuotaExceeded.Code, Reason: "too few replicas to store the message (cluster.replication_policy refuse); retry later"}
	case tributary.ReasonFenced:
		return packets.Code{Code: packets.ErrImplementationSpecificError.Code, Reason: "partition moving to another node; retry later"}
	case tributary.ReasonUnauthorized:
		return packets.ErrNotAuthorized
	}
	return packets.ErrUnspecifiedError
}

// codeStoredUnconfirmed is the MQTT 5 DISCONNECT reason for a publish
// stored on this node whose replicas did not confirm it in time
// (tributary.ErrAfterAppend): 0x89 server busy, the QoS flow left open so
// that the client re-sends it when it resumes its session (stored.go).
var codeStoredUnconfirmed = packets.Code{Code: packets.ErrServerBusy.Code,
	Reason: "message stored, too few replicas confirmed it in time; resume the session and re-send it"}

// budgetState logs one line when budget refusals start and one when they end.
type budgetState struct {
	refusing atomic.Bool
	since    atomic.Int64 // unix nanos of the first refusal of the episode
	count    atomic.Uint64
}

func (b *budgetState) exceeded(s *Server, cause error) {
	b.count.Add(1)
	if b.refusing.CompareAndSwap(false, true) {
		b.since.Store(time.Now().UnixNano())
		s.log.Warn("wal budget exceeded: refusing mqtt publishes until space is released",
			"error", cause)
	}
}

func (b *budgetState) ok(s *Server) {
	if !b.refusing.Load() || !b.refusing.CompareAndSwap(true, false) {
		return
	}
	n := b.count.Swap(0)
	s.log.Info("wal budget available again: accepting mqtt publishes",
		"refused", n, "duration", time.Since(time.Unix(0, b.since.Load())).Round(time.Millisecond))
}

// rateLimiter allows one log line per interval and counts the suppressed ones.
type rateLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed uint64
}

const logInterval = 5 * time.Second

// allow reports whether to log now and how many events were suppressed
// since the last allowed one.
func (r *rateLimiter) allow() (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < logInterval {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return n, true
}
