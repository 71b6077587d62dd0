//go:build bench

package e2e

import (
	"testing"
	"time"
)

// longTimes are make bench's holds: a minute for every cut and pause.
var longTimes = partTimes{hold: 60 * time.Second, flapCut: 10 * time.Second, flapUp: 5 * time.Second, catalog: 60 * time.Second}

// TestBenchPartition is the partition suite (partition_test.go) with 60 s
// holds on 3-node sites, and on a 5-node site one node cut from the other
// four and two nodes from the other three. Each scenario prints
// acknowledged, in the table, missing, duplicated, refused by code, the
// time to takeover and to replication restored after the heal, and the
// majority side's ingest rate during the cut against before it (aim ≥ 0.8).
func TestBenchPartition(t *testing.T) {
	scenarios := partScenarios(longTimes)
	minority := func(k int) func(s *partSite, r *partResult) {
		return func(s *partSite, r *partResult) {
			iso := s.ids[len(s.ids)-k:]
			rest := s.ids[:len(s.ids)-k]
			s.fault(r, longTimes.hold, rest, func() {
				for _, n := range iso {
					s.net.cut(n, rest...)
				}
			}, func() {
				for _, n := range iso {
					s.net.heal(n, rest...)
				}
			})
		}
	}
	scenarios = append(scenarios,
		partScenario{"five_node_site_one_cut", 5, "degrade", minority(1)},
		partScenario{"five_node_site_one_cut_refuse", 5, "refuse", minority(1)},
		partScenario{"five_node_site_two_cut", 5, "degrade", minority(2)},
	)
	runPartition(t, scenarios, 1) // one site at a time: the rates are measured
}
