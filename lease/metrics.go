package lease

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors exports the lease's state; k is read at every scrape (nil
// while replication is off: the gauges read 0, may_write 1).
func Collectors(k *atomic.Pointer[Keeper]) []prometheus.Collector {
	status := func() (Status, bool) {
		if kk := k.Load(); kk != nil {
			return kk.Status(), true
		}
		return Status{MayWrite: true}, false
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge := func(name, help string, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			st, _ := status()
			return f(st)
		})
	}
	return []prometheus.Collector{
		gauge("tributary_lease_valid", "1 while this node's owner lease in the catalog is valid (renewed within 70% of cluster.owner_lease).",
			func(s Status) float64 { return b(s.Valid) }),
		gauge("tributary_lease_may_write", "1 while this node accepts writes: its lease is valid or it sees a majority of the site alive; 0 = refusing (a peer may take its partitions over).",
			func(s Status) float64 { return b(s.MayWrite) }),
		gauge("tributary_site_members", "Members of the site counted for its majority (seen, not left, remembered across restarts).",
			func(s Status) float64 { return float64(s.SiteSize) }),
		gauge("tributary_site_alive", "Members of the site this node sees alive, itself included.",
			func(s Status) float64 { return float64(s.Alive) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_lease_refusals_total",
			Help: "Writes refused because this node held neither its lease nor a majority of the site."}, func() float64 {
			if kk := k.Load(); kk != nil {
				return float64(kk.refusals.Load())
			}
			return 0
		}),
	}
}
