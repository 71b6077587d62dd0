package federation

import "github.com/prometheus/client_golang/prometheus"

var (
	descLag = prometheus.NewDesc("tributary_federation_lag_seconds",
		"Age of the oldest commit a mirror in this external catalog lacks (0: every mirror current).", []string{"catalog"}, nil)
	descErrors = prometheus.NewDesc("tributary_federation_errors_total",
		"Failed federation rounds (catalog unreachable, credential refused) and refused mirror updates.", []string{"catalog"}, nil)
	descMirrors = prometheus.NewDesc("tributary_federation_mirrors",
		"Streams by mirror state in this external catalog: current or behind.", []string{"catalog", "state"}, nil)
	descSyncs = prometheus.NewDesc("tributary_federation_updates_total",
		"Mirrors registered or brought up to date (register-table or a commit to the mirror).", []string{"catalog"}, nil)
)

// collector reads the loops' state at scrape time, so a loop blocked on
// an unreachable catalog still shows its lag growing.
type collector struct{ f *Federation }

// Collectors are the federation's metrics.
func (f *Federation) Collectors() []prometheus.Collector { return []prometheus.Collector{f.metrics} }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLag
	ch <- descErrors
	ch <- descMirrors
	ch <- descSyncs
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.f.loops {
		st := l.status()
		l.mu.Lock()
		syncs := l.syncs
		l.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, st.Lag.Seconds(), st.Name)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(st.Errors), st.Name)
		ch <- prometheus.MustNewConstMetric(descMirrors, prometheus.GaugeValue, float64(st.Mirrors), st.Name, "current")
		ch <- prometheus.MustNewConstMetric(descMirrors, prometheus.GaugeValue, float64(st.Behind), st.Name, "behind")
		ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(syncs), st.Name)
	}
}
