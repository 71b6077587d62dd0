package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Config configures a Server. Zero values take the defaults below.
type Config struct {
	// Addr is the listen address. Default ":9092".
	Addr string `yaml:"addr"`
	// AdvertisedAddr is the host:port this node announces in Metadata.
	// Default: the listener's address (set it when listening on a
	// wildcard address).
	AdvertisedAddr string `yaml:"advertised_addr"`
	// ClusterID is returned in Metadata v2+. Default "tributary".
	ClusterID string `yaml:"cluster_id"`
	// AutoCreate creates unknown streams on Metadata (when the client allows
	// it) and on Produce. Default off.
	AutoCreate bool `yaml:"auto_create"`
	// MaxFrameBytes bounds one request frame; a larger frame closes the
	// connection. Default 100 MiB.
	MaxFrameBytes int32 `yaml:"max_frame_bytes"`
	// MaxBatchBytes bounds one produced record batch as sent (Kafka's
	// message.max.bytes); larger batches get MESSAGE_TOO_LARGE. Default
	// 1048588, Kafka's default.
	MaxBatchBytes int32 `yaml:"max_batch_bytes"`
	// MaxDecompressedBytes bounds a batch's records after decompression
	// (decompression-bomb guard); larger batches get MESSAGE_TOO_LARGE.
	// Default 64 MiB.
	MaxDecompressedBytes int64 `yaml:"max_decompressed_bytes"`
	// BackpressureThrottle is the throttle time returned with
	// KAFKA_STORAGE_ERROR when the WAL budget is exhausted. Default 1s.
	BackpressureThrottle time.Duration `yaml:"backpressure_throttle"`
	// IdleTimeout closes connections that send nothing for this long.
	// Default 10m (Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ProducerIdleExpiry forgets idempotent-producer state in memory that
	// has not been used for this long. Default 24h.
	ProducerIdleExpiry time.Duration `yaml:"producer_idle_expiry"`
	// Logger; nil = slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Defaults.
const (
	DefaultAddr                 = ":9092"
	DefaultClusterID            = "tributary"
	DefaultMaxFrameBytes        = 100 << 20
	DefaultMaxBatchBytes        = 1048588
	DefaultMaxDecompressedBytes = 64 << 20
	DefaultBackpressureThrottle = time.Second
	DefaultIdleTimeout          = 10 * time.Minute
	DefaultProducerIdleExpiry   = 24 * time.Hour
)

// ErrInvalidConfig is wrapped by Config.Validate errors.
var ErrInvalidConfig = errors.New("kafka: invalid config")

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ClusterID == "" {
		c.ClusterID = DefaultClusterID
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = min(DefaultMaxBatchBytes, c.MaxFrameBytes)
	}
	if c.MaxDecompressedBytes == 0 {
		c.MaxDecompressedBytes = DefaultMaxDecompressedBytes
	}
	if c.BackpressureThrottle == 0 {
		c.BackpressureThrottle = DefaultBackpressureThrottle
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ProducerIdleExpiry == 0 {
		c.ProducerIdleExpiry = DefaultProducerIdleExpiry
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks a configuration after defaults are applied.
func (c Config) Validate() error {
	c.setDefaults()
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("%w: addr %q: %v", ErrInvalidConfig, c.Addr, err)
	}
	if c.AdvertisedAddr != "" {
		if _, _, err := splitHostPort32(c.AdvertisedAddr); err != nil {
			return fmt.Errorf("%w: advertised_addr %q: %v", ErrInvalidConfig, c.AdvertisedAddr, err)
		}
	}
	switch {
	case c.MaxFrameBytes < 1024:
		return fmt.Errorf("%w: max_frame_bytes %d < 1024", ErrInvalidConfig, c.MaxFrameBytes)
	case c.MaxBatchBytes < 61 || c.MaxBatchBytes > c.MaxFrameBytes:
		return fmt.Errorf("%w: max_batch_bytes %d not in [61, max_frame_bytes]", ErrInvalidConfig, c.MaxBatchBytes)
	case c.MaxDecompressedBytes < 1:
		return fmt.Errorf("%w: max_decompressed_bytes %d", ErrInvalidConfig, c.MaxDecompressedBytes)
	case c.BackpressureThrottle < 0 || c.IdleTimeout < 0 || c.ProducerIdleExpiry < 0:
		return fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	}
	return nil
}
