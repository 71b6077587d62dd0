package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// Config configures a Server's listener, shared by the produce and consume
// sides (each embeds it in its own Config). Zero values take the defaults
// below.
type Config struct {
	// Addr is the listen address. Default ":9092".
	Addr string `yaml:"addr"`
	// AdvertisedAddr is the host:port this node announces in Metadata.
	// Default: the listener's address (set it when listening on a
	// wildcard address).
	AdvertisedAddr string `yaml:"advertised_addr"`
	// ClusterID is returned in Metadata v2+. Default "tributary".
	ClusterID string `yaml:"cluster_id"`
	// MaxFrameBytes bounds one request frame; a larger frame closes the
	// connection. Default 100 MiB.
	MaxFrameBytes int32 `yaml:"max_frame_bytes"`
	// MaxInflightBytes bounds the request bytes the server holds at once
	// across all its connections: frames read but not yet answered. A
	// connection whose next frame would exceed it is not read further
	// (back-pressure through TCP) until other requests are answered;
	// nothing is refused. A connection holds the frames of the requests
	// it has in progress (MaxPipelinedRequests; before its first request,
	// and before SASL when authentication is required, one frame of at
	// most 1 MiB at a time). Default 512 MiB; at least MaxFrameBytes.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MaxPipelinedRequests bounds the requests of one connection that
	// are read and not yet answered: a connection keeps reading (and
	// starts later Produce requests, whose appends queue behind the
	// earlier ones') while earlier requests wait for their fsync;
	// responses are written in request order. Clients send up to 5
	// (kgo, the Java client) or more (librdkafka) in flight. Default 16,
	// at most 1024.
	MaxPipelinedRequests int `yaml:"max_pipelined_requests"`
	// IdleTimeout closes connections that send nothing for this long.
	// Default 10m (Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// BodyTimeout bounds the time a request's body may take to arrive
	// once its size has been read, plus one second per MiB of the frame:
	// a frame's bytes are reserved (MaxInflightBytes) before its body is
	// read, so a client that sends a large size and then trickles the
	// body would otherwise hold that reservation until IdleTimeout. The
	// connection is closed (counted as malformed). Default 30s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// Limits are the listener's connection caps and the deadline for the
	// first request (package listen; zero values take its defaults).
	Limits listen.Config `yaml:"-"`
	// Auth authenticates clients (SASL) and decides their requests
	// (ACLs); nil = every client is anonymous and every request allowed.
	Auth *auth.Authority `yaml:"-"`
	// Logger; nil = slog.Default().
	Logger *slog.Logger `yaml:"-"`
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
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, int64(c.MaxFrameBytes))
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxPipelinedRequests == 0 {
		c.MaxPipelinedRequests = DefaultMaxPipelinedRequests
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
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
	case c.MaxInflightBytes < int64(c.MaxFrameBytes):
		return fmt.Errorf("%w: max_inflight_bytes %d < max_frame_bytes %d", ErrInvalidConfig, c.MaxInflightBytes, c.MaxFrameBytes)
	case c.MaxPipelinedRequests < 1 || c.MaxPipelinedRequests > MaxPipelinedRequestsLimit:
		return fmt.Errorf("%w: max_pipelined_requests %d not in [1, %d]", ErrInvalidConfig, c.MaxPipelinedRequests, MaxPipelinedRequestsLimit)
	case c.IdleTimeout < 0 || c.BodyTimeout < 0:
		return fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	}
	return nil
}
