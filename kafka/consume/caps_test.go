package consume

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// TestOffsetCommitCaps: what a client can make the offset store hold is
// bounded: a long group id, too many partitions in one commit, and
// oversized metadata are refused with Kafka's codes; partitions within the
// caps are stored.
func TestOffsetCommitCaps(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, 10, 10)
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())
	commit := func(group string, parts int, md string) []int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.SetVersion(8)
		req.Group, req.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = cloudStream
		for i := range parts {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = int32(i), 1
			if i == 0 {
				rp.Metadata = kmsg.StringPtr(md)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := rc.RoundTrip(req).(*kmsg.OffsetCommitResponse)
		var codes []int16
		for _, p := range resp.Topics[0].Partitions {
			codes = append(codes, p.ErrorCode)
		}
		return codes
	}
	if c := commit(strings.Repeat("g", 300), 1, ""); c[0] != kafka.CodeInvalidGroupID {
		t.Fatalf("long group id: %v", c)
	}
	if c := commit("g", maxCommitPartitions+1, ""); c[0] != kafka.CodeInvalidCommitOffsetSize || c[len(c)-1] != kafka.CodeInvalidCommitOffsetSize {
		t.Fatalf("too many partitions: %v", c[:2])
	}
	if c := commit("g", 2, strings.Repeat("m", maxOffsetMetadataBytes+1)); c[0] != kafka.CodeOffsetMetadataTooLarge || c[1] != 0 {
		t.Fatalf("oversized metadata: %v", c)
	}
}
