// Package mqtt is Tributary's MQTT front door: a mochi-mqtt broker whose
// hooks make every publish from a network client durable in the write-ahead
// log before it is acknowledged or delivered.
//
// Invariants:
//
//   - Ack only after durable. A QoS 1 PUBACK or QoS 2 PUBREC with a success
//     code is written only after the tributary.Appender reported the
//     record's Durable write done (Submit's done, or Append, returned nil),
//     i.e. after it was fsynced and replicated as the node requires.
//   - Refused is never delivered. A publish whose Append failed is neither
//     retained nor delivered to any subscriber, and is never acknowledged as a
//     success: MQTT 5 clients get PUBACK/PUBREC with the reason's code
//     (refusalCode, docs/cluster.md "Refusal codes": 0x97 for back-pressure — the
//     WAL disk budget, too few replicas —, 0x83 for a partition owned
//     elsewhere, 0x87 denied, 0x80 any other error); MQTT 3.1.1
//     clients, which have no reason codes, are disconnected so that they
//     re-send after reconnecting.
//   - Stored is stored once. A publish stored but not confirmed by the
//     replicas in time (tributary.ErrAfterAppend) gets no acknowledgement
//     (MQTT 5: DISCONNECT 0x89); its DUP re-send on the resumed session is
//     confirmed and acknowledged, not appended again (stored.go).
//   - Nothing is silently dropped. A QoS 0 publish that cannot be appended is
//     dropped (QoS 0 has no way back to the sender) but counted in Stats and
//     logged, rate-limited. QoS 0 publishes are submitted Queued for
//     the next group commit without waiting and delivered at once, so one
//     that then fails to become durable has been delivered but is still
//     counted and logged as dropped. Publishes mochi would ignore without a word
//     (topic names it reserves: $SYS/..., a bare $share or $share/group)
//     are refused with a disconnect (MQTT 5: reason 0x90). Topics no route
//     matches go to the default stream.
//
// # Authentication and authorization
//
// Config.Auth (an auth.Authority: the security section's password file,
// JWT keys and ACL; nil = every client anonymous with every right) decides
// every client (auth.go):
//
//   - CONNECT: a user name and/or password is checked against the password
//     file, or as a JWT when the password is one and JWT keys are
//     configured (the user name, if given, must then be the token's
//     subject); without either, a verified TLS client certificate
//     authenticates its subject CN; without any, the client is anonymous,
//     admitted only when anonymous access is allowed. (An Authority with
//     neither a password file nor JWT keys that allows anonymous clients
//     admits credentials unchecked, as anonymous.) Bad credentials (unknown
//     user, wrong password, bad or expired token) get CONNACK 0x86 bad user
//     name or password (MQTT 3.1.1: return code 0x04); no credentials while
//     anonymous access is off, a client id the principal's rules do not
//     allow (by default its own name only, none for an anonymous client;
//     one the server assigns is always allowed), a client id whose
//     session — connected or kept — belongs to another principal, or a
//     will the principal may not publish get 0x87 not authorized (3.1.1:
//     0x05). Those checks
//     run before mochi takes an existing session of the id over, so one
//     device can neither kick another off nor inherit its session.
//   - PUBLISH: the principal needs publish on the topic (after topic-alias
//     resolution) and on the stream the router picks for it (a will at
//     CONNECT likewise). A denied publish is not written to the WAL,
//     retained or delivered: MQTT 5 gets PUBACK (QoS 1) or PUBREC (QoS 2)
//     0x87 and nothing at QoS 0; MQTT 3.1.1, which has no negative
//     acknowledgement, is disconnected [MQTT-3.3.5-2].
//   - SUBSCRIBE: each filter needs subscribe rights covering everything the
//     filter matches ($share/<group>/ is stripped, the group checked
//     against the rule's groups); a denied filter gets
//     SUBACK 0x87 (3.1.1: 0x80), the others of the packet are granted.
//     Every delivery is checked again for the receiving client, retained
//     messages included, so nothing reaches a client through a filter it
//     was not allowed.
//   - Publishes forwarded by peer nodes and the node's own (inline) ones
//     were authorized where they entered: they are not checked again, only
//     their deliveries are.
//
// Every accepted record carries its principal (Record.Principal, "" for
// an anonymous client). Each refusal is an audit log line and a metric of
// the Authority (tributary_auth_failures_total, tributary_auth_denials_total),
// and counted in Stats (RefusedConnects, RefusedUnauthorized).
//
// Outline: New builds a mochi server with explicit capabilities, the limits
// hook, the auth hook and the publish hook. mochi runs OnPublish on the connection's read goroutine
// after the ACL check and topic-alias resolution and before it writes the
// acknowledgement. By default the hook hands a QoS
// 1/2 record to the pipeline of asynchronous acknowledgements (acks.go) and
// the connection reads on, so its many messages in flight share one group
// commit; once durable, the packet is injected back into the session's
// current connection and mochi acks, retains and delivers it. Otherwise
// (Config.BlockingAcks) the hook blocks in the Appender's Append:
// each connection waits one group commit per message, while concurrent
// connections share commits; on success the hook returns the packet and
// mochi acks, retains and delivers as usual. On failure the hook writes the refusal itself with
// Client.WritePacket (mochi v2.7.9 answers a packets.Code refusal with a
// PUBACK even for QoS 2) or stops the client, and returns
// packets.ErrRejectPacket, which makes mochi skip ack, retain and delivery.
// Messages from the inline client (Server.Publish on the node) are not
// logged: they are the node's own and would otherwise be logged twice.
//
// In a cluster, StartCluster makes the server one node of a cluster-wide
// namespace: subscription interest is exchanged with the peers, accepted
// publishes are forwarded to the nodes with matching subscribers, retained
// messages and shared subscriptions span the cluster (cluster.go states
// the invariants).
//
// Limits: will messages are delivered by mochi without passing OnPublish
// and are not logged; a 3.1.1 client disconnected for a refusal does not get
// its will sent (mochi treats a server-side stop as a clean end). Each
// connection's goroutine recovers from panics in mochi's packet decoding, so
// malformed input closes one connection, never the node (see tcpListener).
package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// Listener ids as reported by Server.Addrs.
const (
	ListenerTCP = "tcp"
	ListenerWS  = "ws"
)

