package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// Kafka error codes (the protocol's int16 error_code) used by the produce
// and consume sides, from franz-go's kerr (the protocol's own table) rather
// than written out again.
var (
	CodeUnknownServerError           = kerr.UnknownServerError.Code
	CodeOffsetOutOfRange             = kerr.OffsetOutOfRange.Code
	CodeCorruptMessage               = kerr.CorruptMessage.Code
	CodeUnknownTopicOrPartition      = kerr.UnknownTopicOrPartition.Code
	CodeLeaderNotAvailable           = kerr.LeaderNotAvailable.Code
	CodeNotLeaderOrFollower          = kerr.NotLeaderForPartition.Code
	CodeMessageTooLarge              = kerr.MessageTooLarge.Code
	CodeCoordinatorLoadInProgr       = kerr.CoordinatorLoadInProgress.Code
	CodeCoordinatorNotAvail          = kerr.CoordinatorNotAvailable.Code
	CodeNotCoordinator               = kerr.NotCoordinator.Code
	CodeInvalidTopic                 = kerr.InvalidTopicException.Code
	CodeInvalidRequiredAcks          = kerr.InvalidRequiredAcks.Code
	CodeIllegalGeneration            = kerr.IllegalGeneration.Code
	CodeInconsistentProtocol         = kerr.InconsistentGroupProtocol.Code
	CodeInvalidGroupID               = kerr.InvalidGroupID.Code
	CodeUnknownMemberID              = kerr.UnknownMemberID.Code
	CodeInvalidSessionTimeout        = kerr.InvalidSessionTimeout.Code
	CodeRebalanceInProgress          = kerr.RebalanceInProgress.Code
	CodeUnsupportedVersion           = kerr.UnsupportedVersion.Code
	CodeInvalidRequest               = kerr.InvalidRequest.Code
	CodeOutOfOrderSequence           = kerr.OutOfOrderSequenceNumber.Code
	CodeInvalidProducerEpoch         = kerr.InvalidProducerEpoch.Code
	CodeKafkaStorageError            = kerr.KafkaStorageError.Code
	CodeNotEnoughReplicas            = kerr.NotEnoughReplicas.Code
	CodeNotEnoughReplicasAfterAppend = kerr.NotEnoughReplicasAfterAppend.Code
	CodeOffsetMetadataTooLarge       = kerr.OffsetMetadataTooLarge.Code
	CodeInvalidCommitOffsetSize      = kerr.InvalidCommitOffsetSize.Code
	CodePolicyViolation              = kerr.PolicyViolation.Code
	CodeMemberIDRequired             = kerr.MemberIDRequired.Code
	CodeGroupMaxSizeReached          = kerr.GroupMaxSizeReached.Code
	CodeInvalidRecord                = kerr.InvalidRecord.Code
	CodeTopicAuthorizationFailed     = kerr.TopicAuthorizationFailed.Code
	CodeGroupAuthorizationFailed     = kerr.GroupAuthorizationFailed.Code
	CodeUnsupportedSaslMechanism     = kerr.UnsupportedSaslMechanism.Code
	CodeIllegalSaslState             = kerr.IllegalSaslState.Code
	CodeInvalidProducerIDMapping     = kerr.InvalidProducerIDMapping.Code
	CodeSaslAuthenticationFailed     = kerr.SaslAuthenticationFailed.Code
)

// DefaultAuthorizedOps is "not requested" in Metadata responses.
const DefaultAuthorizedOps int32 = -2147483648

const (
	requestHeaderMinBytes        = 2 + 2 + 4 + 2
	largeFrameIncrementalReadMin = 1 << 20
)

// Errors returned while reading a request; each closes the connection.
var (
	ErrFrameTooLarge   = errors.New("kafka: frame too large")
	ErrMalformed       = errors.New("kafka: malformed request")
	ErrUnsupportedAPI  = errors.New("kafka: unsupported api key")
	ErrUnsupportedVers = errors.New("kafka: unsupported api version")
	ErrServerClosed    = errors.New("kafka: server closed")
)

