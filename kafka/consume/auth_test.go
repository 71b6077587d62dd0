package consume

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// startAuthCloud serves one stream of 20 rows to authenticated clients:
// analytics may consume factory.* in groups dash-*, the token subject
// dave factory.* in any group, bob other.* only.
func startAuthCloud(t *testing.T) (*Server, *kafkatest.Security) {
	t.Helper()
	sec := kafkatest.NewSecurity(t, "analytics", "bob")
	e := newCloudEnv(t, "n1")
	e.auth = sec.Authority(t,
		auth.Rule{Principal: "analytics", Allow: []auth.Action{auth.Consume}, Streams: []string{"factory.*"}, Groups: []string{"dash-*"}},
		auth.Rule{Principal: "dave", Allow: []auth.Action{auth.Consume}, Streams: []string{"factory.*"}},
		auth.Rule{Principal: "bob", Allow: []auth.Action{auth.Consume}, Streams: []string{"other.*"}})
	e.commit(0, 20, 10)
	return e.start(t), sec
}

// TestAuthConsumeClients: kgo with SCRAM-SHA-512 in a consumer group and
// with OAUTHBEARER without one read every row.
func TestAuthConsumeClients(t *testing.T) {
	cs, sec := startAuthCloud(t)
	for name, c := range map[string]struct {
		m    sasl.Mechanism
		opts []kgo.Opt
	}{
		"scram group": {scram.Auth{User: "analytics", Pass: "analytics-pw"}.AsSha512Mechanism(), []kgo.Opt{kgo.ConsumerGroup("dash-1")}},
		"oauth":       {oauth.Auth{Token: sec.Token(t, "dave", time.Now().Add(time.Hour))}.AsMechanism(), nil},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cs.Addr()), kgo.SASL(c.m), kgo.ConsumeTopics(cloudStream),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := consume(t, cl, 20, 20*time.Second); len(got) != 20 {
			t.Fatalf("%s: %d records", name, len(got))
		}
		if name == "scram group" {
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
		cl.Close()
	}
}