// ListenError is Start's error when a listener (ListenerTCP or
// ListenerWS) cannot bind its address.
type ListenError struct {
	Listener, Addr string
	Err            error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("listen %s %s: %v", e.Listener, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// Defaults for Config fields left zero.
const (
	DefaultMaxPacketSize  = 1 << 20
	DefaultReceiveMaximum = 64
	// DefaultMaxKeepAlive is the default cap on a client's keep-alive (s).
	DefaultMaxKeepAlive = 600
	// DefaultMaxQueuedMessages is the default of Config.MaxQueuedMessages
	// (mochi's own, 8192, let one subscriber that does not read hold 8192
	// copies of up to MaxPacketSize each).
	DefaultMaxQueuedMessages = 1024
	// DefaultWriteTimeout is the default of Config.Limits.WriteTimeout.
	DefaultWriteTimeout = 30 * time.Second
)

var (
	// ErrClosed is returned by Start on a closed server.
	ErrClosed = errors.New("mqtt: server closed")
	// ErrConfig wraps configuration errors from New.
	ErrConfig = errors.New("mqtt: invalid config")
)

// Config configures a Server.
type Config struct {
	TCPAddr        string          // e.g. "127.0.0.1:1883"; "" = off; port 0 = any
	WSAddr         string          // WebSocket listener, e.g. "127.0.0.1:1884"; "" = off
	NodeID         string          // written to every record's Node
	Auth           *auth.Authority // authentication and ACL; nil = anonymous clients, everything allowed
	Routes         []Route         // topic filter -> stream; first match wins
	DefaultStream  string          // catch-all stream; "" = DefaultStream
	MaxPacketSize  uint32          // bytes; 0 = DefaultMaxPacketSize
	ReceiveMaximum uint16          // QoS 1/2 in flight per client; 0 = DefaultReceiveMaximum
	// MaxRetained and MaxRetainedBytes cap the retained messages (topics,
	// payload bytes); MaxSessions the client sessions, connected or kept
	// (see limits.go). 0 = the defaults; < 0 = no cap.
	MaxRetained, MaxRetainedBytes, MaxSessions int
	// Limits are the connection caps and the CONNECT deadline of both
	// listeners (package listen; zero values take its defaults); its TLS,
	// when set, makes the TCP listener mqtts.
	Limits listen.Config
	// WSTLS, when set, makes the WebSocket listener wss (Limits.TLS is the
	// TCP listener's).
	WSTLS *tls.Config
	// WSAllowedOrigins: browser origins the WebSocket listener accepts
	// besides its own host (listen.CheckOrigin); Limits.LoopbackHosts
	// makes it answer only loopback Hosts.
	WSAllowedOrigins []string
	// MaxKeepAlive caps a client's keep-alive in seconds (0 and larger
	// values asked for become the cap, told to MQTT 5 clients as Server
	// Keep Alive); 0 = DefaultMaxKeepAlive.
	MaxKeepAlive uint16
	// MaxQueuedMessages caps the messages queued for delivery to one
	// client and not yet written to its socket (beyond it a delivery is
	// dropped, counted by mochi); 0 = DefaultMaxQueuedMessages. With
	// Limits.WriteTimeout (0 = DefaultWriteTimeout, < 0 = none), which
	// closes a client whose socket takes nothing for that long, it bounds
	// what a subscriber that stops reading makes the node hold.
	MaxQueuedMessages int
	// BlockingAcks makes OnPublish wait for each QoS 1/2 record to be
	// durable before the connection reads on (one fsync after another per
	// connection); false = acknowledge asynchronously (acks.go).
	BlockingAcks bool
	Logger       *slog.Logger // nil = slog.Default()
}

// ListenerStats are the connection counters of each listener (caps,
// CONNECT deadline, panics), by listener name.
func (s *Server) ListenerStats() map[string]listen.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]listen.Stats, len(s.guards))
	for _, g := range s.guards {
		out[g.Name()] = g.Stats()
	}
	return out
}

