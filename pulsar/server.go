package pulsar

// Server: the listener, its connections and the topic namespace.
//
// Invariants:
//   - One Manager per server owns every subscription; connections only
//     translate commands into its calls, so a consumer's state outlives
//     nothing: when its connection goes, Subscription.Remove hands its
//     unacknowledged messages back (Close included).
//   - Close stops accepting, closes every connection (each removes its
//     consumers), joins every goroutine, then closes the Manager, which
//     flushes durable cursors, and the cursor store.
//
// Topic names are persistent://<catalog>/<namespace>/<stream>, with
// -partition-N for partition N: the stream namespace.stream of the
// catalog. Every existing stream is a partitioned topic with as many
// partitions as its highest table partition + 1 (at least one), so that
// partition N of a topic is partition N of the Kafka topic and of the
// table's partition column.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/pulsar/wire"
	"github.com/tributary-io/tributary/subscription"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/tables"
)

// Defaults of a Server.
const (
	DefaultAddr      = "127.0.0.1:6650"
	DefaultKeepAlive = 30 * time.Second
	DefaultCatalog   = "tributary"
)

// Errors of the server.
var (
	ErrInvalidConfig = errors.New("pulsar: invalid config")
	ErrServerClosed  = errors.New("pulsar: server closed")
	// ErrTopicName: not persistent://<catalog>/<namespace>/<stream>[-partition-N].
	ErrTopicName = errors.New("pulsar: invalid topic name")
	// errNoPartition: the stream exists but the topic partition does not.
	errNoPartition = errors.New("pulsar: no such topic partition")
)

