package consume

// OffsetFetch (key 9), consume side: v0–v7 (v8 batches groups, v10 names
// topics by id).
//
// Behaviour: a group the principal may not use is GROUP_AUTHORIZATION_FAILED
// (30), at the top level from v2 and per partition; a topic it may not
// consume is TOPIC_AUTHORIZATION_FAILED (29) on its partitions, and left
// out of the answer to a null topic list. Only the coordinator answers (else NOT_COORDINATOR, at the
// top level from v2 and per partition). Offsets are read from the durable
// store, so they survive restarts of every cloud server. A null topic list
// (v2+) returns every committed partition of the group; a partition with
// no commit gets offset -1. RequireStable (v7) needs nothing: there are no
// transactions.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/offsets"
)

func (cs *Server) handleOffsetFetch(ctx context.Context, req *kafka.Request, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	code := int16(0)
	var stored []offsets.Offset
	if r.Group == "" {
		code = kafka.CodeInvalidGroupID
	} else {
		code = cs.groupCode(req, r.Group)
	}
	if code == 0 {
		var err error
		if stored, err = cs.offsets.Fetch(ctx, r.Group); err != nil {
			cs.log.Warn("kafka: fetch offsets", "group", r.Group, "err", err)
			code = kafka.CodeUnknownServerError
		}
	}
	if r.Version >= 2 {
		resp.ErrorCode = code
	}
	type tp struct {
		t string
		p int32
	}
	byTP := map[tp]offsets.Offset{}
	for _, o := range stored {
		byTP[tp{o.Topic, o.Partition}] = o
	}
	if r.Topics == nil && r.Version >= 2 {
		var cur *kmsg.OffsetFetchResponseTopic
		for _, o := range stored {
			if !req.Allowed(auth.Consume, o.Topic, "") {
				continue // a listing shows only the topics the principal may consume
			}
			if cur == nil || cur.Topic != o.Topic {
				resp.Topics = append(resp.Topics, kmsg.NewOffsetFetchResponseTopic())
				cur = &resp.Topics[len(resp.Topics)-1]
				cur.Topic = o.Topic
			}
			sp := kmsg.NewOffsetFetchResponseTopicPartition()
			sp.Partition, sp.Offset, sp.Metadata, sp.LeaderEpoch = o.Partition, o.Offset, kmsg.StringPtr(o.Metadata), -1
			cur.Partitions = append(cur.Partitions, sp)
		}
		return resp
	}
	var denied map[string]bool
	if code == 0 {
		denied = deniedTopics(req, r.Topics, func(t kmsg.OffsetFetchRequestTopic) string { return t.Topic })
	}
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetFetchResponseTopic()
		st.Topic = rt.Topic
		for _, p := range rt.Partitions {
			sp := kmsg.NewOffsetFetchResponseTopicPartition()
			sp.Partition, sp.Offset, sp.LeaderEpoch, sp.ErrorCode = p, -1, -1, code
			sp.Metadata = kmsg.StringPtr("")
			if denied[rt.Topic] {
				sp.ErrorCode = kafka.CodeTopicAuthorizationFailed
			} else if o, ok := byTP[tp{rt.Topic, p}]; ok {
				sp.Offset, sp.Metadata = o.Offset, kmsg.StringPtr(o.Metadata)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
