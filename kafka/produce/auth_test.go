package produce

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
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

// authEnv is a produce server that requires authentication: alice and
// the token subject dave may produce to factory.*, bob to other.* only,
// carol to nothing. Auto-creation is on.
type authEnv struct {
	sec *kafkatest.Security
	be  *fakeBackend
	s   *Server
}

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	sec := kafkatest.NewSecurity(t, "alice", "bob", "carol")
	a := sec.Authority(t,
		auth.Rule{Principal: "alice", Allow: []auth.Action{auth.Produce}, Streams: []string{"factory.*"}},
		auth.Rule{Principal: "dave", Allow: []auth.Action{auth.Produce}, Streams: []string{"factory.*"}},
		auth.Rule{Principal: "bob", Allow: []auth.Action{auth.Produce}, Streams: []string{"other.*"}})
	be := newFakeBackend("edge-1")
	be.addStream("factory.events", "edge-1")
	be.addStream("other.events", "edge-1")
	s := startServer(t, Config{Config: kafka.Config{Auth: a}, AutoCreate: true}, be)
	return &authEnv{sec: sec, be: be, s: s}
}

func (e *authEnv) client(t *testing.T, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(e.s.Addr()), kgo.ClientID("auth-test"), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2), kgo.RetryTimeout(3 * time.Second)}, opts...)
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produceSync(cl *kgo.Client, topic, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// TestAuthProduceMechanisms: kgo with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
// and OAUTHBEARER, and sarama with PLAIN, produce; every record carries
// its principal.
func TestAuthProduceMechanisms(t *testing.T) {
	e := newAuthEnv(t)
	want := map[string]string{}
	for name, m := range map[string]sasl.Mechanism{
		"plain":      plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism(),
		"scram-256":  scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism(),
		"scram-512":  scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism(),
		"oauth":      oauth.Auth{Token: e.sec.Token(t, "dave", time.Now().Add(time.Hour))}.AsMechanism(),
		"idempotent": plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism(),
	} {
		if err := produceSync(e.client(t, m), "factory.events", name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want[name] = "alice"
		if name == "oauth" {
			want[name] = "dave"
		}
	}

	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Metadata.Retry.Max = 1
	cfg.Net.SASL.Enable, cfg.Net.SASL.Mechanism = true, sarama.SASLTypePlaintext
	cfg.Net.SASL.User, cfg.Net.SASL.Password = "alice", "alice-pw"
	p, err := sarama.NewSyncProducer([]string{e.s.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "factory.events", Value: sarama.StringEncoder("sarama")}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	want["sarama"] = "alice"

	got := map[string]string{}
	for _, r := range e.be.records("factory.events", 0) {
		got[string(r.Value)] = r.Principal
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records and principals %v, want %v", got, want)
	}
}

// TestAuthProduceDenied: a principal without rights to a topic gets
// TOPIC_AUTHORIZATION_FAILED from Produce and Metadata and creates
// nothing; listings show only its topics; wrong credentials and none get
// no further than SASL; nothing of theirs is written.
func TestAuthProduceDenied(t *testing.T) {
	e := newAuthEnv(t)
	bob := e.client(t, plain.Auth{User: "bob", Pass: "bob-pw"}.AsMechanism())
	for _, topic := range []string{"factory.events", "factory.new"} {
		if err := produceSync(bob, topic, "bob"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("bob -> %s: %v", topic, err)
		}
	}
	if _, err := e.be.Topic(context.Background(), "factory.new"); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("a denied produce created the stream: %v", err)
	}
	if err := produceSync(bob, "other.events", "bob"); err != nil {
		t.Fatal(err)
	}
	alice := e.client(t, scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism())
	if err := produceSync(alice, "factory.new", "alice"); err != nil {
		t.Fatalf("alice auto-creating factory.new: %v", err)
	}

	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	ctx := context.Background()
	resp, err := md.RequestWith(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || *resp.Topics[0].Topic != "other.events" {
		t.Fatalf("bob's listing: %+v", resp.Topics)
	}
	named := kmsg.NewPtrMetadataRequest()
	named.Version = 12
	for _, n := range []string{"factory.events", "factory.missing"} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		named.Topics = append(named.Topics, rt)
	}
	named.AllowAutoTopicCreation = true
	if resp, err = named.RequestWith(ctx, bob); err != nil {
		t.Fatal(err)
	}
	for _, mt := range resp.Topics {
		if mt.ErrorCode != kafka.CodeTopicAuthorizationFailed {
			t.Fatalf("bob's metadata for %s: %d", *mt.Topic, mt.ErrorCode)
		}
	}
	if _, err := e.be.Topic(ctx, "factory.missing"); !errors.Is(err, ErrUnknownStream) {
		t.Fatal("a denied metadata request created the stream")
	}

	for name, m := range map[string]sasl.Mechanism{
		"wrong password": plain.Auth{User: "alice", Pass: "nope"}.AsMechanism(),
		"wrong scram":    scram.Auth{User: "alice", Pass: "nope"}.AsSha512Mechanism(),
		"unknown user":   scram.Auth{User: "mallory", Pass: "x"}.AsSha256Mechanism(),
		"expired token":  oauth.Auth{Token: e.sec.Token(t, "dave", time.Now().Add(-time.Minute))}.AsMechanism(),
	} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, e.client(t, m, kgo.RequestRetries(0)))
		cancel()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	carol := e.client(t, plain.Auth{User: "carol", Pass: "carol-pw"}.AsMechanism())
	if err := produceSync(carol, "factory.events", "carol"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("carol: %v", err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.client(t, nil).ProduceSync(ctx2, &kgo.Record{Topic: "factory.events", Value: []byte("anonymous")}).FirstErr(); err == nil {
		t.Fatal("an unauthenticated client produced")
	}
	for _, r := range e.be.records("factory.events", 0) {
		t.Fatalf("a refused client wrote %q (principal %q)", r.Value, r.Principal)
	}
}

// TestAuthProducerIDBound: a producer id belongs to the principal that
// got it; another principal's batch with it is INVALID_PRODUCER_ID_MAPPING
// and not written. The binding survives a restart through the runs.
func TestAuthProducerIDBound(t *testing.T) {
	e := newAuthEnv(t)
	conn := func(user string) *kafkatest.Conn {
		c := kafkatest.Dial(t, e.s.Addr())
		if _, ar := c.SASL("PLAIN", 2, kafkatest.Plain(user, kafkatest.Password(user))); ar.ErrorCode != 0 {
			t.Fatalf("%s: %+v", user, ar)
		}
		return c
	}
	alice, bob := conn("alice"), conn("bob")
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	pid := alice.RoundTrip(ip).(*kmsg.InitProducerIDResponse).ProducerID
	batch := func(seq int32) []byte {
		return kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Seq: seq}, kafkatest.Rec{Value: []byte(fmt.Sprint(seq))})
	}
	if p := produceOne(bob, "other.events", 0, batch(0)); p.ErrorCode != kafka.CodeInvalidProducerIDMapping {
		t.Fatalf("bob with alice's producer id: %+v", p)
	}
	if p := produceOne(alice, "factory.events", 0, batch(0)); p.ErrorCode != 0 {
		t.Fatalf("alice: %+v", p)
	}
	if n := len(e.be.records("other.events", 0)); n != 0 {
		t.Fatalf("%d records written with a stolen producer id", n)
	}

	// After a restart the binding comes back from the records' runs.
	runs, _ := e.be.ProducerRuns(context.Background())
	p := newProducers(time.Hour)
	p.load(runs)
	if p.claim(pid, "bob") || !p.claim(pid, "alice") {
		t.Fatal("binding not rebuilt from the runs")
	}
}

// TestAuthTokenReauthentication: kgo re-authenticates (KIP-368) with a
// fresh token before the session lifetime the server gave ends, so an
// OAUTHBEARER producer keeps its connection across token expiries.
func TestAuthTokenReauthentication(t *testing.T) {
	e := newAuthEnv(t)
	var tokens atomic.Int64
	m := oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		tokens.Add(1)
		return oauth.Auth{Token: e.sec.Token(t, "dave", time.Now().Add(3*time.Second))}, nil
	})
	cl := e.client(t, m)
	deadline := time.Now().Add(7 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		if err := produceSync(cl, "factory.events", fmt.Sprint(n)); err != nil {
			t.Fatalf("record %d: %v", n, err)
		}
		n++
		time.Sleep(200 * time.Millisecond)
	}
	if conns := e.s.conn.Stats().Accepted; tokens.Load() <= conns {
		t.Fatalf("%d tokens for %d connections in 7s of 3s tokens: no re-authentication in place", tokens.Load(), conns)
	}
	for _, r := range e.be.records("factory.events", 0) {
		if r.Principal != "dave" {
			t.Fatalf("record %q: principal %q", r.Value, r.Principal)
		}
	}
}
