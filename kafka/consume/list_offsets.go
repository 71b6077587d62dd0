package consume

// ListOffsets (key 2), consume side: v1–v6.
//
// v0 (several offsets per partition) is not offered; v7 adds the
// max-timestamp query (-3), which is not implemented.
//
// Behaviour, per partition (a topic the principal may not consume is
// TOPIC_AUTHORIZATION_FAILED (29) for each of its partitions):
//   - -1 (latest) is the partition's committed high-water mark;
//   - -2 (earliest) is the lowest offset in the table (0 unless data was
//     deleted);
//   - T >= 0 is the first offset whose acceptance timestamp (the table's
//     timestamp column, whose manifest bounds locate the file) is >= T ms,
//     with that record's served timestamp; -1/-1 when there is none, as
//     Kafka answers.
//
// The leader epoch (v4+) is always 0.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

func (cs *Server) handleListOffsets(ctx context.Context, req *kafka.Request, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	denied := deniedTopics(req, r.Topics, func(t kmsg.ListOffsetsRequestTopic) string { return t.Topic })
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, 0
			v, code := cs.view(ctx, rt.Topic, rp.Partition)
			if denied[rt.Topic] {
				v, code = nil, kafka.CodeTopicAuthorizationFailed
			}
			if code != 0 {
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			switch rp.Timestamp {
			case -1:
				sp.Offset = cs.end(ctx, v.Stream, v.Partition, v.End)
			case -2:
				sp.Offset = v.Earliest
			default:
				if rp.Timestamp < 0 {
					sp.ErrorCode = kafka.CodeInvalidRequest
					break
				}
				off, ts, err := cs.offsetForTime(ctx, v, rp.Timestamp)
				if err != nil {
					cs.log.Warn("kafka: list offsets by time", "topic", rt.Topic, "partition", rp.Partition, "err", err)
					sp.ErrorCode = kafka.CodeUnknownServerError
					break
				}
				sp.Offset, sp.Timestamp = off, ts
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// offsetForTime finds the first offset below the mark whose acceptance
// timestamp is >= ms, with its served timestamp; -1, -1 if none.
func (cs *Server) offsetForTime(ctx context.Context, v *tables.Partition, ms int64) (int64, int64, error) {
	r, err := v.OffsetForTime(ctx, ms*1000)
	if err != nil || r == nil {
		return -1, -1, err
	}
	return r.Offset, kafka.RecordTimestampMs(r), nil
}