// Stats are the connection counters of a Server.
type Stats struct {
	Connections     int64 // currently open
	Accepted        int64 // connections accepted since start
	Requests        int64 // requests handled
	ClosedMalformed int64 // connections closed for a bad frame or request
	AuthFailed      int64 // connections closed for a failed SASL authentication
	Unauthenticated int64 // connections closed for a request before authenticating
	// InflightBytes are the request bytes held now (read, not yet
	// answered), at most Config.MaxInflightBytes.
	InflightBytes int64
	// InflightWaits counts frames whose reading waited for
	// MaxInflightBytes (back-pressure on that connection).
	InflightWaits int64
	// Pipelined counts requests read while an earlier request of the
	// same connection was not yet answered.
	Pipelined int64
}

// Handler answers the requests of a Server: the produce side
// (kafka/produce) or the consume side (kafka/consume).
type Handler interface {
	// Handle answers one decoded request. A nil response sends none
	// (Produce with acks=0); closeAfter closes the connection after it.
	// ctx is canceled when Close gives up waiting.
	Handle(ctx context.Context, req *Request) (resp kmsg.Response, closeAfter bool)
}

// Server is the connection machinery of a Kafka listener: accept loop,
// per connection a goroutine reading size-prefixed frames in order and
// one writing the responses in that order (serveConn),
// request decoding against an API table, response framing, graceful
// close. What a request means is its Handler's.
type Server struct {
	cfg     Config
	log     *slog.Logger
	apis    APIs
	handler Handler
	name    string // the component: the listener's name

	ctx    context.Context // canceled by Close after its grace period
	cancel context.CancelFunc
	// stopping is canceled when Close begins: a connection waiting for
	// in-flight bytes gives up.
	stopping context.Context
	stop     context.CancelFunc

	// inflight holds the bytes of every frame read and not yet answered
	// (MaxInflightBytes); strangers, a quarter of it, also those of
	// connections that have not finished their handshake (first request,
	// SASL), so that strangers trickling frames in cannot starve admitted
	// clients. waitLog rate-limits the line about waiting.
	inflight  *semaphore.Weighted
	strangers *semaphore.Weighted
	waitLog   atomic.Int64
	slowLog   atomic.Int64 // rate-limits the line about slow request bodies

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup

	stats struct {
		conns, accepted, requests, malformed, authFailed, unauthenticated atomic.Int64
		inflightBytes, inflightWaits, pipelined                           atomic.Int64
	}
}

// NewServer returns a Server that is not yet listening: it admits the API
// keys and versions of apis and hands each request to h; component names
// it in logs. cfg is validated and its defaults applied.
func NewServer(cfg Config, component string, apis APIs, h Handler) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.SetDefaults()
	if cfg.Auth != nil && (apis[SaslHandshakeKey] != SaslHandshakeVersions || apis[SaslAuthenticateKey] != SaslAuthenticateVersions) {
		return nil, fmt.Errorf("%w: %s: an Authority needs SaslHandshake and SaslAuthenticate in the API table", ErrInvalidConfig, component)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopping, stop := context.WithCancel(context.Background())
	return &Server{
		stopping:  stopping,
		stop:      stop,
		inflight:  semaphore.NewWeighted(int64(cfg.MaxInflightBytes)),
		strangers: semaphore.NewWeighted(max(int64(cfg.MaxInflightBytes)/4, firstFrameBytes+4)),
		cfg:       cfg,
		log:       cfg.Logger.With("component", component),
		apis:      apis,
		handler:   h,
		name:      component,
		ctx:       ctx,
		cancel:    cancel,
		conns:     make(map[net.Conn]struct{}),
	}, nil
}

// Config is the server's configuration with its defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Logger is the server's logger (with its component).
func (s *Server) Logger() *slog.Logger { return s.log }

// Context is canceled when Close stops waiting for connections (or at the
// end of Close): background work of a handler selects on it.
func (s *Server) Context() context.Context { return s.ctx }

