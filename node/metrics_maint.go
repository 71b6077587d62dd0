package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

// maintCollector exports the table maintainer's per-stream figures as of
// its last pass (snapshots, manifests, data files, metadata bytes, and the
// pass itself).
type maintCollector struct {
	n                                              *Node
	snapshots, manifests, files, rows, metaBytes   *prometheus.Desc
	passes, failures, leaseBusy, lastPass, lastDur *prometheus.Desc
	refused                                        *prometheus.Desc
}

func newMaintCollector(n *Node) *maintCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"stream"}, nil)
	}
	return &maintCollector{n: n,
		snapshots: d("tributary_table_snapshots", "Snapshots in the table's metadata (at the last maintenance pass)."),
		manifests: d("tributary_table_data_manifests", "Data manifests of the current snapshot."),
		files:     d("tributary_table_data_files", "Data files of the current snapshot."),
		rows:      d("tributary_table_rows", "Rows of the current snapshot."),
		metaBytes: d("tributary_table_metadata_bytes", "Size of the current metadata file."),
		passes:    d("tributary_maintenance_passes_total", "Maintenance passes run."),
		failures:  d("tributary_maintenance_failures_total", "Maintenance passes that failed."),
		leaseBusy: d("tributary_maintenance_lease_busy_total", "Passes skipped because another maintainer held the table's lease."),
		lastPass:  d("tributary_maintenance_last_pass_timestamp_seconds", "Unix time of the last maintenance pass."),
		lastDur:   d("tributary_maintenance_last_pass_duration_seconds", "Duration of the last maintenance pass."),
		refused:   d("tributary_maintenance_deletes_refused_total", "Deletes of files outside the table's folder that maintenance refused."),
	}
}

func (c *maintCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.snapshots, c.manifests, c.files, c.rows, c.metaBytes,
		c.passes, c.failures, c.leaseBusy, c.lastPass, c.lastDur, c.refused} {
		ch <- d
	}
}

func (c *maintCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.maint == nil {
		return
	}
	for _, s := range c.n.maint.Stats() {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Stream)
		}
		k := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, s.Stream)
		}
		g(c.snapshots, float64(s.Snapshots))
		g(c.manifests, float64(s.DataManifests))
		g(c.files, float64(s.DataFiles))
		g(c.rows, float64(s.Records))
		g(c.metaBytes, float64(s.MetadataBytes))
		k(c.passes, float64(s.Passes))
		k(c.failures, float64(s.Failures))
		k(c.leaseBusy, float64(s.LeaseBusy))
		k(c.refused, float64(s.DeletesRefused))
		if !s.LastPass.IsZero() {
			g(c.lastPass, float64(s.LastPass.UnixNano())/1e9)
		}
		g(c.lastDur, s.LastDuration.Seconds())
	}
}
