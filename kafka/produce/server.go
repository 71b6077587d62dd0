package produce

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/listen"
)

// Config configures a Server. Zero values take the defaults below.
type Config struct {
	// Config holds the listener settings (Addr, AdvertisedAddr,
	// ClusterID, MaxFrameBytes, IdleTimeout, Logger).
	kafka.Config `yaml:",inline"`
	// AutoCreate creates unknown streams on Metadata (when the client allows
	// it) and on Produce. Default off.
	AutoCreate bool `yaml:"auto_create"`
	// MaxAutoCreatePerRequest bounds the streams one Metadata request may
	// create (the other names asked for get UNKNOWN_TOPIC_OR_PARTITION, and
	// the client asks again). Default 1.
	MaxAutoCreatePerRequest int `yaml:"max_auto_create_per_request"`
	// MaxBatchBytes bounds one produced record batch as sent (Kafka's
	// message.max.bytes); larger batches get MESSAGE_TOO_LARGE. Default
	// 1048588, Kafka's default (at most MaxFrameBytes).
	MaxBatchBytes int32 `yaml:"max_batch_bytes"`
	// MaxDecompressedBytes bounds a batch's records after decompression
	// (decompression-bomb guard); larger batches get MESSAGE_TOO_LARGE.
	// Default 64 MiB.
	MaxDecompressedBytes int64 `yaml:"max_decompressed_bytes"`
	// MaxInflightDecompressedBytes bounds the batches being decoded at once
	// across all connections (a request's partitions are decoded in
	// parallel): a decode waits for room. Default 256 MiB.
	MaxInflightDecompressedBytes int64 `yaml:"max_inflight_decompressed_bytes"`
	// MaxHeadersPerRecord bounds a record's headers; a batch with a record
	// beyond it gets INVALID_RECORD. Default 1000.
	MaxHeadersPerRecord int `yaml:"max_headers_per_record"`
	// BackpressureThrottle is the throttle time returned with
	// KAFKA_STORAGE_ERROR when the WAL budget is exhausted. Default 1s.
	BackpressureThrottle time.Duration `yaml:"backpressure_throttle"`
	// ProducerIdleExpiry forgets idempotent-producer state in memory that
	// has not been used for this long. Default 24h.
	ProducerIdleExpiry time.Duration `yaml:"producer_idle_expiry"`
}

// Defaults of the produce side.
const (
	DefaultMaxBatchBytes        = 1048588
	DefaultMaxDecompressedBytes = 64 << 20
	DefaultBackpressureThrottle = time.Second
	DefaultProducerIdleExpiry   = 24 * time.Hour
)

func (c *Config) setDefaults() {
	c.Config.SetDefaults()
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = min(DefaultMaxBatchBytes, c.MaxFrameBytes)
	}
	if c.MaxDecompressedBytes == 0 {
		c.MaxDecompressedBytes = DefaultMaxDecompressedBytes
	}
	if c.MaxAutoCreatePerRequest <= 0 {
		c.MaxAutoCreatePerRequest = 1
	}
	if c.MaxInflightDecompressedBytes <= 0 {
		c.MaxInflightDecompressedBytes = max(256<<20, c.MaxDecompressedBytes)
	}
	if c.MaxHeadersPerRecord <= 0 {
		c.MaxHeadersPerRecord = kafka.DefaultMaxHeadersPerRecord
	}
	if c.BackpressureThrottle == 0 {
		c.BackpressureThrottle = DefaultBackpressureThrottle
	}
	if c.ProducerIdleExpiry == 0 {
		c.ProducerIdleExpiry = DefaultProducerIdleExpiry
	}
}

// Validate checks a configuration after defaults are applied.
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	c.setDefaults()
	switch {
	case c.MaxBatchBytes < 61 || c.MaxBatchBytes > c.MaxFrameBytes:
		return fmt.Errorf("%w: max_batch_bytes %d not in [61, max_frame_bytes]", kafka.ErrInvalidConfig, c.MaxBatchBytes)
	case c.MaxDecompressedBytes < 1:
		return fmt.Errorf("%w: max_decompressed_bytes %d", kafka.ErrInvalidConfig, c.MaxDecompressedBytes)
	case c.BackpressureThrottle < 0 || c.ProducerIdleExpiry < 0:
		return fmt.Errorf("%w: negative duration", kafka.ErrInvalidConfig)
	}
	return nil
}