// Start listens on cfg.Addr and serves connections in the background;
// attrs are added to its "kafka listening" log line.
func (s *Server) Start(attrs ...any) error {
	lim := s.cfg.Limits
	if lim.Name == "" {
		lim.Name = s.name
	}
	lim.Logger = s.log
	ln, err := listen.Listen(s.cfg.Addr, lim)
	if err != nil {
		return fmt.Errorf("kafka: listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	if s.closing || s.ln != nil {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	s.log.Info("kafka listening", append([]any{"addr", ln.Addr().String()}, attrs...)...)
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

// Cancel cancels the context handed to the Handler now, so that waiting
// requests (long polls, joins) return at once; Close does it too when it
// stops waiting for connections.
func (s *Server) Cancel() { s.cancel() }

// Addr is the listener's address (useful with port 0), or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops accepting, lets each connection finish the request it is
// handling (its response is still written), then closes it. When ctx ends
// first, connections are closed at once and in-flight appends canceled.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.stop()
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.SetReadDeadline(time.Now()) // a handler finishes its request, then exits
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Connections:     s.stats.conns.Load(),
		Accepted:        s.stats.accepted.Load(),
		Requests:        s.stats.requests.Load(),
		ClosedMalformed: s.stats.malformed.Load(),
		AuthFailed:      s.stats.authFailed.Load(),
		Unauthenticated: s.stats.unauthenticated.Load(),
		InflightBytes:   s.stats.inflightBytes.Load(),
		InflightWaits:   s.stats.inflightWaits.Load(),
		Pipelined:       s.stats.pipelined.Load(),
	}
}

func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary (e.g. EMFILE): back off, like net/http.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("kafka accept", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.stats.accepted.Add(1)
		s.stats.conns.Add(1)
		go ln.(*listen.Listener).Protect(c, func() { s.serveConn(c) })
	}
}

// ListenerStats are the listener's connection counters (zero before Start).
func (s *Server) ListenerStats() listen.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.ln.(*listen.Listener); ok {
		return l.Stats()
	}
	return listen.Stats{}
}

// Request is one decoded request with its header.
type Request struct {
	Key      int16
	Version  int16
	CorrID   int32
	ClientID string
	Flexible bool // request header v2
	Body     kmsg.Request
	// Unsupported is set for an ApiVersions request of a version we do not
	// know; it is answered with UNSUPPORTED_VERSION, not decoded.
	Unsupported bool
	// Principal is who the connection authenticated as (SASL, else its
	// verified TLS client certificate), or the anonymous principal; set by
	// the Server before the Handler runs.
	Principal auth.Principal
	// Remote is the client's address.
	Remote string
	auth   *auth.Authority // the Server's; nil = everything allowed
}

// Authorize tells whether the connection's principal may perform action
// on stream (a topic) and group (either may be ""): auth.Authority's
// decision, each denial audited and counted. Without an Authority
// everything is allowed.
func (r *Request) Authorize(action auth.Action, stream, group string) bool {
	if r.auth == nil {
		return true
	}
	return r.auth.Authorize(r.authRequest(action, stream, group)) == nil
}

// Allowed is Authorize without the audit line, for filtering what a
// listing shows.
func (r *Request) Allowed(action auth.Action, stream, group string) bool {
	return r.auth == nil || r.auth.Allowed(r.authRequest(action, stream, group))
}

func (r *Request) authRequest(action auth.Action, stream, group string) auth.Request {
	return auth.Request{Client: auth.Client{Protocol: "kafka", Remote: r.Remote}, Principal: r.Principal,
		Action: action, Stream: stream, Group: group}
}

// Starter is implemented by a Handler that answers some requests in two
// steps, so that one connection can have several of them in progress
// (Produce waiting for its fsync). StartRequest runs on the connection's read
// goroutine, in request order, and must not wait long: whatever order
// matters (appends queued to the log) is decided there. When ok is false
// the request is not the Starter's and Handle answers it. finish is
// called once, on the connection's writer goroutine in request order,
// and returns the response as Handle would; it may wait (for the fsync).
type Starter interface {
	StartRequest(ctx context.Context, req *Request) (finish func() (resp kmsg.Response, closeAfter bool), ok bool)
}

