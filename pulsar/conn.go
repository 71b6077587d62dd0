package pulsar

// conn: one client connection.
//
// Invariants:
//   - Commands are read and handled one at a time on the connection's read
//     goroutine, in order; the first must be CONNECT.
//   - Everything written goes through one ordered queue drained by the
//     writer goroutine, so a consumer's MESSAGEs, ACTIVE_CONSUMER_CHANGE,
//     CLOSE_CONSUMER and command replies reach the client in the order
//     they were queued. Queuing never blocks (Consumer.Deliver must not):
//     while more than Config.MaxConnectionBacklog bytes are queued or being written, the
//     connection's consumers are Backlogged (the dispatcher gives them
//     nothing more, however many permits they have) until the writer has
//     caught up and wakes their subscriptions; a client that stops reading
//     until the queue still exceeds maxQueuedBytes is disconnected.
//   - When the connection ends, for whatever reason, each of its consumers
//     is marked closed (later deliveries are dropped) and removed from its
//     subscription, which hands its unacknowledged messages back.
//   - Keep-alive: the connection is sent a PING after KeepAlive without
//     any frame from the client and closed after twice that.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/pulsar/wire"

	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar/pb"
	"github.com/tributary-io/tributary/tables"
)

// maxQueuedBytes bounds a connection's unsent frames.
const maxQueuedBytes = 256 << 20

// DefaultMaxConnectionBacklog is Config.MaxConnectionBacklog's default:
// how much a connection may have queued or being written before its
// consumers are Backlogged (a client with a million permits that stops
// reading made the node hold 256 MiB a connection before).
const DefaultMaxConnectionBacklog = 4 << 20

type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger

	lastRecv atomic.Int64 // unix nanos of the last frame received

	// Set by CONNECT, read on the read goroutine only.
	connected bool
	version   int32
	// principal: who authenticated; authRefresh: it did with a token and
	// the client answers AUTH_CHALLENGE.
	principal   auth.Principal
	authRefresh bool

	// expiry: when the token expires (zero: never); expireTimer then
	// challenges the client for a fresh one or closes the connection
	// (auth.go).
	amu         sync.Mutex
	expiry      time.Time
	expireTimer *time.Timer
	// brokerEntry: the client reads broker entry metadata (read by
	// Deliver on dispatch goroutines, hence atomic).
	brokerEntry atomic.Bool

	wmu     sync.Mutex
	out     []byte // frames not yet written
	spare   []byte
	writing int  // bytes of the write in progress
	behind  bool // Backlogged said so: wake the consumers' subscriptions once caught up
	closed  bool
	wake    chan struct{}

	cmu       sync.Mutex
	consumers map[uint64]*consumer

	pmu       sync.Mutex
	producers map[uint64]*producer
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String()),
		wake: make(chan struct{}, 1), consumers: map[uint64]*consumer{}, producers: map[uint64]*producer{}}
	c.lastRecv.Store(time.Now().UnixNano())
	return c
}

// serve runs the connection until it ends.
func (c *conn) serve(ctx context.Context) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.writeLoop(done) }()
	go func() { defer wg.Done(); c.keepAlive(done) }()
	err := c.readLoop(ctx)
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), listen.TLSHandshakeFailed(c.nc):
		c.log.Debug("pulsar connection closed", "err", err)
	case errors.Is(err, errAuthFailed):
		c.log.Debug("pulsar closing connection", "err", err)
	default:
		c.log.Warn("pulsar closing connection", "err", err)
	}
	c.nc.Close()
	c.amu.Lock()
	if c.expireTimer != nil {
		c.expireTimer.Stop()
	}
	c.amu.Unlock()
	c.cmu.Lock()
	cs := c.consumers
	c.consumers = map[uint64]*consumer{}
	c.cmu.Unlock()
	for _, k := range cs {
		k.detach()
	}
	c.dropProducers()
	close(done)
	wg.Wait()
}

func (c *conn) readLoop(ctx context.Context) error {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	for {
		// A producer's frame is a message of up to MaxFrameBytes, its
		// command and metadata.
		f, b, err := wire.ReadFrame(br, c.s.cfg.MaxFrameBytes+wire.FramePadding, buf)
		if cap(b) <= 1<<20 {
			buf = b
		}
		if errors.Is(err, wire.ErrChecksum) && f.Cmd.GetType() == pb.BaseCommand_SEND && f.Cmd.Send != nil && c.connected {
			// The frame is whole: refuse the message, keep the connection
			// (the client checks its copy and resends or fails it).
			c.lastRecv.Store(time.Now().UnixNano())
			c.refuseCorrupt(f.Cmd.Send, err)
			continue
		}
		if err != nil {
			return err
		}
		c.lastRecv.Store(time.Now().UnixNano())
		if err := c.handle(ctx, f); err != nil {
			return err
		}
	}
}

