package produce

// Fetch (key 1): v4–v12, advertised but refused.
//
// Edge nodes do not serve reads: consumers read a stream from the cloud
// server, which serves the table. Fetch is advertised only because
// librdkafka decides its message format from it: it produces record
// batches (message format v2) only when the broker lists Fetch covering v4,
// and zstd only when it covers v10 — without it, librdkafka producers fall
// back to the v0/v1 message sets Produce v3+ forbids. Every partition of a
// Fetch is answered with UNSUPPORTED_VERSION (35) and no records; v13+
// (topic ids) is not offered.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (s *Server) handleFetch(req *kafka.Request, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	s.log.Debug("kafka: refusing fetch: edge nodes serve produce only", "client", req.ClientID)
	for _, rt := range r.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = kafka.CodeUnsupportedVersion
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
