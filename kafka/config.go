package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/size"
	"github.com/tributary-io/tributary/listen"
)

// Config configures a Server's listener, shared by the produce and consume
// sides (each embeds it in its own Config). Zero values take the defaults
// below.
type Config struct {
	// Addr is the listen address. Default ":9092".
	Addr string `yaml:"addr"`
	// ClusterID is returned in Metadata v2+. Default "tributary".
	ClusterID string `yaml:"cluster_id"`
	// MaxFrameBytes bounds one request frame; a larger frame closes the
	// connection. Default 100 MiB.
	MaxFrameBytes int32 `yaml:"max_frame_bytes"`
	// Listener holds the settings a config file's kafka: section sets
	// (edge and cloud alike): advertised_addr, max_inflight_bytes,
	// body_timeout.
	Listener `yaml:",inline"`
	// Pipelining holds max_pipelined_requests, which the edge's kafka:
	// section sets (the cloud's takes the default).
	Pipelining `yaml:",inline"`
	// IdleTimeout closes connections that send nothing for this long.
	// Default 10m (Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// Limits are the listener's connection caps and the deadline for the
	// first request (package listen; zero values take its defaults).
	Limits listen.Config `yaml:"-"`
	// Auth authenticates clients (SASL) and decides their requests
	// (ACLs); nil = every client is anonymous and every request allowed.
	Auth *auth.Authority `yaml:"-"`
	// Logger; nil = slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Listener is the part of a Kafka listener's settings that a config
// file's kafka: section holds, on the edge (produce) and the cloud
// (consume) alike: each key is declared, defaulted and validated here
// once, and node.Config and cloud.Config embed it.
type Listener struct {
	// AdvertisedAddr is the host:port clients are told to connect to
	// (Metadata; a cluster member's gossip). Default: the bound address
	// (set it when listening on a wildcard address).
	AdvertisedAddr string `yaml:"advertised_addr"`
	// MaxInflightBytes bounds the request bytes the Kafka listener holds
	// across all its connections: frames read but not yet answered
	// (acks>=1 produce waiting for its fsync included). A connection
	// whose next frame would exceed it is not read further
	// (back-pressure through TCP, tributary_kafka_inflight_waits_total)
	// until other requests are answered; nothing is refused. A
	// connection holds the frames of the requests it has in progress
	// (MaxPipelinedRequests, the edge's kafka.max_pipelined_requests;
	// before its first request, and before SASL when authentication is
	// required, one frame of at most 1 MiB at a time). Default 512MiB, at
	// least 100MiB (one request of the largest size, MaxFrameBytes).
	MaxInflightBytes size.Bytes `yaml:"max_inflight_bytes"`
	// BodyTimeout bounds how long a request body may take once its size
	// is read, plus a second per MiB of the frame: a frame's bytes are
	// reserved (max_inflight_bytes) before its body is read, so a client
	// that sends a large size and then trickles the body would otherwise
	// hold that reservation until the idle timeout. The trickling
	// connection is closed (counted as malformed). Default 30s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
}

// Defaults fills every unset key of the section with its default.
func (l *Listener) Defaults() { l.defaults(DefaultMaxFrameBytes) }

func (l *Listener) defaults(maxFrameBytes int32) {
	if l.MaxInflightBytes == 0 {
		l.MaxInflightBytes = size.Bytes(max(DefaultMaxInflightBytes, int64(maxFrameBytes)))
	}
	if l.BodyTimeout == 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
}

// Validate reports each wrong key of the section, after Defaults, to bad
// as prefix+key (e.g. "kafka.max_inflight_bytes").
func (l Listener) Validate(prefix string, bad func(field, format string, args ...any)) {
	l.validate(prefix, DefaultMaxFrameBytes, bad)
}

func (l Listener) validate(prefix string, maxFrameBytes int32, bad func(field, format string, args ...any)) {
	if int64(l.MaxInflightBytes) < int64(maxFrameBytes) {
		bad(prefix+"max_inflight_bytes", "%d: want at least %s (one request of the largest size)", l.MaxInflightBytes, sizeText(int64(maxFrameBytes)))
	}
	if l.BodyTimeout < 0 {
		bad(prefix+"body_timeout", "%v: must not be negative", l.BodyTimeout)
	}
}

// sizeText writes n as a config file would: 100MiB, 4KiB or 1000.
func sizeText(n int64) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

// Pipelining is the cap on one connection's requests in progress: a
// connection keeps reading (and starts later Produce requests, whose
// appends queue behind the earlier ones') while earlier requests wait for
// their fsync; responses are written in request order. Clients send up to
// 5 (kgo, the Java client) or more (librdkafka) in flight. The edge's
// kafka: section embeds it.
type Pipelining struct {
	// MaxPipelinedRequests bounds the requests one connection has
	// read and not yet answered (produce requests waiting for their
	// fsync while later ones are started); responses go out in
	// request order. Default 16, 1 to 1024.
	MaxPipelinedRequests int `yaml:"max_pipelined_requests"`
}

// Defaults fills the unset cap with its default.
func (p *Pipelining) Defaults() {
	if p.MaxPipelinedRequests == 0 {
		p.MaxPipelinedRequests = DefaultMaxPipelinedRequests
	}
}

// Validate reports a wrong cap, after Defaults, to bad as
// prefix+"max_pipelined_requests".
func (p Pipelining) Validate(prefix string, bad func(field, format string, args ...any)) {
	if p.MaxPipelinedRequests < 1 || p.MaxPipelinedRequests > MaxPipelinedRequestsLimit {
		bad(prefix+"max_pipelined_requests", "%d: want 1 to %d", p.MaxPipelinedRequests, MaxPipelinedRequestsLimit)
	}
}

// firstFrameBytes bounds a connection's first request (clients open with
// ApiVersions or Metadata): a stranger cannot make the server allocate
// MaxFrameBytes before it has spoken the protocol once.
const firstFrameBytes = 1 << 20

// Defaults.
const (
	DefaultAddr          = ":9092"
	DefaultClusterID     = "tributary"
	DefaultMaxFrameBytes = 100 << 20
	// DefaultMaxInflightBytes is MaxInflightBytes' default (raised to
	// MaxFrameBytes when that is larger).
	DefaultMaxInflightBytes = 512 << 20
	DefaultIdleTimeout      = 10 * time.Minute
	// DefaultMaxPipelinedRequests is MaxPipelinedRequests' default.
	DefaultMaxPipelinedRequests = 16
	// MaxPipelinedRequestsLimit is MaxPipelinedRequests' largest value.
	MaxPipelinedRequestsLimit = 1024
	DefaultBodyTimeout        = 30 * time.Second
)

// ErrInvalidConfig is wrapped by Config.Validate errors.
var ErrInvalidConfig = errors.New("kafka: invalid config")

// SetDefaults fills every unset field with its default.
func (c *Config) SetDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ClusterID == "" {
		c.ClusterID = DefaultClusterID
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	c.Listener.defaults(c.MaxFrameBytes)
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	c.Pipelining.Defaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks a configuration after defaults are applied.
func (c Config) Validate() error {
	c.SetDefaults()
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("%w: addr %q: %v", ErrInvalidConfig, c.Addr, err)
	}
	if c.AdvertisedAddr != "" {
		if _, _, err := SplitHostPort32(c.AdvertisedAddr); err != nil {
			return fmt.Errorf("%w: advertised_addr %q: %v", ErrInvalidConfig, c.AdvertisedAddr, err)
		}
	}
	switch {
	case c.MaxFrameBytes < 1024:
		return fmt.Errorf("%w: max_frame_bytes %d < 1024", ErrInvalidConfig, c.MaxFrameBytes)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: idle_timeout %v: must not be negative", ErrInvalidConfig, c.IdleTimeout)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	c.Listener.validate("", c.MaxFrameBytes, bad)
	c.Pipelining.Validate("", bad)
	return errors.Join(errs...)
}
