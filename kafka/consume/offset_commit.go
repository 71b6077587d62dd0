package consume

// OffsetCommit (key 8), consume side: v0–v8 (v9+ adds nothing we need and
// v10 names topics by id).
//
// Behaviour:
//   - A group the principal may not use is GROUP_AUTHORIZATION_FAILED (30)
//     on every partition; a topic it may not consume is
//     TOPIC_AUTHORIZATION_FAILED (29) on that topic's partitions (the
//     others are stored).
//   - Only the group's coordinator accepts commits (else NOT_COORDINATOR).
//   - A commit to a group with no members is stored: from a simple
//     consumer (generation -1, no member id), as Kafka does, or from a
//     member that joined before this coordinator restarted — membership is
//     soft state, so a restart must not cost the commits of the poll in
//     flight. Otherwise the member must be known (UNKNOWN_MEMBER_ID) and of the
//     current generation (ILLEGAL_GENERATION); during CompletingRebalance
//     the answer is REBALANCE_IN_PROGRESS, during PreparingRebalance the
//     commit is accepted (the member learns of the rebalance from its
//     heartbeat), as in Kafka.
//   - Caps (what a client can make the offset store hold): a group id is
//     at most maxGroupIDBytes (INVALID_GROUP_ID); a request commits at most
//     maxCommitPartitions partitions (beyond: INVALID_COMMIT_OFFSET_SIZE on
//     every partition, nothing stored); a partition's metadata is at most
//     maxOffsetMetadataBytes (OFFSET_METADATA_TOO_LARGE for that
//     partition, the others stored), Kafka's offset.metadata.max.bytes.
//   - Caps of the coordinator (caps.go): a commit that would make this
//     server hold more than kafka.max_groups groups, or this group more
//     than kafka.max_group_offsets committed offsets, is POLICY_VIOLATION
//     on every partition, nothing stored.
//   - The offsets are stored durably (package offsets) before the
//     response, in one transaction; a storage failure answers every
//     partition with UNKNOWN_SERVER_ERROR and stores none.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/offsets"
)

// Caps of OffsetCommit (see above).
const (
	maxGroupIDBytes        = 255
	maxCommitPartitions    = 10000
	maxOffsetMetadataBytes = 4096
)

func (cs *Server) handleOffsetCommit(ctx context.Context, req *kafka.Request, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := int16(0)
	n := 0
	for _, rt := range r.Topics {
		n += len(rt.Partitions)
	}
	tooBig := map[[2]any]bool{}
	switch {
	case r.Group == "" || len(r.Group) > maxGroupIDBytes:
		code = kafka.CodeInvalidGroupID
	case n > maxCommitPartitions:
		code = kafka.CodeInvalidCommitOffsetSize
	default:
		if code = cs.groupCode(req, r.Group); code == 0 {
			code = cs.groups.checkCommit(r.Group, r.MemberID, r.Generation)
		}
	}
	var offs []offsets.Offset
	var denied map[string]bool
	if code == 0 {
		denied = deniedTopics(req, r.Topics, func(t kmsg.OffsetCommitRequestTopic) string { return t.Topic })
		for _, rt := range r.Topics {
			if denied[rt.Topic] {
				continue
			}
			for _, rp := range rt.Partitions {
				md := ""
				if rp.Metadata != nil {
					md = *rp.Metadata
				}
				if len(md) > maxOffsetMetadataBytes {
					tooBig[[2]any{rt.Topic, rp.Partition}] = true
					continue
				}
				offs = append(offs, offsets.Offset{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset, Metadata: md})
			}
		}
		code = cs.commitOffsets(ctx, r.Group, offs)
	}
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			switch {
			case code != 0:
			case denied[rt.Topic]:
				sp.ErrorCode = kafka.CodeTopicAuthorizationFailed
			case tooBig[[2]any{rt.Topic, rp.Partition}]:
				sp.ErrorCode = kafka.CodeOffsetMetadataTooLarge
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
