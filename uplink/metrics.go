package uplink

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
)

// metrics are the uplink's latency histograms (the counters are in Stats).
type metrics struct {
	upload prometheus.Histogram     // one Parquet file written to the object store
	commit *prometheus.HistogramVec // one catalog commit, by stream
	fresh  *prometheus.HistogramVec // accept -> committed, per record, by stream
	dlq    *prometheus.CounterVec   // dead letters committed, by stream
	added  *prometheus.CounterVec   // typed columns added, by stream
	pre    *prometheus.CounterVec   // in-progress files taken by a pass, by outcome
}

func newMetrics() *metrics {
	return &metrics{
		upload: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_uplink_upload_duration_seconds",
			Help:    "Duration of writing one Parquet data file to the object store (successful writes).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}), // 1ms … 16s
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tributary_uplink_commit_duration_seconds",
			Help:    "Duration of one table commit (catalog transaction with the high-water marks), successful or not, by stream.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"stream"}),
		fresh: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tributary_freshness_seconds",
			Help: "End-to-end freshness: time from the edge node accepting a record to the table commit that made it queryable, per record, by stream. " +
				"Exemplars name the partition and offset of the stalest record of a commit.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 900, 3600, 4 * 3600, 24 * 3600}}, []string{"stream"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_dlq_records_total",
			Help: "Records of a typed stream whose payload is not typed (not JSON, not an object, a type conflict, too deep, ...), committed to the stream's dead-letter table, by stream."},
			[]string{"stream"}),
		added: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_typed_columns_added_total",
			Help: "Typed columns this node added to stream tables by schema evolution, by stream."},
			[]string{"stream"}),
		pre: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_uplink_preencoded_files_total",
			Help: "In-progress Parquet files of continuous encoding (uplink.continuous_encoding) that a pass took, by outcome: used (completed with the batch's tail and uploaded) or discarded (not provably a prefix of the batch: the batch was encoded from scratch)."},
			[]string{"outcome"}),
	}
}

// committed observes the freshness of every record of a committed batch
// (ents); the stalest carries an exemplar (one per batch: cheap).
func (m *metrics) committed(stream string, ents []tributary.Entry, now time.Time) {
	if len(ents) == 0 {
		return
	}
	h := m.fresh.WithLabelValues(stream)
	nowUS := now.UnixMicro()
	oldest := 0
	for i, e := range ents {
		if e.Timestamp() < ents[oldest].Timestamp() {
			oldest = i
		}
	}
	for i, e := range ents {
		n := e.Len()
		if i == oldest {
			n--
		}
		age := float64(nowUS-e.Timestamp()) / 1e6
		for range n {
			h.Observe(age)
		}
	}
	o := ents[oldest]
	var p int32
	if o.Record != nil {
		p = o.Record.Partition
	} else {
		p = o.Batch.Partition
	}
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(float64(nowUS-o.Timestamp())/1e6,
		prometheus.Labels{"partition": strconv.Itoa(int(p)), "offset": strconv.FormatInt(o.First(), 10)})
}

// Collectors returns the uplink's histograms, to register with a
// Prometheus registry.
func (u *Uplink) Collectors() []prometheus.Collector {
	// of reads a pre-encoder counter (0 without continuous encoding).
	of := func(c func(pe *preEncoder) *atomic.Int64) func() float64 {
		return func() float64 {
			if u.pre == nil {
				return 0
			}
			return float64(c(u.pre).Load())
		}
	}
	pre := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_uplink_preencoded_records",
		Help: "Records in the in-progress Parquet files of continuous encoding (uplink.continuous_encoding): encoded, not yet taken by a commit."},
		of(func(pe *preEncoder) *atomic.Int64 { return &pe.records }))
	preBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_uplink_preencoded_bytes",
		Help: "Bytes of records (payloads, keys, topics, headers) held by the in-progress Parquet files of continuous encoding, across all partitions: at most uplink.continuous_encoding_max_bytes."},
		of(func(pe *preEncoder) *atomic.Int64 { return &pe.bytes }))
	backoffs := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_uplink_preencode_backoffs_total",
		Help: "Times continuous encoding slept after a slice because ingest was short of CPU (over 1% of goroutine wake-ups since the last slice waited more than 1ms to run)."},
		of(func(pe *preEncoder) *atomic.Int64 { return &pe.backoffs }))
	return []prometheus.Collector{u.metrics.upload, u.metrics.commit, u.metrics.fresh, u.metrics.dlq, u.metrics.added, u.metrics.pre, pre, preBytes, backoffs}
}

// UploadHistogram, CommitHistogram and FreshnessHistogram are the three
// histograms, for hosts that read them directly (the console).
func (u *Uplink) UploadHistogram() prometheus.Collector { return u.metrics.upload }

// CommitHistogram: see UploadHistogram.
func (u *Uplink) CommitHistogram() prometheus.Collector { return u.metrics.commit }

// FreshnessHistogram: see UploadHistogram.
func (u *Uplink) FreshnessHistogram() prometheus.Collector { return u.metrics.fresh }
