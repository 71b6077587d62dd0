package wal

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the WAL's latency and group-commit histograms (the counters
// are in Stats).
type metrics struct {
	fsync prometheus.Histogram // duration of one group commit, its fsyncs included
	group prometheus.Histogram // operations sharing one group commit
}

func newMetrics() *metrics {
	return &metrics{
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_wal_fsync_duration_seconds",
			Help:    "Duration of a WAL group commit, which every acknowledgement waits for: the journal record's write and fdatasync of a group that only appends, or the bbolt transaction and its fsyncs of one that also releases or drops.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}), // 100µs … 3.3s
		group: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_wal_group_ops",
			Help:    "Operations (appends, releases) sharing one WAL group commit and fsync.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}), // 1 … 8192
	}
}

func (m *metrics) observe(d time.Duration, ops int) {
	m.fsync.Observe(d.Seconds())
	m.group.Observe(float64(ops))
}

// Collectors returns the WAL's histograms, to register with a Prometheus
// registry: tributary_wal_fsync_duration_seconds and tributary_wal_group_ops,
// and tributary_wal_disk_write_seconds_total, the time bbolt's commits spent
// writing pages and the meta page and fsyncing each (its TxStats
// WriteTime): set against the sum of the first, it is the share of a group
// commit that is the disk's.
func (w *WAL) Collectors() []prometheus.Collector {
	disk := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_wal_disk_write_seconds_total",
		Help: "Time the WAL's bbolt commits spent writing their pages and fsyncing (bbolt's two fsyncs per commit), those of the journal's applier off the acknowledgement path included."},
		func() float64 { st := w.db.Stats(); return st.TxStats.GetWriteTime().Seconds() })
	return []prometheus.Collector{w.metrics.fsync, w.metrics.group, disk}
}

// FsyncHistogram and GroupHistogram are the two histograms, for hosts that
// read them directly (the console).
//
// Deprecated: Collectors returns them first and second.
func (w *WAL) FsyncHistogram() prometheus.Collector { return w.metrics.fsync }

// GroupHistogram: see FsyncHistogram.
//
// Deprecated: Collectors returns it second.
func (w *WAL) GroupHistogram() prometheus.Collector { return w.metrics.group }