// reply is one request's place in a connection's response order.
type reply struct {
	raw        []byte // a pre-encoded response (SASL v0 token)
	req        *Request
	resp       kmsg.Response
	finish     func() (kmsg.Response, bool) // Starter; nil = resp is final
	closeAfter bool
	held       int64 // in-flight bytes (inflight, strangers) released once answered
	heldPre    int64
}

// serveConn serves one connection: this goroutine reads and decodes
// requests in order and handles (or, for a Starter, starts) each; a
// writer goroutine writes the responses strictly in request order, as
// Kafka requires, waiting for each one's finish. At most
// MaxPipelinedRequests requests of a connection are between being read
// and being answered; the next frame is not read until one is answered.
// Any framing or decoding error closes this connection only, after the
// responses of the requests before it are written. ApiVersions is the
// Handler's; SASL is answered here (sasl.go), and no other request
// reaches the Handler before the connection is authenticated or admitted
// as anonymous.
func (s *Server) serveConn(c net.Conn) {
	var held, heldPre int64 // in-flight bytes of a frame read and not yet handed to the writer
	release := func(held, heldPre int64) {
		if held > 0 {
			s.inflight.Release(held)
			s.stats.inflightBytes.Add(-held)
		}
		if heldPre > 0 {
			s.strangers.Release(heldPre)
		}
	}
	remote := c.RemoteAddr().String()
	log := s.log.With("remote", remote)
	slots := make(chan struct{}, s.cfg.MaxPipelinedRequests)
	replies := make(chan *reply, s.cfg.MaxPipelinedRequests)
	wrote := make(chan struct{})
	s.mu.Lock()
	ln, _ := s.ln.(*listen.Listener)
	s.mu.Unlock()
	go func() {
		defer close(wrote)
		if err := ln.Protect(c, func() { s.writeReplies(c, replies, slots, release, log) }); err != nil {
			// The writer panicked (logged, connection closed): free the
			// slot of the reply it held and drain the rest, so that the
			// reader, failing on the closed connection, can end.
			<-slots
			for r := range replies {
				release(r.held, r.heldPre)
				<-slots
			}
		}
	}()
	defer func() {
		release(held, heldPre)
		close(replies)
		<-wrote
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.stats.conns.Add(-1)
		s.wg.Done()
	}()
	starter, _ := s.handler.(Starter)
	br := bufio.NewReaderSize(c, 64<<10)
	sess := &session{a: s.cfg.Auth, client: auth.Client{Protocol: "kafka", Remote: remote}}
	maxFrame := min(s.cfg.MaxFrameBytes, firstFrameBytes)
	ready := false
	markReady := func() {
		if !ready {
			listen.Ready(c) // it speaks Kafka (and has authenticated): the handshake deadline is met
			ready, maxFrame = true, s.cfg.MaxFrameBytes
		}
	}
	queue := func(r *reply) {
		r.held, r.heldPre = held, heldPre
		held, heldPre = 0, 0
		replies <- r // never blocks: a slot was taken for it
	}
	for {
		slots <- struct{}{} // at most MaxPipelinedRequests between read and answered
		// Under mu, so that Close's SetReadDeadline(now) cannot be
		// overwritten by ours.
		s.mu.Lock()
		closing := s.closing
		if !closing {
			deadline := time.Now().Add(s.cfg.IdleTimeout)
			if !sess.expires.IsZero() && sess.expires.Before(deadline) {
				deadline = sess.expires // an idle connection ends with its token
			}
			c.SetReadDeadline(deadline)
		}
		s.mu.Unlock()
		if closing {
			return
		}
		if sess.raw { // SaslHandshake v0: bare tokens until the exchange ends
			tok, err := readRawToken(br, MaxSASLMessageBytes)
			if err != nil {
				if !errors.Is(err, io.EOF) && !isTimeout(err) && !errors.Is(err, net.ErrClosed) {
					log.Warn("kafka closing connection", "err", err)
				}
				return
			}
			answer, done, err := sess.step(tok)
			if err != nil {
				s.stats.authFailed.Add(1)
				return // v0 has no error response: Kafka closes the connection
			}
			queue(&reply{raw: appendRawToken(nil, answer)})
			if done {
				sess.raw = false
				markReady()
			}
			continue
		}
		frame, n, pre, err := s.readFrame(c, br, maxFrame, !ready, log)
		held, heldPre = n, pre
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTimeout(err) && !errors.Is(err, net.ErrClosed) && !listen.TLSHandshakeFailed(c) {
				s.stats.malformed.Add(1)
				log.Warn("kafka closing connection", "err", err)
			}
			return
		}
		req, err := DecodeRequest(frame, s.apis)
		if err != nil {
			s.stats.malformed.Add(1)
			log.Warn("kafka closing connection", "err", err)
			return
		}
		s.stats.requests.Add(1)
		if len(slots) > 1 { // this request's slot and an earlier one's
			s.stats.pipelined.Add(1)
		}
		if sess.expired(time.Now()) {
			log.Info("kafka closing connection: SASL session expired", "principal", sess.principal.String())
			return
		}
		r := &reply{req: req}
		switch body := req.Body.(type) {
		case *kmsg.SASLHandshakeRequest:
			r.resp, r.closeAfter = sess.handshake(body)
		case *kmsg.SASLAuthenticateRequest:
			r.resp, r.closeAfter = sess.authenticate(body)
			if r.closeAfter {
				s.stats.authFailed.Add(1)
			} else if sess.authenticated && sess.mech == "" {
				markReady()
			}
		default:
			if sess.mech != "" {
				log.Info("kafka closing connection: request in the middle of a SASL exchange", "key", req.Key)
				return
			}
			if !sess.authenticated && req.Key != ApiVersionsKey && !sess.admitWithoutSASL(c) {
				s.stats.unauthenticated.Add(1)
				log.Debug("kafka closing connection: request before authentication", "key", req.Key, "client", req.ClientID) // audited by the Authority
				// Nothing written, as Kafka does.
				return
			}
			if !sess.required() || sess.authenticated {
				markReady()
			}
			req.Principal, req.Remote, req.auth = sess.principal, remote, s.cfg.Auth
			started := false
			if starter != nil && ready {
				r.finish, started = starter.StartRequest(s.ctx, req)
			}
			if !started {
				r.resp, r.closeAfter = s.handler.Handle(s.ctx, req)
			}
		}
		frame = nil
		closeAfter := r.closeAfter // r is the writer's once queued
		queue(r)
		if closeAfter {
			return // the writer writes it (and everything before it), then the connection closes
		}
	}
}

