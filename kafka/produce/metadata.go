package produce

// Metadata (key 3): v0–v12.
//
// Behaviour:
//   - Topics are streams ("namespace.stream"). A null topic list (v1+) or an
//     empty one (v0) lists every stream; otherwise each named topic is looked
//     up. Names that are not valid stream names get INVALID_TOPIC_EXCEPTION
//     (17); unknown streams get UNKNOWN_TOPIC_OR_PARTITION (3) unless
//     auto-creation is enabled in the config and allowed by the request
//     (v4+ AllowAutoTopicCreation; always for v0–v3), in which case the
//     stream is created and this node's partition allocated.
//   - Each partition's leader is the broker id (BrokerID) of the node that
//     owns it now (the table's tributary.owner.<p>: a node that took a
//     partition over leads it), and its leader epoch is the ownership epoch,
//     which grows with every take-over, so clients treat the new leader as
//     newer; replicas and ISR are that node alone. A partition whose owner
//     is not among the known brokers (a dead node nobody took over yet) is
//     LEADER_NOT_AVAILABLE (5), which clients retry.
//   - Authorization (the connection's principal, auth.Produce): a listing
//     of every stream shows only those the principal may produce to; a
//     named stream it may not is TOPIC_AUTHORIZATION_FAILED (29), checked
//     before the lookup, so such a request never auto-creates it.
//   - Brokers are the backend's nodes; this node's entry gets the
//     advertised address. The controller is this node.
//   - v10+ topic ids are derived from the topic name (topicID), so they are
//     stable across nodes and restarts; a request naming a topic only by id
//     is resolved against all streams.

import (
	"context"
	"errors"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
)

func (s *Server) handleMetadata(ctx context.Context, req *kafka.Request, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	self := kafka.BrokerID(s.b.NodeID())
	known := make(map[string]bool)
	for _, b := range s.b.Brokers() {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = kafka.BrokerID(b.NodeID), b.Host, b.Port
		if b.NodeID == s.b.NodeID() && (mb.Host == "" || mb.Port == 0) {
			mb.Host, mb.Port = s.conn.Advertised()
		}
		known[b.NodeID] = true
		resp.Brokers = append(resp.Brokers, mb)
	}
	if !known[s.b.NodeID()] {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID = self
		mb.Host, mb.Port = s.conn.Advertised()
		known[s.b.NodeID()] = true
		resp.Brokers = append(resp.Brokers, mb)
	}
	clusterID := s.cfg.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = self

	all := (r.Version == 0 && len(r.Topics) == 0) || (r.Version >= 1 && r.Topics == nil)
	if all {
		topics, err := s.b.Topics(ctx)
		if err != nil {
			s.log.Warn("kafka metadata: list streams", "err", err)
		}
		sort.Slice(topics, func(i, j int) bool { return topics[i].Stream < topics[j].Stream })
		for _, t := range topics {
			if req.Allowed(auth.Produce, t.Stream, "") {
				resp.Topics = append(resp.Topics, s.metadataTopic(t, known))
			}
		}
		return resp
	}
	var byID map[[16]byte]string // lazily built for requests naming topics by id
	created := 0
	for _, rt := range r.Topics {
		var name string
		switch {
		case rt.Topic != nil:
			name = *rt.Topic
		case rt.TopicID != [16]byte{}:
			if byID == nil {
				byID = make(map[[16]byte]string)
				topics, _ := s.b.Topics(ctx)
				for _, t := range topics {
					byID[kafka.TopicID(t.Stream)] = t.Stream
				}
			}
			var ok bool
			if name, ok = byID[rt.TopicID]; !ok {
				mt := kmsg.NewMetadataResponseTopic()
				mt.TopicID = rt.TopicID
				mt.ErrorCode = 100 // UNKNOWN_TOPIC_ID
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		if _, _, err := tributary.ParseStream(name); err != nil {
			mt.ErrorCode = kafka.CodeInvalidTopic
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		if !req.Authorize(auth.Produce, name, "") { // before the lookup: nothing created, existence not told
			mt.ErrorCode = kafka.CodeTopicAuthorizationFailed
			if rt.Topic == nil {
				mt.Topic, mt.TopicID = nil, rt.TopicID
			}
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		allowCreate := s.cfg.AutoCreate && (r.Version < 4 || r.AllowAutoTopicCreation) && created < s.cfg.MaxAutoCreatePerRequest
		ti, code, made := s.lookupTopic(ctx, name, allowCreate)
		if made {
			created++
		}
		if code != 0 {
			mt.ErrorCode = code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, s.metadataTopic(ti, known))
	}
	return resp
}

// lookupTopic finds (or, if create, creates) a stream and returns it or a
// Kafka error code.
func (s *Server) lookupTopic(ctx context.Context, name string, create bool) (ti TopicInfo, code int16, created bool) {
	ti, err := s.b.Topic(ctx, name)
	if errors.Is(err, ErrUnknownStream) && create {
		ti, err = s.b.EnsureStream(ctx, name)
		created = err == nil
	}
	switch {
	case err == nil:
		return ti, 0, created
	case errors.Is(err, ErrUnknownStream):
		return ti, kafka.CodeUnknownTopicOrPartition, false
	case errors.Is(err, tributary.ErrInvalidStream):
		return ti, kafka.CodeInvalidTopic, false
	case errors.Is(err, ErrStreamLimit):
		s.log.Warn("kafka: stream not created: stream limit reached (kafka.max_streams)", "stream", name)
		return ti, kafka.CodePolicyViolation, false
	default:
		s.log.Warn("kafka: look up stream", "stream", name, "err", err)
		return ti, kafka.CodeUnknownServerError, false
	}
}

func (s *Server) metadataTopic(t TopicInfo, known map[string]bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = kmsg.StringPtr(t.Stream)
	mt.TopicID = kafka.TopicID(t.Stream)
	parts := append([]PartitionInfo(nil), t.Partitions...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	for _, p := range parts {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Partition
		mp.LeaderEpoch = int32(min(p.Epoch, math.MaxInt32))
		if p.Leader == "" || !known[p.Leader] {
			mp.ErrorCode = kafka.CodeLeaderNotAvailable
			mp.Leader = -1
		} else {
			id := kafka.BrokerID(p.Leader)
			mp.Leader = id
			mp.Replicas = []int32{id}
			mp.ISR = []int32{id}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