// Config configures a Server; zero values take the defaults.
type Config struct {
	// Addr is the listener host:port (default 127.0.0.1:6650; port 0 picks one).
	Addr string
	// AdvertisedAddr is the host:port LOOKUP answers with; default the
	// listener's address.
	AdvertisedAddr string
	// Peers are the advertised host:port of every cloud server (this one
	// included). LOOKUP names the owner of a topic partition by a
	// rendezvous hash over them, so that one server dispatches each
	// subscription. Empty = this server alone.
	Peers []string
	// Catalog is the catalog name: the tenant of every topic name.
	Catalog string
	// Auth authenticates clients (token, TLS certificate) and decides
	// their subscriptions; nil = anonymous clients, everything allowed.
	Auth *auth.Authority
	// CursorsDB is the database holding durable cursors (the catalog
	// database: "sqlite:///abs/path.db" or "postgres://..."). Required.
	CursorsDB string
	// MaxFrameBytes bounds an incoming frame and is announced to clients as
	// the maximum message size. Default 5 MiB.
	MaxFrameBytes int
	// KeepAlive: a connection silent this long is sent a PING, and closed
	// when silent twice as long. Default 30s.
	KeepAlive time.Duration
	// MaxConsumersPerConn caps the consumers of one connection (default
	// DefaultMaxConsumersPerConn); MaxSubscriptions the subscriptions this server holds at once
	// (default 10000). A SUBSCRIBE beyond either gets TooManyRequests.
	MaxConsumersPerConn, MaxSubscriptions int
	// MaxUnackedPerConsumer and MaxAckedRanges: see Caps (defaults
	// DefaultMaxUnackedPerConsumer, DefaultMaxAckedRanges).
	MaxUnackedPerConsumer, MaxAckedRanges int
	// MaxConnectionBacklog: once a connection has more bytes than this
	// queued or being written, its consumers get nothing more until the
	// client reads (a consumer that stops reading holds at most this).
	// Default DefaultMaxConnectionBacklog (4 MiB).
	MaxConnectionBacklog int
	// MessageCacheBytes bounds the cache of encoded messages (metadata,
	// checksum and payload; msgcache.go), which serves a message
	// dispatched again — to another subscription, or redelivered —
	// without encoding it again. Default DefaultMessageCacheBytes
	// (64 MiB).
	MessageCacheBytes int64
	// Produce is the write path of Pulsar producers (the cloud's,
	// cloud_produce); nil refuses PRODUCER with NotAllowedError.
	Produce ProduceBackend
	// MaxProducersPerConn caps the producers of one connection (default
	// DefaultMaxProducersPerConn; beyond: TooManyRequests),
	// MaxPendingSends the SENDs in flight of one producer (default
	// DefaultMaxPendingSends; beyond: SEND_ERROR ServiceNotReady),
	// MaxBatchMessages the messages of one batch SEND (default
	// DefaultMaxBatchMessages; beyond: SEND_ERROR NotAllowedError).
	MaxProducersPerConn, MaxPendingSends, MaxBatchMessages int
	// Limits are the listener's connection caps and CONNECT deadline
	// (package listen; zero values take its defaults).
	Limits listen.Config
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Catalog == "" {
		c.Catalog = DefaultCatalog
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if c.MaxConsumersPerConn <= 0 {
		c.MaxConsumersPerConn = DefaultMaxConsumersPerConn
	}
	if c.MaxProducersPerConn <= 0 {
		c.MaxProducersPerConn = DefaultMaxProducersPerConn
	}
	if c.MaxPendingSends <= 0 {
		c.MaxPendingSends = DefaultMaxPendingSends
	}
	if c.MaxBatchMessages <= 0 {
		c.MaxBatchMessages = DefaultMaxBatchMessages
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if c.MaxUnackedPerConsumer <= 0 {
		c.MaxUnackedPerConsumer = DefaultMaxUnackedPerConsumer
	}
	if c.MaxAckedRanges <= 0 {
		c.MaxAckedRanges = DefaultMaxAckedRanges
	}
	if c.MessageCacheBytes <= 0 {
		c.MessageCacheBytes = DefaultMessageCacheBytes
	}
	if c.MaxConnectionBacklog <= 0 {
		c.MaxConnectionBacklog = DefaultMaxConnectionBacklog
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves Pulsar consumers from the stream tables.
type Server struct {
	cfg  Config
	r    *tables.Reader
	m    *Manager
	log  *slog.Logger
	msgs *msgCache

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	ln      net.Listener
	self    string // advertised host:port
	conns   map[*conn]struct{}
	closing bool
	wg      sync.WaitGroup

	connID atomic.Uint64

	// instance names this server's run in the names it gives producers
	// (with producerSeq), so that no two are ever given the same one;
	// producerNames are the producer names producing here (per
	// partition: a second is ProducerBusy).
	instance      string
	producerSeq   atomic.Uint64
	producerNames map[string]struct{}
}

// NewServer validates cfg, opens the cursor store and returns a server
// reading through r that is not yet listening.
func NewServer(cfg Config, r *tables.Reader) (*Server, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil table reader", ErrInvalidConfig)
	}
	cfg.setDefaults()
	if cfg.CursorsDB == "" {
		return nil, fmt.Errorf("%w: cursor database required", ErrInvalidConfig)
	}
	for _, a := range append([]string{cfg.Addr, cfg.AdvertisedAddr}, cfg.Peers...) {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: address %q: %v", ErrInvalidConfig, a, err)
		}
	}
	store, err := OpenCursorStore(cfg.CursorsDB)
	if err != nil {
		return nil, fmt.Errorf("pulsar: %w", err)
	}
	log := cfg.Logger.With("component", "pulsar")
	ctx, cancel := context.WithCancel(context.Background())
	m := NewManager(store, log)
	m.SetCaps(Caps{MaxSubscriptions: cfg.MaxSubscriptions, MaxUnackedPerConsumer: cfg.MaxUnackedPerConsumer, MaxAckedRanges: cfg.MaxAckedRanges})
	var rnd [6]byte
	rand.Read(rnd[:])
	return &Server{cfg: cfg, r: r, m: m, log: log, msgs: newMsgCache(cfg.MessageCacheBytes),
		ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{},
		instance: "tributary-" + hex.EncodeToString(rnd[:]), producerNames: map[string]struct{}{}}, nil
}

// Manager is the server's subscription manager, for another front
// door to serve the same subscriptions (the cloud's gRPC Subscribe).
func (s *Server) Manager() *subscription.Manager { return s.m }

// Listen listens on cfg.Addr and serves connections in the background.
func (s *Server) Listen() error {
	lim := s.cfg.Limits
	lim.Name, lim.Logger = "pulsar", s.log
	ln, err := listen.Listen(s.cfg.Addr, lim)
	if err != nil {
		return fmt.Errorf("pulsar: listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	if s.closing || s.ln != nil {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.self = s.cfg.AdvertisedAddr
	if s.self == "" {
		s.self = ln.Addr().String()
	}
	s.mu.Unlock()
	s.log.Info("pulsar listening", "addr", ln.Addr().String(), "advertised", s.self, "peers", len(s.cfg.Peers))
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

// ListenerStats are the listener's connection counters (zero before Listen).
func (s *Server) ListenerStats() listen.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.ln.(*listen.Listener); ok {
		return l.Stats()
	}
	return listen.Stats{}
}

// Addr is the listener's address, or "" before Listen.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops accepting, closes every connection (their consumers are
// removed from their subscriptions), waits for them, then closes the
// subscriptions (flushing durable cursors) and the cursor store. When ctx
// ends first it returns ctx's error after closing what it can.
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
		c.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	// The Manager flushes the durable cursors and closes the store.
	return errors.Join(err, s.m.Close(ctx))
}

func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("pulsar accept", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			ln.(*listen.Listener).Protect(nc, func() { c.serve(s.ctx) })
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// selfAddr is this server's advertised host:port.
func (s *Server) selfAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.self
}

// owner is the peer that serves a topic partition: a rendezvous hash over
// the peers (this server included), so every server names the same one.
func (s *Server) owner(topic string) string {
	self := s.selfAddr()
	best, bestH := self, uint64(0)
	peers := append([]string{self}, s.cfg.Peers...)
	sort.Strings(peers)
	for i, p := range peers {
		h := fnv.New64a()
		h.Write([]byte(topic))
		h.Write([]byte{0})
		h.Write([]byte(p))
		if v := h.Sum64(); i == 0 || v > bestH {
			best, bestH = p, v
		}
	}
	return best
}

// topicName is a parsed topic name.
type topicName struct {
	stream    string // namespace.stream
	partition int32  // -1: the partitioned topic itself
}

// String is the full name of the topic (partition).
func (t topicName) String(catalog string) string {
	ns, st, _ := strings.Cut(t.stream, ".")
	s := "persistent://" + catalog + "/" + ns + "/" + st
	if t.partition >= 0 {
		s += "-partition-" + strconv.Itoa(int(t.partition))
	}
	return s
}

// parseTopic parses persistent://<catalog>/<namespace>/<stream>[-partition-N].
func (s *Server) parseTopic(name string) (topicName, error) {
	rest, ok := strings.CutPrefix(name, "persistent://")
	if !ok {
		return topicName{}, fmt.Errorf("%w: %q: only persistent://%s/<namespace>/<stream> topics exist", ErrTopicName, name, s.cfg.Catalog)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return topicName{}, fmt.Errorf("%w: %q: want persistent://%s/<namespace>/<stream>", ErrTopicName, name, s.cfg.Catalog)
	}
	if parts[0] != s.cfg.Catalog {
		return topicName{}, fmt.Errorf("%w: %q: tenant %q is not the catalog %q", ErrTopicName, name, parts[0], s.cfg.Catalog)
	}
	t := topicName{partition: -1}
	st := parts[2]
	if i := strings.LastIndex(st, "-partition-"); i > 0 {
		if n, err := strconv.ParseInt(st[i+len("-partition-"):], 10, 32); err == nil && n >= 0 {
			t.partition, st = int32(n), st[:i]
		}
	}
	t.stream = parts[1] + "." + st
	if _, _, err := tributary.ParseStream(t.stream); err != nil {
		return topicName{}, fmt.Errorf("%w: %q: %v", ErrTopicName, name, err)
	}
	return t, nil
}

// partitions is the number of partitions of a stream's topic: its highest
// table partition + 1, at least 1. tables.ErrNoSuchStream if none.
func (s *Server) partitions(ctx context.Context, stream string) (int32, error) {
	ps, err := s.r.Partitions(ctx, stream)
	if err != nil {
		return 0, err
	}
	if len(ps) == 0 {
		return 1, nil
	}
	return ps[len(ps)-1] + 1, nil
}

// resolve parses a topic partition's name and checks that it exists: a
// partition below the topic's partition count, or the topic itself when
// its stream has a single partition (then partition 0).
func (s *Server) resolve(ctx context.Context, name string) (topicName, error) {
	t, err := s.parseTopic(name)
	if err != nil {
		return t, err
	}
	n, err := s.partitions(ctx, t.stream)
	if err != nil {
		return t, fmt.Errorf("topic %s: %w", name, err)
	}
	return inTopic(t, name, n, "subscribe")
}

// inTopic checks t against its topic's partition count n: a partition
// below it, or the topic itself when it has one partition (then
// partition 0). verb is what a client does with the partitions.
func inTopic(t topicName, name string, n int32, verb string) (topicName, error) {
	switch {
	case t.partition < 0 && n == 1:
		t.partition = 0
	case t.partition < 0:
		return t, fmt.Errorf("%w: %s is partitioned (%d partitions): %s to its -partition-N topics", errNoPartition, name, n, verb)
	case t.partition >= n:
		return t, fmt.Errorf("%w: %s (the topic has %d partitions)", errNoPartition, name, n)
	}
	return t, nil
}
