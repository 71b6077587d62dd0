package e2e

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// partScenario is one fault sequence on a fresh site of nodes members
// under policy; run applies it (the load is running) and fills in the
// times it measured.
type partScenario struct {
	name   string
	nodes  int
	policy string
	run    func(s *partSite, r *partResult)
}

// partScenarios are the suite's scenarios with the holds of tm.
func partScenarios(tm partTimes) []partScenario {
	oneCut := func(s *partSite, r *partResult) {
		iso := s.ids[len(s.ids)-1]
		rest := s.net.others("cat", iso)
		s.fault(r, tm.hold, rest, func() { s.net.cut(iso, rest...) }, func() { s.net.heal(iso, rest...) })
	}
	return []partScenario{
		{"a_one_node_cut_degrade", 3, "degrade", oneCut},
		{"b_one_node_cut_refuse", 3, "refuse", oneCut},
		{"c_isolated_node_killed", 3, "degrade", func(s *partSite, r *partResult) {
			rest := []string{"n1", "n2"}
			s.fault(r, tm.hold, rest, func() {
				s.net.cut("n3", rest...)
				s.kill("n3")
			}, func() {
				s.net.heal("n3", rest...)
				s.start("n3")
			})
		}},
		{"d_node_flapping", 3, "degrade", func(s *partSite, r *partResult) {
			rest := []string{"n1", "n2"}
			cut, heal := func() { s.net.cut("n3", rest...) }, func() { s.net.heal("n3", rest...) }
			// Four flaps, then the fifth with the wait for replication.
			r.takeover = s.watch(time.Now(), func() {
				for range 4 {
					cut()
					time.Sleep(tm.flapCut) // the flap's durations: the scenario's, not waits for a condition
					heal()
					time.Sleep(tm.flapUp)
				}
			})
			s.fault(r, tm.flapCut, rest, cut, heal)
		}},
		{"e_two_nodes_cut_from_each_other", 3, "degrade", func(s *partSite, r *partResult) {
			s.fault(r, tm.hold, []string{"n3"}, func() { s.net.cut("n1", "n2") }, func() { s.net.heal("n1", "n2") })
		}},
		{"f_site_cut_from_catalog", 3, "degrade", func(s *partSite, r *partResult) {
			s.fault(r, tm.catalog, s.ids, func() { s.net.cut("cat", s.ids...) }, func() { s.net.heal("cat", s.ids...) })
		}},
		{"g_node_paused", 3, "degrade", func(s *partSite, r *partResult) {
			s.fault(r, tm.hold, []string{"n1", "n2"}, func() { s.signal("n3", syscall.SIGSTOP) }, func() { s.signal("n3", syscall.SIGCONT) })
		}},
		{"two_node_site_one_cut", 2, "degrade", oneCut},
	}
}

// fault applies cut, holds it for hold, heals, and waits for replication
// to be restored, watching for takeovers all along (a takeover can come
// after the heal on a busy machine); it measures the time to the first
// takeover from the cut, to replication restored from the heal, and the
// ingest rate of majority (the nodes still together) during the cut
// against the 5 s before it. Called several times (a flapping node), it
// keeps the first takeover, the first rates and the last restore.
func (s *partSite) fault(r *partResult, hold time.Duration, majority []string, cut, heal func()) {
	t := s.t
	t.Helper()
	cutAt := time.Now()
	var healAt time.Time
	var err error
	tk := s.watch(cutAt, func() {
		cut()
		time.Sleep(time.Until(cutAt.Add(hold))) // the cut's length: the scenario's, not a wait for a condition
		healAt = time.Now()
		heal()
		r.restored, err = s.replicationRestored(healAt)
	})
	t.Logf("cut at %s, healed at %s, replication restored %s after the heal",
		cutAt.Format("15:04:05.000"), healAt.Format("15:04:05.000"), r.restored.Round(100*time.Millisecond))
	if r.takeover == 0 {
		r.takeover = tk
	}
	if err != nil {
		t.Errorf("%v\n%s", err, s.logs())
	}
	if r.rateBefore == 0 {
		r.rateBefore = s.load.rate(cutAt.Add(-5*time.Second), cutAt, majority...)
		r.rateDuring = s.load.rate(cutAt, healAt, majority...)
	}
}

// runPartition runs each scenario on a fresh site of its own, parallel
// at a time (each site has its own namespaces, so they cannot meet), and
// prints every scenario's figures together once all have run.
func runPartition(t *testing.T, scenarios []partScenario, parallel int) {
	var mu sync.Mutex
	var lines []string
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("partition suite, %s in all:\n%s", time.Since(start).Round(time.Second), strings.Join(lines, "\n"))
	})
	sem := make(chan struct{}, parallel)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := &partResult{name: sc.name + " (" + sc.policy + ")"}
			defer func() {
				status := "ok"
				if t.Failed() {
					status = "FAIL"
				}
				mu.Lock()
				lines = append(lines, status+" "+r.String())
				mu.Unlock()
			}()
			s := newPartSite(t, sc.nodes, sc.policy)
			s.startLoad()
			if !s.waitLoad(200) {
				t.FailNow()
			}
			sc.run(s, r)
			s.waitLoad(100) // every node acknowledges again after the heal
			s.check(r)
		})
	}
}

// TestPartition is the partition suite with the short holds of make test,
// two sites at a time (the 60 s holds and the 5-node site are
// TestBenchPartition's).
func TestPartition(t *testing.T) {
	runPartition(t, partScenarios(shortTimes), 2)
}
