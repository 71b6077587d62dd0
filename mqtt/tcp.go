package mqtt

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// errDecoderPanic stops a client whose input made mochi panic.
var errDecoderPanic = errors.New("mqtt: client input made the broker panic")

// tcpListener is mochi's listeners.Net with one addition: each connection's
// goroutine recovers from a panic in mochi, so that one malformed packet
// closes one connection instead of the node. mochi v2.7.9 panics on an MQTT
// 5 SUBSCRIBE whose last filter lacks its options byte (packets.go
// SubscribeDecode indexes buf[offset] unchecked); FuzzPacketHandlingServer found it,
// testdata/fuzz/FuzzPacketHandlingServer/b401cf28dd7072c2 reproduces it.
type tcpListener struct {
	id       string
	protocol string // tcp, or mqtts over TLS
	ln       net.Listener
	log      *slog.Logger
	recover  func(net.Conn, any)

	mu     sync.Mutex
	closed bool
}

func newTCPListener(id string, ln net.Listener, recover func(net.Conn, any)) *tcpListener {
	return &tcpListener{id: id, protocol: "tcp", ln: ln, recover: recover}
}

func (l *tcpListener) ID() string                  { return l.id }
func (l *tcpListener) Address() string             { return l.ln.Addr().String() }
func (l *tcpListener) Protocol() string            { return l.protocol }
func (l *tcpListener) Init(log *slog.Logger) error { l.log = log; return nil }

func (l *tcpListener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		go func() {
			defer func() {
				if r := recover(); r != nil {
					l.recover(conn, r)
				}
			}()
			if err := establish(l.id, conn); err != nil {
				l.log.Debug("client ended", "error", err, "remote", conn.RemoteAddr())
			}
		}()
	}
}

func (l *tcpListener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	first := !l.closed
	l.closed = true
	l.mu.Unlock()
	if first {
		closeClients(l.id)
	}
	_ = l.ln.Close()
}

// recoverClient cleans up after mochi panicked while serving conn: the
// deferred parts of mochi's attachClient have run (connection count, wait
// group); what follows its read loop has not, so stop the client and drop a
// session that expires on disconnect, as attachClient would have.
func (s *Server) recoverClient(conn net.Conn, r any) {
	stack := string(debug.Stack())
	s.log.Error("broker panicked on client input; connection closed",
		"panic", fmt.Sprint(r), "remote", conn.RemoteAddr(), "stack", stack)
	s.lastPanic.Store(stack)
	s.panics.Add(1)
	_ = conn.Close()
	for _, cl := range s.broker.Clients.GetAll() {
		if cl.Net.Conn != conn {
			continue
		}
		cl.Stop(errDecoderPanic)
		expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) ||
			(cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
		if expire && !cl.IsTakenOver() {
			cl.ClearInflights()
			s.broker.UnsubscribeClient(cl)
			s.broker.Clients.Delete(cl.ID)
			s.auth.forget(cl)
		}
	}
}
