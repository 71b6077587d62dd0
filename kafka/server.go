package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes used by this package.
const (
	errUnknownServerError        int16 = -1
	errCorruptMessage            int16 = 2
	errUnknownTopicOrPartition   int16 = 3
	errLeaderNotAvailable        int16 = 5
	errNotLeaderOrFollower       int16 = 6
	errMessageTooLarge           int16 = 10
	errInvalidTopic              int16 = 17
	errInvalidRequiredAcks       int16 = 21
	errUnsupportedVersion        int16 = 35
	errInvalidRequest            int16 = 42
	errOutOfOrderSequence        int16 = 45
	errInvalidProducerEpoch      int16 = 47
	errKafkaStorageError         int16 = 56
	errNotEnoughReplicas         int16 = 19
	errInvalidRecord             int16 = 87
	defaultAuthorizedOps         int32 = -2147483648
	requestHeaderMinBytes              = 2 + 2 + 4 + 2
	largeFrameIncrementalReadMin       = 1 << 20
)

// Errors returned while reading a request; each closes the connection.
var (
	ErrFrameTooLarge   = errors.New("kafka: frame too large")
	ErrMalformed       = errors.New("kafka: malformed request")
	ErrUnsupportedAPI  = errors.New("kafka: unsupported api key")
	ErrUnsupportedVers = errors.New("kafka: unsupported api version")
	ErrServerClosed    = errors.New("kafka: server closed")
)

// Stats are counters of a Server.
type Stats struct {
	Connections     int64 // currently open
	Accepted        int64 // connections accepted since start
	Requests        int64 // requests handled
	ClosedMalformed int64 // connections closed for a bad frame or request
	ProducedBatches int64 // batches appended
	ProducedRecords int64 // records appended
	DuplicateBatch  int64 // idempotent retries answered from dedup state
	PartitionErrors int64 // produce partitions answered with an error
	Backpressure    int64 // produce partitions refused for the WAL budget
}

// Server is a Kafka protocol front door for producers.
type Server struct {
	cfg  Config
	b    Backend
	log  *slog.Logger
	prod *producers

	// The API surface: the produce side (NewServer) or the consume side
	// (NewCloudServer) share the listener and connection loop.
	apis    map[int16]versionRange
	handler func(ctx context.Context, req *request) (kmsg.Response, bool)
	onStart func(ctx context.Context) (logAttrs []any, err error)

	ctx    context.Context // canceled by Close after its grace period
	cancel context.CancelFunc

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup

	stats struct {
		conns, accepted, requests, malformed            atomic.Int64
		batches, records, dups, partErrs, backpressured atomic.Int64
	}
}

// NewServer validates cfg and returns a Server that is not yet listening.
func NewServer(cfg Config, b Backend) (*Server, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := newServer(cfg, "kafka", supportedAPIs)
	s.b = b
	s.prod = newProducers(cfg.ProducerIdleExpiry)
	s.handler = s.handle
	s.onStart = func(ctx context.Context) ([]any, error) {
		runs, err := s.b.ProducerRuns(ctx)
		if err != nil {
			return nil, fmt.Errorf("kafka: load producer state: %w", err)
		}
		s.prod.load(runs)
		return []any{"node", s.b.NodeID(), "producer_runs", len(runs)}, nil
	}
	return s, nil
}

// newServer returns a Server with the connection machinery only; the
// caller sets handler and onStart. cfg must have its defaults applied.
func newServer(cfg Config, component string, apis map[int16]versionRange) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:    cfg,
		log:    cfg.Logger.With("component", component),
		apis:   apis,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[net.Conn]struct{}),
	}
}

// Start loads the idempotent-producer state from the backend, listens on
// cfg.Addr and serves connections in the background.
func (s *Server) Start() error {
	var attrs []any
	if s.onStart != nil {
		var err error
		if attrs, err = s.onStart(s.ctx); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
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
		ProducedBatches: s.stats.batches.Load(),
		ProducedRecords: s.stats.records.Load(),
		DuplicateBatch:  s.stats.dups.Load(),
		PartitionErrors: s.stats.partErrs.Load(),
		Backpressure:    s.stats.backpressured.Load(),
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
		go s.serveConn(c)
	}
}

// request is one decoded request with its header.
type request struct {
	key      int16
	version  int16
	corrID   int32
	clientID string
	flexible bool // request header v2
	kreq     kmsg.Request
	// unsupported is set for an ApiVersions request of a version we do not
	// know; it is answered with UNSUPPORTED_VERSION, not decoded.
	unsupported bool
}