// errMissing is a command whose type names a field that is absent.
func errMissing(t pb.BaseCommand_Type) error {
	return fmt.Errorf("%w: %v without its body", wire.ErrMalformedFrame, t)
}

// testPanicOn, set by a test, makes handle panic on that command type (the
// listener's panic recovery is tested with it).
var testPanicOn pb.BaseCommand_Type

// handle dispatches one command; an error closes the connection.
func (c *conn) handle(ctx context.Context, f wire.Frame) error {
	cmd := f.Cmd
	t := cmd.GetType()
	if testPanicOn != 0 && t == testPanicOn {
		panic("test: panic on command " + t.String())
	}
	if !c.connected && t != pb.BaseCommand_CONNECT {
		return fmt.Errorf("%w: %v before CONNECT", wire.ErrMalformedFrame, t)
	}
	var ok = true
	switch t {
	case pb.BaseCommand_CONNECT:
		if ok = cmd.Connect != nil; ok {
			return c.handleConnect(cmd.Connect)
		}
	case pb.BaseCommand_PING:
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case pb.BaseCommand_PONG:
		// lastRecv is updated for every frame.
	case pb.BaseCommand_PARTITIONED_METADATA:
		if ok = cmd.PartitionMetadata != nil; ok {
			c.handlePartitionedMetadata(ctx, cmd.PartitionMetadata)
		}
	case pb.BaseCommand_LOOKUP:
		if ok = cmd.LookupTopic != nil; ok {
			c.handleLookup(ctx, cmd.LookupTopic)
		}
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		if ok = cmd.GetTopicsOfNamespace != nil; ok {
			c.handleTopicsOfNamespace(ctx, cmd.GetTopicsOfNamespace)
		}
	case pb.BaseCommand_SUBSCRIBE:
		if ok = cmd.Subscribe != nil; ok {
			c.handleSubscribe(ctx, cmd.Subscribe)
		}
	case pb.BaseCommand_FLOW:
		if ok = cmd.Flow != nil; ok {
			c.handleFlow(cmd.Flow)
		}
	case pb.BaseCommand_ACK:
		if ok = cmd.Ack != nil; ok {
			c.handleAck(ctx, cmd.Ack)
		}
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		if ok = cmd.RedeliverUnacknowledgedMessages != nil; ok {
			c.handleRedeliver(cmd.RedeliverUnacknowledgedMessages)
		}
	case pb.BaseCommand_SEEK:
		if ok = cmd.Seek != nil; ok {
			c.handleSeek(ctx, cmd.Seek)
		}
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		if ok = cmd.GetLastMessageId != nil; ok {
			c.handleGetLastMessageID(ctx, cmd.GetLastMessageId)
		}
	case pb.BaseCommand_UNSUBSCRIBE:
		if ok = cmd.Unsubscribe != nil; ok {
			c.handleUnsubscribe(ctx, cmd.Unsubscribe)
		}
	case pb.BaseCommand_CLOSE_CONSUMER:
		if ok = cmd.CloseConsumer != nil; ok {
			c.handleCloseConsumer(cmd.CloseConsumer)
		}
	case pb.BaseCommand_AUTH_RESPONSE:
		return c.handleAuthResponse(cmd)
	case pb.BaseCommand_PRODUCER:
		if ok = cmd.Producer != nil; ok {
			c.handleProducer(ctx, cmd.Producer)
		}
	case pb.BaseCommand_CLOSE_PRODUCER:
		if ok = cmd.CloseProducer != nil; ok {
			c.handleCloseProducer(cmd.CloseProducer)
		}
	case pb.BaseCommand_SEND:
		if ok = cmd.Send != nil; ok {
			c.handleSend(ctx, f)
		}
	default:
		// Commands of features this server does not offer (schemas,
		// transactions, stats, topic watchers): clients only send them
		// after asking for the feature, which is refused; ignore.
		c.log.Debug("pulsar: ignoring command", "type", t)
	}
	if !ok {
		return errMissing(t)
	}
	return nil
}

// send queues a simple command.
func (c *conn) send(cmd *pb.BaseCommand) {
	c.enqueue(func(b []byte) ([]byte, error) { return wire.AppendCommand(b, cmd) })
}

