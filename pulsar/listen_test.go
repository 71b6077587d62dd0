package pulsar

import (
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar/pb"
	"google.golang.org/protobuf/proto"
)

// TestListenerDefences: a socket that never sends CONNECT is closed after
// the handshake deadline; a connection whose command makes the handler
// panic is closed alone (counted), and the server keeps serving.
func TestListenerDefences(t *testing.T) {
	s, _ := testServer(t, 3, Config{Limits: listen.Config{HandshakeTimeout: 300 * time.Millisecond}})
	silent := dialRaw(t, s.Addr())
	silent.expectClosed()

	ok := dialRaw(t, s.Addr())
	ok.connect(19, false)
	time.Sleep(500 * time.Millisecond) // past the deadline: a connected client stays

	testPanicOn = pb.BaseCommand_GET_TOPICS_OF_NAMESPACE
	t.Cleanup(func() { testPanicOn = 0 })
	bad := dialRaw(t, s.Addr())
	bad.connect(19, false)
	bad.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(1), Namespace: proto.String("tributary/factory")}})
	bad.expectClosed()
	testkit.Eventually(t, 5*time.Second, "panic counted", func() bool { return s.ListenerStats().Panics == 1 })

	ok.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	ok.expect(pb.BaseCommand_PONG)
	if st := s.ListenerStats(); st.HandshakeTimeouts != 1 {
		t.Fatalf("stats %+v", st)
	}
}
