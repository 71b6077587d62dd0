package pulsar

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/subscription"
)

// Caps and their defaults are package subscription's; the consumers per
// connection and the producers' caps are this server's
// (Config.MaxConsumersPerConn, MaxProducersPerConn, MaxPendingSends,
// MaxBatchMessages; the frame cap MaxFrameBytes bounds a SEND's payload,
// compressed and not).
type Caps = subscription.Caps

const (
	DefaultMaxConsumersPerConn   = 1000
	DefaultMaxSubscriptions      = subscription.DefaultMaxSubscriptions
	DefaultMaxUnackedPerConsumer = subscription.DefaultMaxUnackedPerConsumer
	DefaultMaxAckedRanges        = subscription.DefaultMaxAckedRanges
	// Producers: per connection, SENDs in flight per producer, messages
	// of one batch (pulsar-client-go batches at most 1000).
	DefaultMaxProducersPerConn = 1000
	DefaultMaxPendingSends     = 10000
	DefaultMaxBatchMessages    = 10000
)

// CapStats returns the server's subscription cap counters.
func (s *Server) CapStats() CapStats { return s.m.CapStats() }

// Collectors export CapStats: tributary_pulsar_acks_refused_total and
// tributary_pulsar_consumer_blocked_total.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_pulsar_acks_refused_total",
			Help: "Pulsar individual acks refused: the subscription holds the most acknowledged ranges (out-of-order acks)."},
			func() float64 { return float64(s.CapStats().AcksRefused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_pulsar_consumer_blocked_total",
			Help: "Pulsar dispatch checks that found a consumer with permits holding the most unacknowledged messages."},
			func() float64 { return float64(s.CapStats().ConsumerBlocked) }),
	}
}