// enqueue appends frames to the write queue with enc and wakes the writer.
func (c *conn) enqueue(enc func([]byte) ([]byte, error)) {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return
	}
	out, err := enc(c.out)
	c.out = out
	over := len(out) > maxQueuedBytes
	c.wmu.Unlock()
	if err != nil {
		c.log.Error("pulsar: encode", "err", err)
		return
	}
	if over {
		c.log.Warn("pulsar: client is not reading; closing", "queued_bytes", len(out))
		c.nc.Close()
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Backlogged tells whether more than Config.MaxConnectionBacklog bytes are queued or being
// written (see the package invariants).
func (c *conn) Backlogged() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.out)+c.writing > c.s.cfg.MaxConnectionBacklog {
		c.behind = true
	}
	return c.behind
}

// caughtUp wakes the subscriptions of c's consumers once a backlog has
// gone.
func (c *conn) caughtUp() {
	c.wmu.Lock()
	wake := c.behind && len(c.out)+c.writing <= c.s.cfg.MaxConnectionBacklog
	if wake {
		c.behind = false
	}
	c.wmu.Unlock()
	if !wake {
		return
	}
	c.cmu.Lock()
	subs := make([]*Subscription, 0, len(c.consumers))
	for _, k := range c.consumers {
		if k.sub != nil {
			subs = append(subs, k.sub)
		}
	}
	c.cmu.Unlock()
	for _, s := range subs {
		s.Wake()
	}
}

func (c *conn) writeLoop(done <-chan struct{}) {
	defer func() {
		c.wmu.Lock()
		c.closed = true
		c.out = nil
		c.wmu.Unlock()
	}()
	for {
		select {
		case <-c.wake:
		case <-done:
			return
		}
		c.wmu.Lock()
		buf := c.out
		c.out = c.spare[:0]
		c.writing = len(buf)
		c.wmu.Unlock()
		if len(buf) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.nc.Write(buf); err != nil {
				c.log.Debug("pulsar write", "err", err)
				c.nc.Close()
				return
			}
		}
		if cap(buf) > 4<<20 {
			buf = nil
		}
		c.wmu.Lock()
		c.spare = buf[:0]
		c.writing = 0
		c.wmu.Unlock()
		c.caughtUp()
	}
}

// keepAlive pings a silent client and closes a dead one.
func (c *conn) keepAlive(done <-chan struct{}) {
	ka := c.s.cfg.KeepAlive
	t := time.NewTicker(ka / 2)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, c.lastRecv.Load()))
		switch {
		case idle >= 2*ka:
			c.log.Warn("pulsar: keep-alive timeout; closing", "idle", idle.Round(time.Millisecond))
			c.nc.Close()
			return
		case idle >= ka:
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
		}
	}
}

func (c *conn) sendSuccess(reqID uint64) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(reqID)}})
}

func (c *conn) sendError(reqID uint64, code pb.ServerError, msg string) {
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(reqID), Error: code.Enum(), Message: proto.String(msg)}})
}

// consumer returns the connection's consumer id, or nil.
func (c *conn) consumer(id uint64) *consumer {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.consumers[id]
}

// dropConsumer forgets consumer id and returns it, or nil.
func (c *conn) dropConsumer(id uint64) *consumer {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	k := c.consumers[id]
	delete(c.consumers, id)
	return k
}

// errorCode maps the errors of subscriptions and topics to ServerError.
func errorCode(err error) pb.ServerError {
	switch {
	case errors.Is(err, auth.ErrDenied):
		return pb.ServerError_AuthorizationError
	case errors.Is(err, tributary.ErrUnauthorized):
		return pb.ServerError_AuthenticationError
	case errors.Is(err, ErrConsumerBusy):
		return pb.ServerError_ConsumerBusy
	case errors.Is(err, ErrTooMany):
		return pb.ServerError_TooManyRequests
	case errors.Is(err, ErrSubscriptionNotFound):
		return pb.ServerError_SubscriptionNotFound
	case errors.Is(err, ErrNotAllowed):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, ErrClosed):
		return pb.ServerError_ServiceNotReady
	case errors.Is(err, ErrTopicName):
		return pb.ServerError_InvalidTopicName
	case errors.Is(err, tables.ErrNoSuchStream), errors.Is(err, errNoPartition), errors.Is(err, tributary.ErrUnknownStream):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, wire.ErrPayloadTooLarge), errors.Is(err, wire.ErrBadPayload), errors.Is(err, errBadSend):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, tributary.ErrUnavailable):
		return pb.ServerError_ServiceNotReady
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return pb.ServerError_ServiceNotReady
	}
	return pb.ServerError_UnknownError
}
