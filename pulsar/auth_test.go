package pulsar

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tributary-io/tributary/pulsar/wire"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// testAuthority accepts HS256 tokens: reader may consume factory.* with
// subscriptions "ok-*", writer produce to factory.*, nobody else
// anything.
func testAuthority(t *testing.T) (*auth.Authority, func(sub string, exp time.Time) string) {
	t.Helper()
	secret := []byte("0123456789abcdef0123456789abcdef")
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, JWT: auth.JWTConfig{SecretFile: path},
		ACL: []auth.Rule{{Principal: "reader", Allow: []auth.Action{auth.Consume}, Streams: []string{"factory.*"}, Groups: []string{"ok-*"}},
			{Principal: "writer", Allow: []auth.Action{auth.Produce}, Streams: []string{"factory.*"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(sub string, exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return a, sign
}

func (c *rawClient) connectAuth(method string, data string) wire.Frame {
	c.t.Helper()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw"),
		ProtocolVersion: proto.Int32(19), AuthMethodName: proto.String(method), AuthData: []byte(data)}})
	return c.recv()
}

func (c *rawClient) subscribe(sub string, req uint64) wire.Frame {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(testTopic + "-partition-0"), Subscription: proto.String(sub), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(req), RequestId: proto.Uint64(req)}})
	return c.recv()
}

func TestPulsarAuthConnect(t *testing.T) {
	a, sign := testAuthority(t)
	s, _ := testServer(t, 2, Config{Auth: a})
	refused := func(name, method, data string) {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, s.Addr())
			f := c.connectAuth(method, data)
			if f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_AuthenticationError {
				t.Fatalf("got %v, want ERROR AuthenticationError", f.Cmd)
			}
			c.expectClosed()
		})
	}
	refused("anonymous", "", "")
	refused("wrong token", "token", sign("reader", time.Now().Add(time.Hour))+"x")
	refused("expired token", "token", sign("reader", time.Now().Add(-time.Hour)))
	refused("tls without a certificate", "tls", "")
	refused("unknown method", "basic", "reader:pw")

	c := dialRaw(t, s.Addr())
	if f := c.connectAuth("token", sign("reader", time.Now().Add(time.Hour))); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED", f.Cmd)
	}
	if f := c.subscribe("ok-1", 1); f.Cmd.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("allowed subscription: %v", f.Cmd)
	}
	if f := c.subscribe("other", 2); f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("subscription outside the rule: %v", f.Cmd)
	}

	// A principal without rights sees nothing: lookups are refused, the
	// namespace lists no topic.
	o := dialRaw(t, s.Addr())
	o.connectAuth("token", sign("other", time.Now().Add(time.Hour)))
	if f := o.subscribe("ok-1", 1); f.Cmd.GetError().GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("subscribe without rights: %v", f.Cmd)
	}
	o.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(testTopic), RequestId: proto.Uint64(3)}})
	if r := o.expect(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.PartitionMetadataResponse; r.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("partitioned metadata without rights: %v", r)
	}
	o.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(testTopic), RequestId: proto.Uint64(4)}})
	if r := o.expect(pb.BaseCommand_LOOKUP_RESPONSE).Cmd.LookupTopicResponse; r.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("lookup without rights: %v", r)
	}
	listing := func(c *rawClient) []string {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
			Namespace: proto.String("tributary/factory"), RequestId: proto.Uint64(5)}})
		return c.expect(pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE).Cmd.GetTopicsOfNamespaceResponse.GetTopics()
	}
	if got := listing(o); len(got) != 0 {
		t.Fatalf("namespace listing without rights: %v", got)
	}
	if got := listing(c); len(got) != 1 {
		t.Fatalf("namespace listing of the reader: %v", got)
	}
}

func TestPulsarAuthTokenExpiry(t *testing.T) {
	a, sign := testAuthority(t)
	s, _ := testServer(t, 1, Config{Auth: a})
	c := dialRaw(t, s.Addr())
	// The Authority's leeway accepts a token that expired a moment ago;
	// the connection still ends at its expiry. Two seconds: a token's
	// expiry is in whole seconds, so one second could leave almost none
	// and the close could beat CONNECTED.
	if f := c.connectAuth("token", sign("reader", time.Now().Add(2*time.Second))); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", f.Cmd)
	}
	start := time.Now()
	c.expectClosed()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
}

// An open Authority (nothing to authenticate with) does not look at
// credentials: a client configured with a token still connects.
func TestPulsarAuthOpen(t *testing.T) {
	a, err := auth.Open(auth.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testServer(t, 1, Config{Auth: a})
	c := dialRaw(t, s.Addr())
	if f := c.connectAuth("token", "not-a-jwt"); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", f.Cmd)
	}
	if f := c.subscribe("any", 1); f.Cmd.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe: %v", f.Cmd)
	}
}

// A client that announced supports_auth_refresh is challenged at its
// token's expiry and keeps its connection with a later token of the same
// principal; the same token again, another principal's, or no answer
// within the grace close it.
func TestPulsarAuthRefresh(t *testing.T) {
	a, sign := testAuthority(t)
	s, _ := testServer(t, 1, Config{Auth: a})
	defer func(g time.Duration) { authRefreshGrace = g }(authRefreshGrace)
	authRefreshGrace = 2 * time.Second
	connect := func(tok string) *rawClient {
		c := dialRaw(t, s.Addr())
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw"),
			ProtocolVersion: proto.Int32(19), AuthMethodName: proto.String("token"), AuthData: []byte(tok),
			FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}}})
		c.expect(pb.BaseCommand_CONNECTED)
		return c
	}
	challenged := func(c *rawClient) {
		t.Helper()
		f := c.expect(pb.BaseCommand_AUTH_CHALLENGE)
		if m, _, ok := authPayload(f.Cmd); !ok || m != "token" {
			t.Fatalf("challenge %v: method %q", f.Cmd, m)
		}
	}
	soon := func() string { return sign("reader", time.Now().Add(time.Second)) }

	c := connect(soon())
	challenged(c)
	c.send(authCommand(pb.BaseCommand_AUTH_RESPONSE, "raw", "token", []byte(sign("reader", time.Now().Add(time.Hour)))))
	time.Sleep(authRefreshGrace + 500*time.Millisecond)
	if f := c.subscribe("ok-1", 1); f.Cmd.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("after the refresh: %v", f.Cmd)
	}

	for name, answer := range map[string]func(old string) []byte{
		"same token":  func(old string) []byte { return []byte(old) },
		"other user":  func(string) []byte { return []byte(sign("other", time.Now().Add(time.Hour))) },
		"bad token":   func(string) []byte { return []byte("nope") },
		"no response": nil,
	} {
		t.Run(name, func(t *testing.T) {
			tok := soon()
			c := connect(tok)
			challenged(c)
			if answer != nil {
				c.send(authCommand(pb.BaseCommand_AUTH_RESPONSE, "raw", "token", answer(tok)))
			}
			c.expectClosed()
		})
	}
}
