package mqtt

import (
	"github.com/prometheus/client_golang/prometheus"
)

// newPubackHistogram measures how long a QoS 1/2 publish waits between
// its arrival in OnPublish and its acknowledgement (the WAL append and
// fsync, and replication when configured).
func newPubackHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_mqtt_puback_latency_seconds",
		Help:    "Time from receiving an MQTT QoS 1/2 publish to acknowledging it (PUBACK/PUBREC): the WAL append and fsync it waits for.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}) // 100µs … 3.3s
}

// PubackHistogram is tributary_mqtt_puback_latency_seconds, to register
// with a Prometheus registry.
func (s *Server) PubackHistogram() prometheus.Collector { return s.pubackLatency }
