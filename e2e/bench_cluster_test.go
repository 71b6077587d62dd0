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
// payloads), a single node against a three-node cluster with replication
// factor 2 whose publishers are spread over the three nodes. Everything
// runs on one machine, so this is the cost of replication (a second fsync
// on another node and a network round trip before each PUBACK), not the
// scale-out a cluster of real machines would give.
func TestBenchClusterReplication(t *testing.T) {
	d := benchSeconds()
	single := startDev(t, t.TempDir(), "--commit-interval", "1s")
	one := load(t, single.MQTT, 1, 100, 0, d, nil)
	single.stop()

	c := newReplClusterCommit(t, time.Second)
	var mu sync.Mutex
	var sums []firmwaresim.Summary
	var wg sync.WaitGroup
	for i, id := range []string{"n1", "n2", "n3"} {
		devices := 33
		if i == 2 {
			devices = 34
		}
		p := c.node(id)
		wg.Go(func() {
			s := load(t, p.MQTT, 1, devices, 0, d, nil)
			mu.Lock()
			sums = append(sums, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	var acked int64
	var elapsed, p50, p99 time.Duration
	for _, s := range sums {
		acked += s.Acked
		elapsed = max(elapsed, s.Elapsed)
		p50, p99 = max(p50, s.Latency.P50), max(p99, s.Latency.P99)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if v := metric(t, c.node(id), "tributary_replication_degraded"); v != 0 {
			t.Errorf("%s degraded during the run", id)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nQoS 1 ingest, 100 publishers (closed loop, 256-byte payloads), %s per run, one machine (2 cores): replication overhead, not scale\n", d)
	fmt.Fprintf(&b, "%-34s %10s %10s %10s %10s\n", "setup", "msgs/s", "p50", "p99", "acked")
	fmt.Fprintf(&b, "%-34s %10.0f %10s %10s %10d\n", "single node (no replication)", one.MsgsPerSec(),
		one.Latency.P50.Round(10*time.Microsecond), one.Latency.P99.Round(10*time.Microsecond), one.Acked)
	fmt.Fprintf(&b, "%-34s %10.0f %10s %10s %10d\n", "3 nodes, RF 2 (worst node's p50/p99)", float64(acked)/elapsed.Seconds(),
		p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), acked)
	t.Log(b.String())
}