// writeReplies is a connection's writer: it answers replies in order,
// waiting for each one's finish, releases each one's in-flight bytes and
// pipeline slot, and closes the connection after a reply that says so or
// a failed write (the reader then fails and stops). It returns when
// replies is closed and drained.
func (s *Server) writeReplies(c net.Conn, replies <-chan *reply, slots chan struct{}, release func(int64, int64), log *slog.Logger) {
	var out []byte
	lastOut := 0 // size of the last response
	broken := false
	for r := range replies {
		if r.finish != nil {
			r.resp, r.closeAfter = r.finish()
		}
		switch {
		case broken:
		case r.raw != nil:
			out = append(out[:0], r.raw...)
		case r.resp != nil:
			if lastOut > keepBufBytes && cap(out) < lastOut {
				// The last response was large: expect another, in a
				// pooled buffer (bufpool.go).
				out = getBuf(lastOut)
			}
			out = AppendResponse(out[:0], r.req, r.resp)
		default:
			out = out[:0] // acks=0: no response
		}
		key, client := int16(-1), ""
		if r.req != nil {
			key, client = r.req.Key, r.req.ClientID
		}
		r.req, r.resp = nil, nil
		release(r.held, r.heldPre) // answered once its response is encoded
		if !broken && len(out) > 0 {
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(out); err != nil {
				log.Debug("kafka write", "err", err)
				broken = true
				c.Close()
			}
		}
		lastOut = len(out)
		if cap(out) > keepBufBytes {
			putBuf(out)
			out = nil
		}
		if r.closeAfter && !broken {
			log.Debug("kafka closing connection after the response", "key", key, "client", client)
			broken = true
			c.Close()
		}
		<-slots
	}
}

