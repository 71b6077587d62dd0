package cloudwrite

import "github.com/prometheus/client_golang/prometheus"

// NewMetrics returns the metrics of a Writer (Config.Metrics).
func NewMetrics() *Metrics { return newMetrics() }

// Collectors are the metrics' collectors.
func (m *Metrics) Collectors() []prometheus.Collector { return m.collectors() }

// Metrics are a Writer's metrics. A server makes them once (NewMetrics)
// and exposes them whether it writes or not, so that the families exist
// (at zero) on every cloud server.
type Metrics struct {
	ack, put, sequence prometheus.Histogram
	objects, bytes     prometheus.Counter
	refused            prometheus.Counter
	failures           *prometheus.CounterVec
	held               prometheus.Gauge
}

func newMetrics() *Metrics {
	m := newMetricsVecs()
	for _, step := range []string{"put", "sequence", "late"} {
		m.failures.WithLabelValues(step)
	}
	return m
}

func newMetricsVecs() *Metrics {
	b := []float64{.005, .01, .025, .05, .1, .2, .3, .4, .5, .75, 1, 2, 5, 10}
	return &Metrics{
		ack: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_cloud_produce_ack_seconds",
			Help: "Time from a produce submission to its answer on a cloud server (buffering, WAL object put, sequencing).", Buckets: b}),
		put: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_cloud_wal_put_seconds",
			Help: "Time to put one WAL object to the warehouse store.", Buckets: b}),
		sequence: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_cloud_wal_sequence_seconds",
			Help: "Time of one WAL object's sequencing transaction in the state database.", Buckets: b}),
		objects: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_cloud_wal_objects_total",
			Help: "WAL objects written and sequenced by this cloud server."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_cloud_wal_bytes_total",
			Help: "Bytes of WAL objects written and sequenced by this cloud server."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_cloud_produce_backpressure_total",
			Help: "Produce submissions refused because the server's produce buffer was full."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_cloud_wal_failures_total",
			Help: "WAL object flushes that failed, by step (put, sequence, late); their producers got a retriable error."}, []string{"step"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_cloud_produce_buffered_bytes",
			Help: "Produced bytes this cloud server holds unanswered (buffered and being flushed)."}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ack, m.put, m.sequence, m.objects, m.bytes, m.refused, m.failures, m.held}
}
