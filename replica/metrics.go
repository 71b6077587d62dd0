package replica

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the replication metrics of the Replicas r holds (zero
// while it holds none: before replication starts, or without it).
func Collectors(r *atomic.Pointer[Replicas]) []prometheus.Collector {
	stats := func() Stats {
		if rr := r.Load(); rr != nil {
			return rr.Stats()
		}
		return Stats{}
	}
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(stats()) })
	}
	counter := func(name, help string, f func(Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(stats())) })
	}
	return []prometheus.Collector{
		gauge("tributary_replication_degraded", "1 while records are acknowledged with fewer replicas than cluster.replication_factor.",
			func(s Stats) float64 {
				if s.Degraded {
					return 1
				}
				return 0
			}),
		gauge("tributary_replication_lag_records", "Records in this node's WAL not yet durable on every replica.",
			func(s Stats) float64 { return float64(s.LagRecords) }),
		counter("tributary_replicated_records_total", "Records of this node that its replicas confirmed durable.",
			func(s Stats) int64 { return s.ReplicatedRecords }),
		counter("tributary_replica_stored_records_total", "Records this node stored as a replica of other nodes.",
			func(s Stats) int64 { return s.StoredRecords }),
		counter("tributary_partition_takeovers_total", "Partitions of dead members this node took over.",
			func(s Stats) int64 { return s.Takeovers }),
		counter("tributary_replication_fenced_total", "Partitions a replica reported as taken over by another node.",
			func(s Stats) int64 { return s.Fenced }),
		counter("tributary_replica_truncated_records_total", "Records this node dropped from its replicas because their owner restarted without having made them durable.",
			func(s Stats) int64 { return s.TruncatedRecords }),
	}
}
