package produce

import "github.com/prometheus/client_golang/prometheus"

// newLatencyHistogram measures how long a produced batch waits between its
// arrival and its durable append (WAL fsync, and replication when
// configured): what an acks=all producer waits for per partition.
func newLatencyHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_kafka_produce_latency_seconds",
		Help:    "Time from receiving a Kafka produce batch to its durable append (acks=all): decoding, the WAL append and fsync, replication.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}) // 100µs … 3.3s
}

// LatencyHistogram is tributary_kafka_produce_latency_seconds, to register
// with a Prometheus registry.
func (s *Server) LatencyHistogram() prometheus.Histogram { return s.latency }
