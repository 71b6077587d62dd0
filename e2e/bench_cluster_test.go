//go:build bench

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
)

// TestBenchClusterReplication measures, in one run with the same load
// generator (firmware-sim, 100 closed-loop QoS 1 publishers, 256-byte
// payloads, 16 and 1 messages in flight each), a single node against a
// three-node cluster with replication factor 2 whose publishers are
// spread over the three nodes, and prints the cluster's rate against the
// target of issue 15 (≥ 0.7× the single node) and PUBACK p99. Everything
// runs on one machine, so this is the cost of replication (a second fsync
// on another node and a network round trip before each PUBACK), not the
// scale-out a cluster of real machines would give.
func TestBenchClusterReplication(t *testing.T) {
	d := benchSeconds()
	shapes := []struct {
		devices, inFlight int
	}{{100, 16}, {100, 1}}
	type result struct {
		single            firmwaresim.Summary
		rate              float64
		acked             int64
		clusterP50, clP99 time.Duration
	}
	res := make([]result, len(shapes))
	single := startDev(t, t.TempDir(), "--commit-interval", "1s")
	for i, sh := range shapes {
		res[i].single = loadInFlight(t, single.MQTT, 1, sh.devices, sh.inFlight, 0, d, nil)
	}
	single.stop()

	c := newReplClusterCommit(t, time.Second)
	for i, sh := range shapes {
		var mu sync.Mutex
		var sums []firmwaresim.Summary
		var wg sync.WaitGroup
		for j, id := range []string{"n1", "n2", "n3"} {
			devices := sh.devices / 3
			if j == 2 {
				devices = sh.devices - 2*(sh.devices/3)
			}
			p := c.node(id)
			wg.Go(func() {
				s := loadInFlight(t, p.MQTT, 1, devices, sh.inFlight, 0, d, nil)
				mu.Lock()
				sums = append(sums, s)
				mu.Unlock()
			})
		}
		wg.Wait()
		var elapsed time.Duration
		for _, s := range sums {
			res[i].acked += s.Acked
			elapsed = max(elapsed, s.Elapsed)
			res[i].clusterP50, res[i].clP99 = max(res[i].clusterP50, s.Latency.P50), max(res[i].clP99, s.Latency.P99)
		}
		res[i].rate = float64(res[i].acked) / elapsed.Seconds()
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if v := metric(t, c.node(id), "tributary_replication_degraded"); v != 0 {
			t.Errorf("%s degraded during the run", id)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nQoS 1 ingest, closed loop, 256-byte payloads, %s per run, one machine: replication overhead, not scale\n", d)
	fmt.Fprintf(&b, "%-22s %12s %12s %8s %10s %10s %10s %10s %s\n", "load", "single msg/s", "3×RF2 msg/s", "ratio",
		"single p99", "RF2 p50", "RF2 p99", "RF2 acked", "target")
	for i, sh := range shapes {
		r := res[i]
		ratio := r.rate / r.single.MsgsPerSec()
		verdict := "met"
		if ratio < 0.7 {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, "%-22s %12.0f %12.0f %8.2f %10s %10s %10s %10d ≥ 0.70× single: %s\n",
			fmt.Sprintf("%d conns × %d in flight", sh.devices, sh.inFlight), r.single.MsgsPerSec(), r.rate, ratio,
			r.single.Latency.P99.Round(10*time.Microsecond), r.clusterP50.Round(10*time.Microsecond),
			r.clP99.Round(10*time.Microsecond), r.acked, verdict)
	}
	fmt.Fprintf(&b, "(RF2 p50/p99: the worst node's)\n")
	t.Log(b.String())
}