// Stats are counters since New.
type Stats struct {
	Clients       int64     // network clients connected now
	Accepted      [3]uint64 // publishes made durable, by QoS
	Refused       uint64    // QoS 1/2 publishes refused (Append failed)
	RefusedBudget uint64    // of Refused, because the WAL budget was exceeded
	// RefusedReplication: of Refused, because too few replicas could store
	// them (cluster.replication_policy refuse).
	RefusedReplication uint64
	RefusedFenced      uint64 // of Refused, because the partition is not (or not yet) this node's
	DroppedQoS0        uint64 // QoS 0 publishes dropped because Append failed
	RefusedTopic       uint64 // publishes refused for a topic mochi would ignore
	RefusedRetained    uint64 // retained publishes refused: retained quota (MaxRetained, MaxRetainedBytes)
	RefusedSessions    uint64 // CONNECTs refused: MaxSessions
	// RefusedConnects: CONNECTs refused by authentication or authorization
	// (bad credentials, none, a client id or will not allowed).
	RefusedConnects uint64
	// RefusedUnauthorized: publishes the ACL denied (any QoS; not appended).
	RefusedUnauthorized uint64
	// RefusedReceiveMaximum: MQTT 5 clients disconnected (0x93) for more
	// QoS 1/2 publishes unacknowledged than the Receive Maximum.
	RefusedReceiveMaximum uint64
	// Resent: QoS 1/2 publishes re-sent while the original was still
	// pending, answered by the original's acknowledgement, not logged twice.
	Resent uint64
	// WithheldAcks: of Refused, QoS 1/2 publishes stored on this node but
	// not confirmed by the replicas in time (tributary.ErrAfterAppend):
	// disconnected without an acknowledgement, remembered for the re-send.
	WithheldAcks uint64
	// ResentStored: re-sends (DUP) of such publishes after the client
	// resumed its session, confirmed instead of appended again.
	ResentStored uint64
	// StoredEvicted: remembered stored publishes forgotten for the bound
	// (count or age) before their re-send came; such a re-send is stored
	// again.
	StoredEvicted uint64
	Retained      int    // retained topics held now
	RetainedBytes int    // their payload bytes
	BytesIn       int64  // bytes received from the network (all packets)
	PayloadBytes  uint64 // payload bytes made durable
	Panics        uint64 // connections closed because input made mochi panic
}

// Server is the MQTT broker of one node.
type Server struct {
	cfg    Config
	app    tributary.Appender // the node's write path
	router Router
	log    *slog.Logger
	broker *mochi.Server

	ctx    context.Context // Append context; canceled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	started   bool
	closed    bool
	listeners []listeners.Listener
	guards    []*listen.Listener // the TCP listeners under listeners, for ListenerStats

	accepted        [3]atomic.Uint64
	refused         atomic.Uint64
	refusedBudget   atomic.Uint64
	refusedRepl     atomic.Uint64
	refusedFenced   atomic.Uint64
	droppedQoS0     atomic.Uint64
	refusedTopic    atomic.Uint64
	refusedRet      atomic.Uint64
	refusedSessions atomic.Uint64
	refusedConnects atomic.Uint64 // auth.go
	refusedAuth     atomic.Uint64 // publishes the ACL denied
	refusedRM       atomic.Uint64 // acks.go
	resent          atomic.Uint64 // acks.go
	stored          *storedPubs   // stored, unacknowledged publishes (stored.go)
	withheld        atomic.Uint64 // refusals of stored publishes (stored.go)
	resentStored    atomic.Uint64 // their re-sends, confirmed instead of appended
	pipe            *pipeline     // asynchronous acknowledgements; nil = blocking (acks.go)
	auth            *authHook
	retained        *retained
	capLog          rateLimiter // cap refusals
	payloadBytes    atomic.Uint64
	panics          atomic.Uint64
	lastPanic       atomic.Value // string: stack of the last recovered panic

	pubackLatency prometheus.Histogram // metrics.go

	// interest is this node's subscriptions (followed from the start, so
	// the cluster namespace can start later); cluster is the namespace,
	// nil until StartCluster.
	interest *localInterest
	cluster  atomic.Pointer[clusterNode]

	budget  budgetState
	dropLog rateLimiter // QoS 0 drops
	errLog  rateLimiter // refusals for reasons other than the budget and replication
	replLog rateLimiter // refusals for too few replicas
}

