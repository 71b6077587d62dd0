package cloudmqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/tables"
)

// Defaults of Config.
const (
	DefaultMaxInflight      = 256
	DefaultMaxPacketBytes   = 64 << 10
	DefaultMaxSubscriptions = 100
	DefaultMaxSessionExpiry = 7 * 24 * time.Hour
	DefaultWriteTimeout     = 30 * time.Second
	// DefaultDevAddr is `tributary dev --cloud-mqtt-addr`'s default.
	DefaultDevAddr = "127.0.0.1:11883"
)

// Config configures the cloud MQTT listener.
type Config struct {
	// Addr is the MQTT TCP listener ("" = off).
	Addr string
	// WSAddr is the MQTT-over-WebSocket listener ("" = off).
	WSAddr string
	// TLS, WSTLS make the listeners serve mqtts / wss (nil: plain).
	TLS, WSTLS *tls.Config
	// WSAllowedOrigins: browser origins the WebSocket listener accepts
	// besides its own host (listen.CheckOrigin).
	WSAllowedOrigins []string
	// LoopbackHosts makes the WebSocket listener answer only loopback
	// Hosts (an open node: DNS rebinding).
	LoopbackHosts bool
	// SessionsDB is the catalog database URI (sqlite:///… or
	// postgres://…) where persistent sessions live.
	SessionsDB string
	// Auth authenticates clients and decides subscriptions (nil: every
	// client is anonymous and may subscribe to everything).
	Auth *auth.Authority
	// Limits are the caps a config file's mqtt: section sets.
	Limits
	// MaxPacketBytes caps the size of a packet a client sends.
	MaxPacketBytes int
	// MaxConns caps the connections of each listener (listen's default
	// when 0).
	MaxConns int
	Logger   *slog.Logger
}

// Limits is the part of the cloud MQTT listener's settings that the cloud
// config file's mqtt: section holds: each key is declared, defaulted and
// validated here once, and cloud.MQTTConfig embeds it.
type Limits struct {
	// MaxInflight caps the QoS 1 messages a client has unacknowledged
	// (its Receive Maximum, if lower, wins). Default 256.
	MaxInflight int `yaml:"max_inflight"`
	// MaxSubscriptions caps one session's subscriptions. Default 100.
	MaxSubscriptions int `yaml:"max_subscriptions"`
	// MaxSessionExpiry caps a session's expiry interval; MQTT 3.1.1
	// persistent sessions (clean session false) get it. Default 168h.
	MaxSessionExpiry time.Duration `yaml:"max_session_expiry"`
	// WriteTimeout closes a connection whose write is blocked that long
	// (a subscriber that stopped reading). Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// Defaults fills every unset cap with its default.
func (l *Limits) Defaults() {
	if l.MaxInflight == 0 {
		l.MaxInflight = DefaultMaxInflight
	}
	if l.MaxSubscriptions == 0 {
		l.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if l.MaxSessionExpiry == 0 {
		l.MaxSessionExpiry = DefaultMaxSessionExpiry
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
}

// Validate reports each wrong cap, after Defaults, to bad as prefix+key
// (e.g. "mqtt.max_inflight").
func (l Limits) Validate(prefix string, bad func(field, format string, args ...any)) {
	if l.MaxInflight < 1 || l.MaxInflight > 65535 {
		bad(prefix+"max_inflight", "%d: want 1..65535", l.MaxInflight)
	}
	if l.MaxSubscriptions < 1 {
		bad(prefix+"max_subscriptions", "%d: want at least 1", l.MaxSubscriptions)
	}
	if l.MaxSessionExpiry < time.Second {
		bad(prefix+"max_session_expiry", "%s: want at least 1s", l.MaxSessionExpiry)
	}
	if l.WriteTimeout < time.Second {
		bad(prefix+"write_timeout", "%s: want at least 1s", l.WriteTimeout)
	}
}

func (c *Config) defaults() {
	c.Limits.Defaults()
	c.MaxInflight = min(c.MaxInflight, 65535) // a program's value; a config file's is validated
	if c.MaxPacketBytes <= 0 {
		c.MaxPacketBytes = DefaultMaxPacketBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is the cloud MQTT listener (TCP and WebSocket).
type Server struct {
	cfg   Config
	log   *slog.Logger
	r     *tables.Reader
	store *store
	watch *watcher
	m     *metrics

	tcp, ws *listen.Listener
	httpSrv *http.Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session // connected, by client id
	conns    map[*conn]struct{}
	closed   bool

	nextID atomic.Uint64 // assigned client ids
}

// New opens the session store; Listen binds the listeners.
func New(cfg Config, r *tables.Reader) (*Server, error) {
	cfg.defaults()
	st, err := openStore(cfg.SessionsDB, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "cloud-mqtt"), r: r, store: st,
		watch: newWatcher(r, r.MetadataMaxAge()), m: newMetrics(), ctx: ctx, cancel: cancel,
		sessions: map[string]*session{}, conns: map[*conn]struct{}{}}
	st.writes = func() { s.m.positionWrites.Inc() }
	s.m.conns = func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.conns))
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.watch.run(ctx) }()
	go func() { defer s.wg.Done(); s.sweepLoop(ctx) }()
	return s, nil
}

// Listen binds the configured listeners and serves them.
func (s *Server) Listen() error {
	if a := s.cfg.Addr; a != "" {
		ln, err := listen.Listen(a, listen.Config{Name: "cloud_mqtt", Logger: s.log, TLS: s.cfg.TLS,
			WriteTimeout: s.cfg.WriteTimeout, MaxConns: s.cfg.MaxConns})
		if err != nil {
			return fmt.Errorf("listen cloud mqtt %s: %w", a, err)
		}
		s.tcp = ln
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.acceptLoop(ln) }()
		s.log.Info("listening", "listener", "cloud-mqtt", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	}
	if a := s.cfg.WSAddr; a != "" {
		ln, err := listen.Listen(a, listen.Config{Name: "cloud_mqtt_ws", Logger: s.log, TLS: s.cfg.WSTLS,
			WriteTimeout: s.cfg.WriteTimeout, MaxConns: s.cfg.MaxConns, LoopbackHosts: s.cfg.LoopbackHosts})
		if err != nil {
			return fmt.Errorf("listen cloud mqtt websocket %s: %w", a, err)
		}
		s.ws = ln
		up := websocket.Upgrader{Subprotocols: []string{"mqtt"}, CheckOrigin: listen.CheckOrigin(s.cfg.WSAllowedOrigins)}
		s.httpSrv = &http.Server{ReadHeaderTimeout: 10 * time.Second, ErrorLog: ln.ErrorLog(),
			Handler: ln.HostGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !s.track() {
					http.Error(w, "shutting down", http.StatusServiceUnavailable)
					return
				}
				defer s.wg.Done()
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return // Upgrade has answered
				}
				defer c.Close()
				c.SetReadLimit(int64(s.cfg.MaxPacketBytes) + 16)
				wc := listen.NewWSConn(c)
				ln.Protect(wc, func() { s.serveConn(wc) })
			}))}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("cloud mqtt websocket listener stopped", "err", err)
			}
		}()
		s.log.Info("listening", "listener", "cloud-mqtt-ws", "addr", ln.Addr().String(), "tls", s.cfg.WSTLS != nil)
	}
	return nil
}