// TestAuthConsumeDenied: topics and groups a principal may not use get
// TOPIC_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED from every
// API, and listings leave them out.
func TestAuthConsumeDenied(t *testing.T) {
	cs, sec := startAuthCloud(t)
	dial := func(user string) *kafkatest.Conn {
		c := kafkatest.Dial(t, cs.Addr())
		if _, ar := c.SASL("PLAIN", 1, kafkatest.Plain(user, kafkatest.Password(user))); ar.ErrorCode != 0 {
			t.Fatalf("%s: %+v", user, ar)
		}
		return c
	}
	bob, analytics := dial("bob"), dial("analytics")

	md := bob.RoundTrip(&kmsg.MetadataRequest{Version: 12}).(*kmsg.MetadataResponse)
	if len(md.Topics) != 0 {
		t.Fatalf("bob's listing: %+v", md.Topics)
	}
	named := kmsg.NewPtrMetadataRequest()
	named.Version = 12
	named.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(cloudStream)}}
	if mt := bob.RoundTrip(named).(*kmsg.MetadataResponse).Topics[0]; mt.ErrorCode != kafka.CodeTopicAuthorizationFailed {
		t.Fatalf("bob's metadata: %+v", mt)
	}
	if mt := analytics.RoundTrip(named).(*kmsg.MetadataResponse).Topics[0]; mt.ErrorCode != 0 || len(mt.Partitions) != 1 {
		t.Fatalf("analytics' metadata: %+v", mt)
	}

	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.MaxWaitMillis, fetch.MaxBytes = 12, 5000, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = cloudStream
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = []kmsg.FetchRequestTopicPartition{fp}
	fetch.Topics = []kmsg.FetchRequestTopic{ft}
	start := time.Now()
	if p := bob.RoundTrip(fetch).(*kmsg.FetchResponse).Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeTopicAuthorizationFailed || len(p.RecordBatches) != 0 {
		t.Fatalf("bob's fetch: %+v", p)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("a denied fetch long-polled")
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 6
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = cloudStream
	lt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -1}}
	lo.Topics = []kmsg.ListOffsetsRequestTopic{lt}
	if p := bob.RoundTrip(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != kafka.CodeTopicAuthorizationFailed || p.Offset != -1 {
		t.Fatalf("bob's list offsets: %+v", p)
	}

	// Groups: analytics may use dash-* only.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKeys = 4, []string{"dash-1", "other"}
	if r := analytics.RoundTrip(fc).(*kmsg.FindCoordinatorResponse); r.Coordinators[0].ErrorCode != 0 ||
		r.Coordinators[1].ErrorCode != kafka.CodeGroupAuthorizationFailed {
		t.Fatalf("find coordinator: %+v", r.Coordinators)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.ProtocolType = 9, "other", 10000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	if r := analytics.RoundTrip(join).(*kmsg.JoinGroupResponse); r.ErrorCode != kafka.CodeGroupAuthorizationFailed {
		t.Fatalf("join: %+v", r)
	}
	for _, req := range []kmsg.Request{
		&kmsg.SyncGroupRequest{Version: 5, Group: "other", MemberID: "m"},
		&kmsg.HeartbeatRequest{Version: 4, Group: "other", MemberID: "m"},
		&kmsg.LeaveGroupRequest{Version: 1, Group: "other", MemberID: "m"},
	} {
		var code int16
		switch r := analytics.RoundTrip(req).(type) {
		case *kmsg.SyncGroupResponse:
			code = r.ErrorCode
		case *kmsg.HeartbeatResponse:
			code = r.ErrorCode
		case *kmsg.LeaveGroupResponse:
			code = r.ErrorCode
		}
		if code != kafka.CodeGroupAuthorizationFailed {
			t.Fatalf("%T: error %d", req, code)
		}
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "dash-1", -1
	for _, topic := range []string{cloudStream, "other.stream"} {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = topic
		ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 5}}
		commit.Topics = append(commit.Topics, ct)
	}
	cr := analytics.RoundTrip(commit).(*kmsg.OffsetCommitResponse)
	if cr.Topics[0].Partitions[0].ErrorCode != 0 || cr.Topics[1].Partitions[0].ErrorCode != kafka.CodeTopicAuthorizationFailed {
		t.Fatalf("commit: %+v", cr.Topics)
	}
	commit.Group = "other"
	if cr := analytics.RoundTrip(commit).(*kmsg.OffsetCommitResponse); cr.Topics[0].Partitions[0].ErrorCode != kafka.CodeGroupAuthorizationFailed {
		t.Fatalf("commit to another group: %+v", cr.Topics)
	}
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version, of.Group = 7, "dash-1"
	if r := analytics.RoundTrip(of).(*kmsg.OffsetFetchResponse); r.ErrorCode != 0 || len(r.Topics) != 1 || r.Topics[0].Partitions[0].Offset != 5 {
		t.Fatalf("offset fetch: %+v", r)
	}
	of.Group = "other"
	if r := analytics.RoundTrip(of).(*kmsg.OffsetFetchResponse); r.ErrorCode != kafka.CodeGroupAuthorizationFailed {
		t.Fatalf("offset fetch of another group: %+v", r)
	}

	// ListGroups shows only the groups the principal may use; DescribeGroups
	// refuses the others.
	dave := kafkatest.Dial(t, cs.Addr())
	if _, ar := dave.SASL("OAUTHBEARER", 1, kafkatest.OAuthBearer(sec.Token(t, "dave", time.Now().Add(time.Hour)))); ar.ErrorCode != 0 {
		t.Fatalf("dave: %+v", ar)
	}
	for c, g := range map[*kafkatest.Conn]string{analytics: "dash-2", dave: "ops"} {
		j := kmsg.NewPtrJoinGroupRequest()
		j.Version, j.Group, j.SessionTimeoutMillis, j.RebalanceTimeoutMillis, j.ProtocolType = 3, g, 30000, 100, "consumer"
		j.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{1}}}
		if r := c.RoundTrip(j).(*kmsg.JoinGroupResponse); r.ErrorCode != 0 {
			t.Fatalf("join %s: %+v", g, r)
		}
	}
	lg := analytics.RoundTrip(&kmsg.ListGroupsRequest{Version: 4}).(*kmsg.ListGroupsResponse)
	if len(lg.Groups) != 1 || lg.Groups[0].Group != "dash-2" || lg.Groups[0].GroupState != "CompletingRebalance" {
		t.Fatalf("analytics' groups: %+v", lg.Groups)
	}
	if lg := dave.RoundTrip(&kmsg.ListGroupsRequest{Version: 4}).(*kmsg.ListGroupsResponse); len(lg.Groups) != 2 {
		t.Fatalf("dave's groups: %+v", lg.Groups)
	}
	dg := analytics.RoundTrip(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"dash-2", "ops"}}).(*kmsg.DescribeGroupsResponse)
	if g := dg.Groups[0]; g.ErrorCode != 0 || len(g.Members) != 1 || g.Members[0].ClientHost != "/127.0.0.1" || g.Protocol != "range" {
		t.Fatalf("describe dash-2: %+v", g)
	}
	if g := dg.Groups[1]; g.ErrorCode != kafka.CodeGroupAuthorizationFailed || len(g.Members) != 0 {
		t.Fatalf("describe ops: %+v", g)
	}

	// kgo sees the errors as Kafka's.
	cl, err := kgo.NewClient(kgo.SeedBrokers(cs.Addr()), kgo.SASL(plain.Auth{User: "analytics", Pass: "analytics-pw"}.AsMechanism()),
		kgo.ConsumeTopics(cloudStream), kgo.ConsumerGroup("not-a-dash"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var groupErr error
	for groupErr == nil && ctx.Err() == nil {
		cl.PollFetches(ctx).EachError(func(_ string, _ int32, err error) { groupErr = err })
	}
	if !errors.Is(groupErr, kerr.GroupAuthorizationFailed) {
		t.Fatalf("kgo in a forbidden group: %v", groupErr)
	}
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, mustClient(t, cs.Addr(), scram.Auth{User: "analytics", Pass: "nope"}.AsSha512Mechanism())); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
}

func mustClient(t *testing.T, addr string, m sasl.Mechanism) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(m), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