// New validates cfg and builds a server writing publishes to app (this
// package fills each record's Stream, Topic, Value, Headers,
// Source="mqtt", ClientID, Node and Principal; Value is shared with
// delivery); Start opens the listeners.
func New(cfg Config, app tributary.Appender) (*Server, error) {
	if app == nil {
		return nil, fmt.Errorf("nil appender: %w", ErrConfig)
	}
	if cfg.NodeID == "" {
		return nil, fmt.Errorf("empty node id: %w", ErrConfig)
	}
	router, err := NewRouter(cfg.Routes, cfg.DefaultStream)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	if cfg.MaxPacketSize == 0 {
		cfg.MaxPacketSize = DefaultMaxPacketSize
	}
	if cfg.ReceiveMaximum == 0 {
		cfg.ReceiveMaximum = DefaultReceiveMaximum
	}
	if cfg.MaxKeepAlive == 0 {
		cfg.MaxKeepAlive = DefaultMaxKeepAlive
	}
	if cfg.MaxQueuedMessages <= 0 {
		cfg.MaxQueuedMessages = DefaultMaxQueuedMessages
	}
	if cfg.Limits.WriteTimeout == 0 {
		cfg.Limits.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxRetained == 0 {
		cfg.MaxRetained = DefaultMaxRetained
	}
	if cfg.MaxRetainedBytes == 0 {
		cfg.MaxRetainedBytes = DefaultMaxRetainedBytes
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "mqtt")

	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = cfg.MaxPacketSize // oversize packets close the connection
	caps.ReceiveMaximum = cfg.ReceiveMaximum   // client -> server QoS 1/2 in flight
	caps.MaximumInflight = 1024                // server -> client QoS 1/2 stored per client
	caps.MaximumClientWritesPending = int32(cfg.MaxQueuedMessages)
	caps.MaximumSessionExpiryInterval = 24 * 3600 // seconds a disconnected session is kept
	caps.MaximumMessageExpiryInterval = 24 * 3600
	caps.TopicAliasMaximum = 1024
	// Without this mochi copies the publish's properties (user properties
	// included) into the PUBACK/PUBREC, which then also carries reason code
	// 0x01 ("granted qos 1"), not a PUBACK reason code.
	caps.Compatibilities.NoInheritedPropertiesOnAck = true

	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		app:    app,
		router: router,
		log:    log,
		ctx:    ctx,
		cancel: cancel,

		pubackLatency: newPubackHistogram(),
	}
	s.broker = mochi.New(&mochi.Options{
		Capabilities:           caps,
		Logger:                 cfg.Logger.With("component", "mochi"),
		InlineClient:           true,
		SysTopicResendInterval: 10,
	})
	s.retained = newRetained(cfg.MaxRetained, cfg.MaxRetainedBytes)
	s.stored = newStoredPubs(maxStored, storedTTL)
	if !cfg.BlockingAcks {
		s.pipe = newPipeline(s)
	}
	if err := s.broker.AddHook(&limitsHook{s: s}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("add limits hook: %w", err)
	}
	// After the limits hook: the auth hook's OnConnect must be the last
	// that can refuse a CONNECT (it records the principal; auth.go).
	s.auth = newAuthHook(s)
	if err := s.broker.AddHook(s.auth, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("add auth hook: %w", err)
	}
	if err := s.broker.AddHook(&publishHook{s: s}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("add publish hook: %w", err)
	}
	// After the publish hook: mochi runs OnPublish hooks in order and stops
	// at a refusal, so the cluster hook sees accepted publishes only.
	s.interest = newLocalInterest(func() {
		if c := s.cluster.Load(); c != nil {
			c.interestChanged()
		}
	})
	if err := s.broker.AddHook(&clusterHook{s: s}, nil); err != nil {
		cancel()
		return nil, fmt.Errorf("add cluster hook: %w", err)
	}
	return s, nil
}

