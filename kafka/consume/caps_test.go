package consume

import (
	"context"
	"strings"
	"testing"
	"time"

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

// TestGroupCaps: a server coordinates at most max_groups groups (new ones
// get POLICY_VIOLATION from JoinGroup and OffsetCommit), a group takes at
// most max_group_members members and handed-out member ids
// (GROUP_MAX_SIZE_REACHED) and holds at most max_group_offsets committed
// offsets (POLICY_VIOLATION, nothing stored); groups with stored offsets
// still count after a restart, and stop counting once their offsets
// expire (offsets retention).
func TestGroupCaps(t *testing.T) {
	e := newCloudEnv(t, "n1")
	caps := func(c *Config) { c.MaxGroups, c.MaxGroupMembers, c.MaxGroupOffsets = 3, 2, 5 }
	cs := e.startWith(t, caps)
	rc := kafkatest.Dial(t, cs.Addr())
	commit := func(rc *kafkatest.Conn, group string, parts ...int32) []int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.SetVersion(8)
		req.Group, req.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = cloudStream
		for _, p := range parts {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, 1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		var codes []int16
		for _, p := range rc.RoundTrip(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
			codes = append(codes, p.ErrorCode)
		}
		return codes
	}
	join := func(group string) int16 {
		req := kmsg.NewPtrJoinGroupRequest()
		req.SetVersion(9)
		req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = group, 10000, 10000, "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
		return rc.RoundTrip(req).(*kmsg.JoinGroupResponse).ErrorCode
	}
	want := func(what string, got []int16, code int16) {
		t.Helper()
		for _, c := range got {
			if c != code {
				t.Fatalf("%s: codes %v, want all %d", what, got, code)
			}
		}
	}
	want("g1", commit(rc, "g1", 0, 1, 2, 3, 4), 0)
	want("g2", commit(rc, "g2", 0), 0)
	if c := join("g3"); c != kafka.CodeMemberIDRequired {
		t.Fatalf("join g3: %d", c)
	}
	if c := join("g4"); c != kafka.CodePolicyViolation {
		t.Fatalf("join g4 beyond max_groups: %d", c)
	}
	want("commit g4 beyond max_groups", commit(rc, "g4", 0), kafka.CodePolicyViolation)
	if c := join("g3"); c != kafka.CodeMemberIDRequired {
		t.Fatalf("second member of g3: %d", c)
	}
	if c := join("g3"); c != kafka.CodeGroupMaxSizeReached {
		t.Fatalf("third member of g3 beyond max_group_members: %d", c)
	}
	want("g1 partition 5 beyond max_group_offsets", commit(rc, "g1", 4, 5), kafka.CodePolicyViolation)
	want("g1 again", commit(rc, "g1", 0, 1, 2, 3, 4), 0)
	if st := cs.CapStats(); st.Groups != 3 || st.GroupsRefused != 2 || st.MembersRefused != 1 || st.OffsetsRefused != 1 {
		t.Fatalf("stats %+v", st)
	}
	got, err := cs.offsets.Fetch(context.Background(), "g1")
	if err != nil || len(got) != 5 {
		t.Fatalf("g1 holds %d offsets (%v), want 5", len(got), err)
	}

	// A restart forgets g3 (members are soft state), not g1 and g2.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs.Close(ctx)
	cs = e.startWith(t, caps)
	rc = kafkatest.Dial(t, cs.Addr())
	want("g5 after the restart", commit(rc, "g5", 0), 0)
	want("g6 beyond max_groups after the restart", commit(rc, "g6", 0), kafka.CodePolicyViolation)
	want("g1 partition 5 after the restart", commit(rc, "g1", 5), kafka.CodePolicyViolation)

	// Retention: groups without members and without recent commits lose
	// their offsets and stop counting.
	if n, err := cs.expireOffsets(context.Background(), time.Now()); err != nil || n != 0 {
		t.Fatalf("expired %d groups (%v) within the retention", n, err)
	}
	if n, err := cs.expireOffsets(context.Background(), time.Now().Add(DefaultOffsetsRetention+time.Minute)); err != nil || n != 3 {
		t.Fatalf("expired %d groups (%v), want 3", n, err)
	}
	want("g6 after the expiry", commit(rc, "g6", 0), 0)
	if st := cs.CapStats(); st.Groups != 1 || st.GroupsExpired != 3 {
		t.Fatalf("stats after expiry %+v", st)
	}
}