// apis are the API keys and versions the produce side implements.
//   - Produce v3–v12: v3 is the first with record batches (message format
//     v2, required); v13 addresses topics by id.
//   - Metadata v0–v12: v10+ carry topic ids, which we derive stably from the
//     topic name (topicID); v13 adds a top-level error code we do not need.
//   - InitProducerId v0–v4: idempotent producers only.
//   - Fetch v4–v12: advertised for librdkafka's feature detection only and
//     refused per partition (see fetch.go).
//   - SaslHandshake v0–v1, SaslAuthenticate v0–v2: answered by
//     kafka.Server, listed so that ApiVersions advertises them.
//   - ApiVersions v0–v4 (kafka.HandleApiVersions); no group or
//     transaction APIs: this is the produce side of an edge node.
var apis = kafka.APIs{
	kafka.ProduceKey:        {Min: 3, Max: 12},
	kafka.FetchKey:          {Min: 4, Max: 12},
	kafka.MetadataKey:       {Min: 0, Max: 12},
	kafka.ApiVersionsKey:    kafka.ApiVersionsVersions,
	kafka.InitProducerIDKey: {Min: 0, Max: 4},
	// Answered by kafka.Server (SASL authentication).
	kafka.SaslHandshakeKey:    kafka.SaslHandshakeVersions,
	kafka.SaslAuthenticateKey: kafka.SaslAuthenticateVersions,
}

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
	InflightBytes   int64 // request bytes held now (kafka.Stats)
	InflightWaits   int64 // frames whose reading waited for MaxInflightBytes
	Pipelined       int64 // requests read while an earlier one of the connection was unanswered
}

// Server is a Kafka protocol front door for producers.
type Server struct {
	conn *kafka.Server
	cfg  Config
	b    Backend
	a    tributary.Appender // the durable log
	log  *slog.Logger
	prod *producers
	// topics are Produce's recent topic lookups (produce.go).
	topics topicCache
	// decoding bounds the decompressed bytes of batches being decoded.
	decoding *semaphore.Weighted
	latency  prometheus.Histogram

	stats struct {
		batches, records, dups, partErrs, backpressured atomic.Int64
	}
}

// NewServer validates cfg and returns a Server that is not yet listening,
// appending to a.
func NewServer(cfg Config, b Backend, a tributary.Appender) (*Server, error) {
	if b == nil || a == nil {
		return nil, fmt.Errorf("%w: nil backend or appender", kafka.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Server{cfg: cfg, b: b, a: a, prod: newProducers(cfg.ProducerIdleExpiry),
		decoding: semaphore.NewWeighted(cfg.MaxInflightDecompressedBytes), latency: newLatencyHistogram()}
	conn, err := kafka.NewServer(cfg.Config, "kafka", apis, s)
	if err != nil {
		return nil, err
	}
	s.conn, s.log = conn, conn.Logger()
	return s, nil
}

// Start loads the idempotent-producer state from the backend, listens on
// cfg.Addr and serves connections in the background.
func (s *Server) Start() error {
	runs, err := s.b.ProducerRuns(s.conn.Context())
	if err != nil {
		return fmt.Errorf("kafka: load producer state: %w", err)
	}
	s.prod.load(runs)
	return s.conn.Start("node", s.b.NodeID(), "producer_runs", len(runs))
}

// Addr is the listener's address (useful with port 0), or "" before Start.
func (s *Server) Addr() string { return s.conn.Addr() }

// Close stops accepting, lets each connection finish the request it is
// handling (its response is still written), then closes it. When ctx ends
// first, connections are closed at once and in-flight appends canceled.
func (s *Server) Close(ctx context.Context) error { return s.conn.Close(ctx) }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats {
	c := s.conn.Stats()
	return Stats{
		Connections:     c.Connections,
		Accepted:        c.Accepted,
		Requests:        c.Requests,
		ClosedMalformed: c.ClosedMalformed,
		ProducedBatches: s.stats.batches.Load(),
		ProducedRecords: s.stats.records.Load(),
		DuplicateBatch:  s.stats.dups.Load(),
		PartitionErrors: s.stats.partErrs.Load(),
		Backpressure:    s.stats.backpressured.Load(),
		InflightBytes:   c.InflightBytes,
		InflightWaits:   c.InflightWaits,
		Pipelined:       c.Pipelined,
	}
}

// Handle dispatches one request (kafka.Handler). A nil response means
// none is sent (Produce with acks=0); closeAfter asks to close the
// connection.
func (s *Server) Handle(ctx context.Context, req *kafka.Request) (resp kmsg.Response, closeAfter bool) {
	switch r := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		return kafka.HandleApiVersions(req, r, apis), false
	case *kmsg.FetchRequest:
		return s.handleFetch(req, r), false
	case *kmsg.MetadataRequest:
		return s.handleMetadata(ctx, req, r), false
	case *kmsg.ProduceRequest:
		return s.handleProduce(ctx, req, r)
	case *kmsg.InitProducerIDRequest:
		return s.handleInitProducerID(ctx, req, r), false
	}
	// kafka.DecodeRequest admits only the keys of apis.
	panic(fmt.Sprintf("kafka: no handler for key %d", req.Key))
}

// ListenerStats are the listener's connection counters.
func (s *Server) ListenerStats() listen.Stats { return s.conn.ListenerStats() }