// serveConn handles one connection's requests strictly in order: read,
// handle (which for Produce includes the durable append), write, repeat.
// Any framing or decoding error closes this connection only.
func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.stats.conns.Add(-1)
		s.wg.Done()
	}()
	log := s.log.With("remote", c.RemoteAddr().String())
	br := bufio.NewReaderSize(c, 64<<10)
	var out []byte
	for {
		// Under mu, so that Close's SetReadDeadline(now) cannot be
		// overwritten by ours.
		s.mu.Lock()
		closing := s.closing
		if !closing {
			c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		}
		s.mu.Unlock()
		if closing {
			return
		}
		frame, err := readFrame(br, s.cfg.MaxFrameBytes)
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTimeout(err) && !errors.Is(err, net.ErrClosed) {
				s.stats.malformed.Add(1)
				log.Warn("kafka closing connection", "err", err)
			}
			return
		}
		req, err := decodeRequestFor(frame, s.apis)
		if err != nil {
			s.stats.malformed.Add(1)
			log.Warn("kafka closing connection", "err", err)
			return
		}
		s.stats.requests.Add(1)
		resp, closeAfter := s.handler(s.ctx, req)
		if resp != nil {
			out = appendResponse(out[:0], req, resp)
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(out); err != nil {
				log.Debug("kafka write", "err", err)
				return
			}
			if cap(out) > 1<<20 {
				out = nil
			}
		}
		if closeAfter {
			log.Debug("kafka closing connection after acks=0 error", "client", req.clientID)
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handle dispatches one request. A nil response means none is sent
// (Produce with acks=0); closeAfter asks to close the connection.
func (s *Server) handle(ctx context.Context, req *request) (resp kmsg.Response, closeAfter bool) {
	switch r := req.kreq.(type) {
	case *kmsg.ApiVersionsRequest:
		return s.handleApiVersions(req, r), false
	case *kmsg.FetchRequest:
		return s.handleFetch(req, r), false
	case *kmsg.MetadataRequest:
		return s.handleMetadata(ctx, r), false
	case *kmsg.ProduceRequest:
		return s.handleProduce(ctx, req, r)
	case *kmsg.InitProducerIDRequest:
		return s.handleInitProducerID(ctx, r), false
	}
	// decodeRequest admits only the keys above.
	panic(fmt.Sprintf("kafka: no handler for key %d", req.key))
}

// readFrame reads one size-prefixed frame. Frames above 1 MiB are read
// incrementally so that a peer announcing a huge size without sending it
// cannot make us allocate it.
func readFrame(r io.Reader, max int32) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > max {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, max)
	}
	if n < requestHeaderMinBytes {
		return nil, fmt.Errorf("%w: frame of %d bytes", ErrMalformed, n)
	}
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

// decodeRequest parses a request header and body. It returns an error for
// anything that should close the connection: unknown or unsupported API
// keys, versions outside our ranges (except ApiVersions, which is answered
// with UNSUPPORTED_VERSION), and malformed bytes.
func decodeRequest(frame []byte) (*request, error) { return decodeRequestFor(frame, supportedAPIs) }

// decodeRequestFor is decodeRequest against the API ranges of one server mode.
func decodeRequestFor(frame []byte, apis map[int16]versionRange) (*request, error) {
	if len(frame) < requestHeaderMinBytes {
		return nil, fmt.Errorf("%w: short header", ErrMalformed)
	}
	req := &request{
		key:     int16(binary.BigEndian.Uint16(frame[0:])),
		version: int16(binary.BigEndian.Uint16(frame[2:])),
		corrID:  int32(binary.BigEndian.Uint32(frame[4:])),
	}
	rng, ok := apis[req.key]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedAPI, req.key)
	}
	kreq := kmsg.RequestForKey(req.key)
	kreq.SetVersion(req.version)
	req.kreq = kreq
	if req.version < rng.min || req.version > rng.max {
		if req.key != apiVersionsKey || req.version < 0 {
			return nil, fmt.Errorf("%w: key %d version %d (supported %d-%d)", ErrUnsupportedVers, req.key, req.version, rng.min, rng.max)
		}
		req.unsupported = true
	}
	// ApiVersions v3+ uses request header v2 even for versions we do not
	// know; for the others IsFlexible tells.
	req.flexible = kreq.IsFlexible() || (req.key == apiVersionsKey && req.version >= 3)
	rest := frame[8:]
	cl := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if cl >= 0 {
		if int(cl) > len(rest) {
			return nil, fmt.Errorf("%w: client id length %d", ErrMalformed, cl)
		}
		req.clientID = string(rest[:cl])
		rest = rest[cl:]
	} else if cl != -1 {
		return nil, fmt.Errorf("%w: client id length %d", ErrMalformed, cl)
	}
	if req.unsupported {
		return req, nil // body (and header tags) of an unknown version: not parsed
	}
	if req.flexible {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, err
		}
	}
	if err := kreq.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("%w: key %d v%d body: %v", ErrMalformed, req.key, req.version, err)
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

// appendResponse frames a response: size, correlation id, header tags for
// flexible responses (never for ApiVersions, whose response header is
// always v0), body.
func appendResponse(dst []byte, req *request, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(req.corrID))
	if resp.IsFlexible() && req.key != apiVersionsKey {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// BrokerID maps a node id to its Kafka broker id: FNV-1a 32 of the id with
// the sign bit cleared, so it is stable across restarts and nodes and never
// negative (-1 means "no leader" in Kafka).
func BrokerID(nodeID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int32(h.Sum32() & 0x7fffffff)
}

func splitHostPort32(addr string) (string, int32, error) {
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

// advertised is this node's host and port for Metadata.
func (s *Server) advertised() (string, int32) {
	addr := s.cfg.AdvertisedAddr
	if addr == "" {
		addr = s.Addr()
	}
	host, port, err := splitHostPort32(addr)
	if err != nil {
		return "", 0
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on a wildcard without AdvertisedAddr: only local clients can follow
	}
	return host, port
}
