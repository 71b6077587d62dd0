package firmwaresim

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// histSubBits sets the precision of Histogram: every power-of-two range of
// values is split into 2^histSubBits linear sub-buckets, so a recorded value
// is known to within 1/2^(histSubBits+1) of itself (±0.4 % for 7 bits).
const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// histMaxShift bounds the largest recordable value at
	// 2^(histMaxShift+histSubBits+1) ns ≈ 2.4 hours; larger values are
	// clamped into the last bucket (Max stays exact).
	histMaxShift = 35
	histBuckets  = (histMaxShift + 2) * histSub
)

// Histogram is a log-bucketed (HDR-style) histogram of durations with
// nanosecond resolution. Values below 256 ns are counted exactly; above that
// each bucket spans less than 0.8 % of its value and quantiles report the
// bucket midpoint, so any quantile is within ±0.4 % of a value that was
// actually recorded at that rank. Record is lock-free and safe for
// concurrent use; reading while recording gives an approximate snapshot.
// The zero value is ready to use. It takes about 38 KiB.
type Histogram struct {
	counts [histBuckets]atomic.Int64
	total  atomic.Int64
	sum    atomic.Int64 // nanoseconds
	min    atomic.Int64 // nanoseconds + 1 (0 = unset)
	max    atomic.Int64 // nanoseconds
}

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1)
	if shift > histMaxShift {
		return histBuckets - 1
	}
	return shift*histSub + int(v>>shift)
}

// histValue returns the midpoint of bucket i.
func histValue(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	mantissa := int64(i%histSub + histSub)
	low := mantissa << shift
	return low + (int64(1)<<shift-1)/2
}

// Record adds one observation. Negative durations are recorded as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)].Add(1)
	h.total.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && v+1 >= m) || h.min.CompareAndSwap(m, v+1) {
			break
		}
	}
}

// Count returns the number of recorded observations.
func (h *Histogram) Count() int64 { return h.total.Load() }

// Max returns the largest recorded value exactly (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Min returns the smallest recorded value exactly (0 when empty).
func (h *Histogram) Min() time.Duration {
	m := h.min.Load()
	if m == 0 {
		return 0
	}
	return time.Duration(m - 1)
}

// Mean returns the arithmetic mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Quantile returns the value at quantile q (0 ≤ q ≤ 1): the smallest
// bucket value such that at least q of the observations are at or below it,
// clamped to [Min, Max]. It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	if q <= 0 {
		return h.Min()
	}
	if q >= 1 {
		return h.Max()
	}
	rank := int64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var cum int64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if cum >= rank {
			v := time.Duration(histValue(i))
			if v > h.Max() {
				v = h.Max()
			}
			if v < h.Min() {
				v = h.Min()
			}
			return v
		}
	}
	return h.Max()
}

// Merge adds every observation of o into h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.total.Add(o.total.Load())
	h.sum.Add(o.sum.Load())
	if o.total.Load() > 0 {
		omax := o.max.Load()
		for {
			m := h.max.Load()
			if omax <= m || h.max.CompareAndSwap(m, omax) {
				break
			}
		}
		omin := o.min.Load()
		for {
			m := h.min.Load()
			if (m != 0 && omin >= m) || h.min.CompareAndSwap(m, omin) {
				break
			}
		}
	}
}

// Latency is a percentile summary of a Histogram.
type Latency struct {
	Count int64         `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summary returns the percentile summary of h.
func (h *Histogram) Summary() Latency {
	return Latency{
		Count: h.Count(),
		Min:   h.Min(),
		Mean:  h.Mean(),
		P50:   h.Quantile(0.50),
		P90:   h.Quantile(0.90),
		P99:   h.Quantile(0.99),
		P999:  h.Quantile(0.999),
		Max:   h.Max(),
	}
}

// String formats the summary on one line.
func (l Latency) String() string {
	if l.Count == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d min=%s mean=%s p50=%s p90=%s p99=%s p99.9=%s max=%s",
		l.Count, fmtDur(l.Min), fmtDur(l.Mean), fmtDur(l.P50), fmtDur(l.P90),
		fmtDur(l.P99), fmtDur(l.P999), fmtDur(l.Max))
}

// fmtDur rounds a duration to about four significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d >= 10*time.Microsecond:
		return d.Round(10 * time.Nanosecond).String()
	default:
		return d.String()
	}
}
