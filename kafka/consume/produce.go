package consume

// Produce (key 0), consume side: v3–v12, advertised but refused.
//
// The cloud server does not accept writes: producers write to edge nodes.
// Produce is advertised only because librdkafka decides its message format
// from the broker's API list: it fetches record batches (message format
// v2) only when the broker lists Produce v3+ together with Fetch v4+, and
// otherwise falls back to Fetch v0–v3, which this server does not serve.
// Every partition of a Produce is answered with UNSUPPORTED_VERSION (35);
// acks=0 requests get no response.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleProduce(req *kafka.Request, r *kmsg.ProduceRequest) kmsg.Response {
	cs.log.Debug("kafka: refusing produce: the cloud server serves consumers only", "client", req.ClientID)
	if r.Acks == 0 {
		return nil
	}
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = kafka.CodeUnsupportedVersion
			sp.BaseOffset, sp.LogStartOffset = -1, -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