// Start opens the configured listeners and starts serving.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("mqtt: already started")
	}
	var opened []net.Listener
	fail := func(err error) error {
		for _, ln := range opened {
			_ = ln.Close()
		}
		return err
	}
	lim := s.cfg.Limits
	lim.Logger = s.log
	if s.cfg.TCPAddr != "" {
		lim.Name = "mqtt"
		ln, err := listen.Listen(s.cfg.TCPAddr, lim)
		if err != nil {
			return fail(&ListenError{Listener: ListenerTCP, Addr: s.cfg.TCPAddr, Err: err})
		}
		opened = append(opened, ln)
		s.guards = append(s.guards, ln)
		tl := newTCPListener(ListenerTCP, ln, s.recoverClient)
		if lim.TLS != nil {
			tl.protocol = "mqtts"
		}
		s.listeners = append(s.listeners, tl)
	}
	if s.cfg.WSAddr != "" {
		lim.Name = "mqtt-ws"
		lim.TLS = s.cfg.WSTLS
		ln, err := listen.Listen(s.cfg.WSAddr, lim)
		if err != nil {
			return fail(&ListenError{Listener: ListenerWS, Addr: s.cfg.WSAddr, Err: err})
		}
		opened = append(opened, ln)
		s.guards = append(s.guards, ln)
		wl := newWSListener(ListenerWS, ln, s.recoverClient, s.cfg.WSAllowedOrigins)
		if lim.TLS != nil {
			wl.protocol = "wss"
		}
		s.listeners = append(s.listeners, wl)
	}
	for _, l := range s.listeners {
		if err := s.broker.AddListener(l); err != nil {
			return fail(fmt.Errorf("add listener %s: %w", l.ID(), err))
		}
	}
	if err := s.broker.Serve(); err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	s.started = true
	for _, l := range s.listeners {
		s.log.Info("mqtt listening", "listener", l.ID(), "protocol", l.Protocol(), "addr", l.Address())
	}
	return nil
}

// Addrs returns listener id -> bound address ("127.0.0.1:41883"), with the
// actual port when the configured one was 0. Empty before Start.
func (s *Server) Addrs() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]string, len(s.listeners))
	for _, l := range s.listeners {
		m[l.ID()] = l.Address()
	}
	return m
}

// Publish publishes a message from the node itself through the inline
// client, for local subscribers. It is not appended.
func (s *Server) Publish(topic string, payload []byte, retain bool, qos byte) error {
	if err := s.broker.Publish(topic, payload, retain, qos); err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	return nil
}

// Close stops the listeners, disconnects every client, cancels appends still
// in progress (their publishes are refused, never acked) and waits for the
// connection goroutines to finish or ctx to end.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()

	s.StopCluster()
	s.cancel()
	if !started {
		return nil
	}
	// mochi's Close disconnects every client and waits for their goroutines;
	// those blocked in Append return promptly now that s.ctx is canceled.
	done := make(chan error, 1)
	go func() { done <- s.broker.Close() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close broker: %w", err)
		}
		if s.pipe != nil {
			s.pipe.wait() // no connection is left to answer into
		}
		s.log.Info("mqtt stopped")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close: waiting for clients: %w", ctx.Err())
	}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Clients:               atomic.LoadInt64(&s.broker.Info.ClientsConnected),
		Refused:               s.refused.Load(),
		RefusedBudget:         s.refusedBudget.Load(),
		RefusedReplication:    s.refusedRepl.Load(),
		RefusedFenced:         s.refusedFenced.Load(),
		DroppedQoS0:           s.droppedQoS0.Load(),
		RefusedTopic:          s.refusedTopic.Load(),
		RefusedRetained:       s.refusedRet.Load(),
		RefusedSessions:       s.refusedSessions.Load(),
		RefusedConnects:       s.refusedConnects.Load(),
		RefusedUnauthorized:   s.refusedAuth.Load(),
		RefusedReceiveMaximum: s.refusedRM.Load(),
		Resent:                s.resent.Load(),
		WithheldAcks:          s.withheld.Load(),
		ResentStored:          s.resentStored.Load(),
		StoredEvicted:         s.stored.evicted.Load(),
		BytesIn:               atomic.LoadInt64(&s.broker.Info.BytesReceived),
		PayloadBytes:          s.payloadBytes.Load(),
		Panics:                s.panics.Load(),
	}
	for i := range st.Accepted {
		st.Accepted[i] = s.accepted[i].Load()
	}
	st.Retained, st.RetainedBytes = s.retained.usage()
	return st
}