func (s *Server) acceptLoop(ln *listen.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !s.track() {
			nc.Close()
			return
		}
		go func() {
			defer s.wg.Done()
			ln.Protect(nc, func() { s.serveConn(nc) })
		}()
	}
}

// track counts one more connection goroutine in wg, unless the server
// is closing.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// Addr is the TCP listener's bound address ("" when off).
func (s *Server) Addr() string {
	if s.tcp == nil {
		return ""
	}
	return s.tcp.Addr().String()
}

// WSAddr is the WebSocket listener's bound address ("" when off).
func (s *Server) WSAddr() string {
	if s.ws == nil {
		return ""
	}
	return s.ws.Addr().String()
}

// Listeners are the bound listeners (for their stats).
func (s *Server) Listeners() []*listen.Listener {
	var out []*listen.Listener
	for _, l := range []*listen.Listener{s.tcp, s.ws} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// Collectors are the listener's metrics.
func (s *Server) Collectors() []prometheus.Collector { return s.m.collectors() }

// Close stops the listeners, ends every connection (MQTT 5 clients get
// DISCONNECT 0x8B), writes the sessions' positions and closes the store.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var errs []error
	if s.tcp != nil {
		errs = append(errs, s.tcp.Close())
	}
	if s.httpSrv != nil {
		s.httpSrv.Close()
	}
	for _, c := range conns {
		c.end(codeShuttingDown, "server shutting down")
	}
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("cloud mqtt: connections still open: %w", ctx.Err()))
	}
	errs = append(errs, s.store.close(ctx))
	return errors.Join(errs...)
}

// sweepLoop refreshes the connected persistent sessions' seen time and
// deletes expired sessions, once a minute.
func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var ids []string
		for id, se := range s.sessions {
			if se.persistent() {
				ids = append(ids, id)
			}
		}
		s.mu.Unlock()
		if err := s.store.Touch(ctx, ids); err != nil {
			s.log.Warn("refresh mqtt sessions", "err", err)
		}
		if n, err := s.store.Sweep(ctx, 2*time.Minute); err != nil {
			s.log.Warn("sweep mqtt sessions", "err", err)
		} else {
			s.m.stored.Set(float64(n))
		}
	}
}

// metrics of the listener.
type metrics struct {
	conns          func() float64
	stored         prometheus.Gauge
	delivered      prometheus.Counter
	acks           prometheus.Counter
	refused        prometheus.Counter
	subsRefused    prometheus.Counter
	positionWrites prometheus.Counter
	skipped        prometheus.Counter
	resumeDropped  prometheus.Counter
}

func newMetrics() *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &metrics{
		stored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_cloud_mqtt_sessions_stored",
			Help: "Persistent MQTT sessions in the catalog database (at the last sweep)."}),
		delivered:      c("tributary_cloud_mqtt_messages_delivered_total", "Rows sent to cloud MQTT subscribers as PUBLISH packets."),
		acks:           c("tributary_cloud_mqtt_acks_total", "PUBACKs received from cloud MQTT subscribers."),
		refused:        c("tributary_cloud_mqtt_publishes_refused_total", "PUBLISH packets refused by the read-only cloud MQTT listener."),
		subsRefused:    c("tributary_cloud_mqtt_subscriptions_refused_total", "Subscription filters refused (bad filter, unknown stream, ACL, caps)."),
		positionWrites: c("tributary_cloud_mqtt_position_writes_total", "Transactions writing acknowledged session positions to the catalog database."),
		skipped:        c("tributary_cloud_mqtt_oversized_skipped_total", "Rows not sent because the PUBLISH would exceed the client's Maximum Packet Size."),
		resumeDropped:  c("tributary_cloud_mqtt_resumed_subscriptions_dropped_total", "Stored subscriptions (or streams of a plain filter) dropped from a resumed session because the rules in force refuse them."),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_cloud_mqtt_connections",
			Help: "Open cloud MQTT connections (after CONNECT)."}, func() float64 { return m.conns() }),
		m.stored, m.delivered, m.acks, m.refused, m.subsRefused, m.positionWrites, m.skipped, m.resumeDropped,
	}
}