// inflightLogEvery rate-limits the line about connections waiting for
// MaxInflightBytes.
const inflightLogEvery = 5 * time.Second

// readFrame is ReadFrame under MaxInflightBytes: once the size is read,
// the frame's bytes are reserved before its body is read, waiting (not
// reading this connection further) while other requests hold the budget.
// A stranger's frame (before the handshake) is reserved in the strangers'
// share first. It returns the bytes reserved in each, which the caller
// releases once the request is answered, also on an error. A connection
// may wait while it holds the reservations of the requests it has in
// progress (MaxPipelinedRequests); those are answered without reading
// the connection further (a Produce's append completes on its own), so
// waits cannot deadlock.
// The body must then arrive within BodyTimeout plus a second per MiB:
// a trickling client does not keep its reservation until IdleTimeout.
func (s *Server) readFrame(c net.Conn, br *bufio.Reader, max int32, stranger bool, log *slog.Logger) (frame []byte, held, heldPre int64, err error) {
	n, err := ReadFrameSize(br, max)
	if err != nil {
		return nil, 0, 0, err
	}
	need := int64(n) + 4
	if stranger {
		if !s.acquire(s.strangers, need, n, log) {
			return nil, 0, 0, net.ErrClosed
		}
		heldPre = need
	}
	if !s.acquire(s.inflight, need, n, log) {
		return nil, 0, heldPre, net.ErrClosed
	}
	s.stats.inflightBytes.Add(need)
	if br.Buffered() < int(n) {
		s.mu.Lock() // as in serveConn: Close's deadline is not overwritten
		if !s.closing {
			c.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout + time.Duration(n>>20)*time.Second))
		}
		s.mu.Unlock()
	}
	frame, err = ReadFrameBody(br, n)
	if isTimeout(err) {
		s.stats.malformed.Add(1)
		if logEvery(&s.slowLog, inflightLogEvery) {
			log.Warn("kafka closing connection: request body not received within kafka.body_timeout", "frame_bytes", n,
				"body_timeout", s.cfg.BodyTimeout)
		}
		err = net.ErrClosed // counted and logged here
	}
	return frame, need, heldPre, err
}

// acquire reserves need bytes of sem, waiting (counted, logged at most
// every inflightLogEvery) when they are not free; false when the server
// is closing.
func (s *Server) acquire(sem *semaphore.Weighted, need int64, n int32, log *slog.Logger) bool {
	if !sem.TryAcquire(need) {
		s.stats.inflightWaits.Add(1)
		if logEvery(&s.waitLog, inflightLogEvery) {
			log.Warn("kafka: in-flight request bytes at kafka.max_inflight_bytes: connection not read until requests are answered",
				"frame_bytes", n, "inflight_bytes", s.stats.inflightBytes.Load(), "max_inflight_bytes", s.cfg.MaxInflightBytes)
		}
		if err := sem.Acquire(s.stopping, need); err != nil {
			return false
		}
	}
	return true
}

// logEvery reports whether a line may be logged now: at most once every d
// per last (the time of the last line).
func logEvery(last *atomic.Int64, d time.Duration) bool {
	now, prev := time.Now().UnixNano(), last.Load()
	return now-prev >= int64(d) && last.CompareAndSwap(prev, now)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ReadFrame reads one size-prefixed frame. Frames above 1 MiB are read
// incrementally so that a peer announcing a huge size without sending it
// cannot make us allocate it.
func ReadFrame(r io.Reader, max int32) ([]byte, error) {
	n, err := ReadFrameSize(r, max)
	if err != nil {
		return nil, err
	}
	return ReadFrameBody(r, n)
}

// ReadFrameSize reads a frame's size prefix and checks it against max.
func ReadFrameSize(r io.Reader, max int32) (int32, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > max {
		return 0, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, max)
	}
	if n < requestHeaderMinBytes {
		return 0, fmt.Errorf("%w: frame of %d bytes", ErrMalformed, n)
	}
	return n, nil
}

