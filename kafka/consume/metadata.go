package consume

// Metadata (key 3), consume side: v0–v12.
//
// Behaviour:
//   - Brokers are the cloud servers (Config.Peers plus this one), each
//     with broker id kafka.BrokerID(host:port). The controller is this server.
//   - Topics are all stream tables (null or, for v0, empty topic list) or
//     the named ones; an unknown stream is UNKNOWN_TOPIC_OR_PARTITION —
//     the consume side never creates streams.
//   - A topic's partitions are the table's allocated partitions and those
//     with a committed mark. Every cloud server can serve every partition;
//     the leader announced for each is chosen by a rendezvous hash over the
//     peers so that consumers spread over them. Leader epoch 0.
//   - Authorization (auth.Consume): a listing of every stream shows only
//     those the principal may consume; a named one it may not is
//     TOPIC_AUTHORIZATION_FAILED (29), whether it exists or not.
//   - v10+ topic ids are derived from the name (topicID), as on the edge.

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

func (cs *Server) handleMetadata(ctx context.Context, req *kafka.Request, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	peers := cs.peerList()
	for _, p := range peers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = peerBroker(p)
		resp.Brokers = append(resp.Brokers, mb)
	}
	clusterID := cs.cfg.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = kafka.BrokerID(cs.selfAddr())

	var names []string
	all := (r.Version == 0 && len(r.Topics) == 0) || (r.Version >= 1 && r.Topics == nil)
	var byID map[[16]byte]string
	if all || hasTopicIDs(r) {
		l, err := cs.tc.ListStreams(ctx)
		if err != nil {
			cs.log.Warn("kafka metadata: list streams", "err", err)
		}
		if all {
			for _, s := range l {
				if req.Allowed(auth.Consume, s, "") {
					names = append(names, s)
				}
			}
		}
		byID = map[[16]byte]string{}
		for _, s := range l {
			byID[kafka.TopicID(s)] = s
		}
	}
	if !all {
		for _, rt := range r.Topics {
			switch {
			case rt.Topic != nil:
				names = append(names, *rt.Topic)
			default:
				name, ok := byID[rt.TopicID]
				if !ok {
					mt := kmsg.NewMetadataResponseTopic()
					mt.TopicID = rt.TopicID
					mt.ErrorCode = 100 // UNKNOWN_TOPIC_ID
					resp.Topics = append(resp.Topics, mt)
					continue
				}
				names = append(names, name)
			}
		}
	}
	created := false
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		stream, ok := streamOf(name)
		if !ok {
			mt.ErrorCode = kafka.CodeInvalidTopic
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		producing := cs.ccfg.Producer != nil && req.Allowed(auth.Produce, name, "")
		if !all && !mayConsume(req, name) && !producing {
			mt.ErrorCode = kafka.CodeTopicAuthorizationFailed
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		if producing && r.AllowAutoTopicCreation {
			// The stream's cloud partition, allocated on first use, and
			// the stream created (once per request) if missing. Only for
			// a client that asks for auto-creation (producers do; a
			// consumer's Metadata must not allocate partitions).
			made, err := cs.ccfg.Producer.EnsurePartition(ctx, stream, !created)
			if err != nil {
				cs.log.Warn("kafka metadata: cloud partition", "stream", stream, "err", err)
			}
			created = created || made
		}
		parts, err := cs.tc.Partitions(ctx, stream)
		if err != nil {
			mt.ErrorCode = kafka.CodeUnknownTopicOrPartition
			if !errors.Is(err, tables.ErrNoSuchStream) {
				cs.log.Warn("kafka metadata: load table", "stream", stream, "err", err)
				mt.ErrorCode = kafka.CodeUnknownServerError
			}
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		mt.TopicID = kafka.TopicID(name)
		for _, p := range parts {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = p
			leader := kafka.BrokerID(rendezvous(fmt.Sprintf("part\x00%s\x00%d", name, p), peers))
			mp.Leader, mp.LeaderEpoch = leader, 0
			mp.Replicas, mp.ISR = []int32{leader}, []int32{leader}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func hasTopicIDs(r *kmsg.MetadataRequest) bool {
	for _, t := range r.Topics {
		if t.Topic == nil {
			return true
		}
	}
	return false
}
