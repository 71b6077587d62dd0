package console

import (
	"math"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Hist is a cumulative latency histogram as Prometheus keeps it: Counts[i]
// observations were ≤ Bounds[i]; Count is the total (the +Inf bucket).
type Hist struct {
	// Name is what the histogram measures: one of the console's known
	// names ("puback", "wal_fsync", "wal_group", "upload", "commit",
	// "freshness"); Stream is set for per-stream ones.
	Name   string
	Stream string
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Histograms reads every histogram a collector exports (a Histogram or a
// HistogramVec) and names them name; the label "stream", when present,
// becomes Hist.Stream. Hosts use it to fill Snapshot.Latency from the
// histograms they already export to Prometheus.
func Histograms(name string, c prometheus.Collector) []Hist {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var out []Hist
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil || d.Histogram == nil {
			continue
		}
		h := Hist{Name: name, Count: d.Histogram.GetSampleCount(), Sum: d.Histogram.GetSampleSum()}
		for _, l := range d.Label {
			if l.GetName() == "stream" {
				h.Stream = l.GetValue()
			}
		}
		for _, b := range d.Histogram.Bucket {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			h.Bounds = append(h.Bounds, b.GetUpperBound())
			h.Counts = append(h.Counts, b.GetCumulativeCount())
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stream < out[j].Stream })
	return out
}

// delta is h minus an earlier reading of the same histogram (h itself when
// prev has different buckets or the host restarted).
func (h Hist) delta(prev *Hist) Hist {
	if prev == nil || len(prev.Counts) != len(h.Counts) || prev.Count > h.Count {
		return h
	}
	d := Hist{Name: h.Name, Stream: h.Stream, Bounds: h.Bounds, Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum,
		Counts: make([]uint64, len(h.Counts))}
	for i := range h.Counts {
		if h.Counts[i] >= prev.Counts[i] {
			d.Counts[i] = h.Counts[i] - prev.Counts[i]
		}
	}
	return d
}

// quantile estimates the q-quantile (0 < q < 1) the way Prometheus'
// histogram_quantile does: linear interpolation inside the bucket that
// holds the rank. ok is false for an empty histogram. Observations above
// the last bound are reported as the last bound.
func (h Hist) quantile(q float64) (v float64, ok bool) {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return 0, false
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, c := range h.Counts {
		if float64(c) >= rank {
			inBucket := c - below
			if inBucket == 0 {
				return h.Bounds[i], true
			}
			return lower + (h.Bounds[i]-lower)*(rank-float64(below))/float64(inBucket), true
		}
		lower, below = h.Bounds[i], c
	}
	return h.Bounds[len(h.Bounds)-1], true
}
