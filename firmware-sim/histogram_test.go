package firmwaresim

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

func within(t *testing.T, name string, got, want time.Duration, rel float64) {
	t.Helper()
	if diff := math.Abs(float64(got - want)); diff > rel*float64(want) {
		t.Errorf("%s = %v, want %v ±%.1f%%", name, got, want, 100*rel)
	}
}

func TestHistogramIndexRoundTrip(t *testing.T) {
	prev := -1
	for _, v := range []int64{0, 1, 255, 256, 257, 511, 512, 1000, 123456, 1 << 30, 987654321012, 1 << 42} {
		i := histIndex(v)
		if i < prev {
			t.Fatalf("index not monotonic at %d", v)
		}
		prev = i
		mid := histValue(i)
		if v < 256 && mid != v {
			t.Errorf("exact range: value %d -> %d", v, mid)
		}
		if rel := math.Abs(float64(mid-v)) / float64(max(v, 1)); rel > 1.0/128 {
			t.Errorf("value %d -> bucket midpoint %d (%.3f%% off)", v, mid, 100*rel)
		}
	}
	// Every bucket boundary is contiguous.
	for i := 2 * histSub; i < histBuckets-1; i++ {
		if histIndex(histValue(i)) != i {
			t.Fatalf("bucket %d midpoint %d maps to %d", i, histValue(i), histIndex(histValue(i)))
		}
	}
}

func TestHistogramUniform(t *testing.T) {
	var h Histogram
	// 1µs, 2µs, … 10000µs: p50 = 5ms, p90 = 9ms, p99 = 9.9ms.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 10000 {
		t.Fatalf("count %d", h.Count())
	}
	within(t, "p50", h.Quantile(0.5), 5*time.Millisecond, 0.005)
	within(t, "p90", h.Quantile(0.9), 9*time.Millisecond, 0.005)
	within(t, "p99", h.Quantile(0.99), 9900*time.Microsecond, 0.005)
	if h.Max() != 10*time.Millisecond || h.Min() != time.Microsecond {
		t.Errorf("min %v max %v", h.Min(), h.Max())
	}
	within(t, "mean", h.Mean(), 5000500*time.Nanosecond, 0.0001)
	if h.Quantile(1) != h.Max() || h.Quantile(0) != h.Min() {
		t.Errorf("q0/q1 should be min/max")
	}
}

func TestHistogramExponentialMatchesExact(t *testing.T) {
	rng := testkit.Rand(t, 1, 2)
	var h Histogram
	vals := make([]time.Duration, 200000)
	for i := range vals {
		// Mean 300µs, long tail, like broker ack latencies.
		vals[i] = time.Duration(rng.ExpFloat64() * 300e3)
		h.Record(vals[i])
	}
	slices.Sort(vals)
	exact := func(q float64) time.Duration {
		return vals[int(math.Ceil(q*float64(len(vals))))-1]
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		within(t, "quantile", h.Quantile(q), exact(q), 0.01)
	}
	if h.Max() != vals[len(vals)-1] {
		t.Errorf("max %v want %v", h.Max(), vals[len(vals)-1])
	}
	// Analytic median of Exp(mean 300µs) is 300µs·ln2.
	within(t, "p50 analytic", h.Quantile(0.5), time.Duration(207944), 0.02)
}

func TestHistogramBimodalConcurrentMerge(t *testing.T) {
	// 95 % fast (100µs), 5 % slow (20ms), recorded from 4 goroutines.
	var a, b Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &a
			if g%2 == 1 {
				h = &b
			}
			for i := range 10000 {
				if i%20 == 0 {
					h.Record(20 * time.Millisecond)
				} else {
					h.Record(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	a.Merge(&b)
	s := a.Summary()
	if s.Count != 40000 {
		t.Fatalf("count %d", s.Count)
	}
	within(t, "p50", s.P50, 100*time.Microsecond, 0.005)
	within(t, "p90", s.P90, 100*time.Microsecond, 0.005)
	within(t, "p99", s.P99, 20*time.Millisecond, 0.005)
	if s.Max != 20*time.Millisecond || s.Min != 100*time.Microsecond {
		t.Errorf("min %v max %v", s.Min, s.Max)
	}
}

func TestHistogramEmptyAndExtremes(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Mean() != 0 || h.Summary().String() != "n=0" {
		t.Fatal("empty histogram should report zeros")
	}
	h.Record(-5)
	h.Record(100 * time.Hour) // beyond the bucket range: clamped, Max exact
	if h.Min() != 0 || h.Max() != 100*time.Hour || h.Quantile(1) != 100*time.Hour {
		t.Errorf("min %v max %v", h.Min(), h.Max())
	}
}