// ReadFrameBody reads the n bytes of a frame after its size prefix.
func ReadFrameBody(r io.Reader, n int32) ([]byte, error) {
	if n <= largeFrameIncrementalReadMin {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("%w: truncated frame: %v", ErrMalformed, err)
		}
		return buf, nil
	}
	var buf bytes.Buffer
	if m, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, fmt.Errorf("%w: truncated frame (%d of %d bytes): %v", ErrMalformed, m, n, err)
	}
	return buf.Bytes(), nil
}

// DecodeRequest parses a request header and body against the API ranges
// of one server. It returns an error for anything that should close the
// connection: unknown or unsupported API keys, versions outside apis
// (except ApiVersions, which is answered with UNSUPPORTED_VERSION), and
// malformed bytes.
func DecodeRequest(frame []byte, apis APIs) (*Request, error) {
	if len(frame) < requestHeaderMinBytes {
		return nil, fmt.Errorf("%w: short header", ErrMalformed)
	}
	req := &Request{
		Key:     int16(binary.BigEndian.Uint16(frame[0:])),
		Version: int16(binary.BigEndian.Uint16(frame[2:])),
		CorrID:  int32(binary.BigEndian.Uint32(frame[4:])),
	}
	rng, ok := apis[req.Key]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedAPI, req.Key)
	}
	kreq := kmsg.RequestForKey(req.Key)
	kreq.SetVersion(req.Version)
	req.Body = kreq
	if req.Version < rng.Min || req.Version > rng.Max {
		if req.Key != ApiVersionsKey || req.Version < 0 {
			return nil, fmt.Errorf("%w: key %d version %d (supported %d-%d)", ErrUnsupportedVers, req.Key, req.Version, rng.Min, rng.Max)
		}
		req.Unsupported = true
	}
	// ApiVersions v3+ uses request header v2 even for versions we do not
	// know; for the others IsFlexible tells.
	req.Flexible = kreq.IsFlexible() || (req.Key == ApiVersionsKey && req.Version >= 3)
	rest := frame[8:]
	cl := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if cl >= 0 {
		if int(cl) > len(rest) {
			return nil, fmt.Errorf("%w: client id length %d", ErrMalformed, cl)
		}
		req.ClientID = string(rest[:cl])
		rest = rest[cl:]
	} else if cl != -1 {
		return nil, fmt.Errorf("%w: client id length %d", ErrMalformed, cl)
	}
	if req.Unsupported {
		return req, nil // body (and header tags) of an unknown version: not parsed
	}
	if req.Flexible {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, err
		}
	}
	if err := kreq.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("%w: key %d v%d body: %v", ErrMalformed, req.Key, req.Version, err)
	}
	return req, nil
}

// skipTags skips a tagged-fields section (none are defined for headers).
func skipTags(b []byte) ([]byte, error) {
	n, l := binary.Uvarint(b)
	if l <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: header tags", ErrMalformed)
	}
	b = b[l:]
	for range n {
		_, l := binary.Uvarint(b) // tag
		if l <= 0 {
			return nil, fmt.Errorf("%w: header tag", ErrMalformed)
		}
		b = b[l:]
		sz, l := binary.Uvarint(b)
		if l <= 0 || sz > uint64(len(b)-l) {
			return nil, fmt.Errorf("%w: header tag size", ErrMalformed)
		}
		b = b[l+int(sz):]
	}
	return b, nil
}

// AppendResponse frames a response: size, correlation id, header tags for
// flexible responses (never for ApiVersions, whose response header is
// always v0), body.
func AppendResponse(dst []byte, req *Request, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(req.CorrID))
	if resp.IsFlexible() && req.Key != ApiVersionsKey {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// SplitHostPort32 splits host:port with the port as Kafka's int32.
func SplitHostPort32(addr string) (string, int32, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, int32(port), nil
}

// Advertised is this server's host and port for Metadata: AdvertisedAddr,
// else the bound address (loopback for a wildcard listener).
func (s *Server) Advertised() (string, int32) {
	addr := s.cfg.AdvertisedAddr
	if addr == "" {
		addr = s.Addr()
	}
	host, port, err := SplitHostPort32(addr)
	if err != nil {
		return "", 0
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on a wildcard without AdvertisedAddr: only local clients can follow
	}
	return host, port
}
