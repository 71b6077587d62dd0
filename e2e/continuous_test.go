package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// metricWithLabels is the value of the sample line of /metrics that
// starts with series (name and labels as printed), -1 if none.
func metricWithLabels(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	resp, err := p.httpGet("/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("/metrics %s: %v", series, err)
			}
			return v
		}
	}
	return -1
}

// TestCrashKill9ContinuousEncoding: a raw stream with continuous encoding
// on (uplink.continuous_encoding) and a 2s commit interval; publishers
// run while the node is killed with SIGKILL at a random moment after
// records are in an in-progress pre-encoded file
// (tributary_uplink_preencoded_records > 0), 3 times. Pre-encoded files
// are used by commits (tributary_uplink_preencoded_files_total{outcome=
// "used"} > 0 in some round), and after a clean restart every
// acknowledged message is in the table exactly once, offsets dense.
func TestCrashKill9ContinuousEncoding(t *testing.T) {
	dir := t.TempDir()
	start := func() *proc {
		return startDev(t, dir, "--payload", "raw", "--continuous-encoding", "--commit-interval", "2s")
	}
	l := newLedger()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	const clients = 6
	next := make([]int, clients)
	used := 0.0
	for round := range 3 {
		p := start()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		for c := range clients {
			wg.Go(func() {
				name := fmt.Sprintf("cont%d", c)
				cl, err := mqttClient(ctx, p.MQTT, name)
				if err != nil {
					return
				}
				mu.Lock()
				from := next[c]
				mu.Unlock()
				n, _ := publishN(ctx, cl, l, name, from, 100000)
				mu.Lock()
				next[c] = from + n + 1 // the message in flight at the kill is not re-sent
				mu.Unlock()
			})
		}
		before := l.acked()
		waitFor(t, 30*time.Second, "publishes flowing", func() bool { return l.acked() > before+50 })
		waitFor(t, 30*time.Second, "records pre-encoded", func() bool {
			vals, _ := scrapeMetrics(t, p)
			return vals["tributary_uplink_preencoded_records"] > 0
		})
		if round > 0 {
			// Let a commit or two happen: they take the in-progress files.
			time.Sleep(time.Duration(1000+rng.IntN(2500)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		used = max(used, metricWithLabels(t, p, `tributary_uplink_preencoded_files_total{outcome="used"}`))
		pre, _ := scrapeMetrics(t, p)
		p.kill()
		cancel()
		wg.Wait()
		t.Logf("round %d: killed with %v records pre-encoded, %d acked so far", round, pre["tributary_uplink_preencoded_records"], l.acked())
	}
	if used <= 0 {
		t.Fatal("no commit used a pre-encoded file")
	}
	p := start()
	waitFor(t, 60*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	p.stop()
	rows := readTable(t, dir, "factory.telemetry")
	counts := checkDense(t, rows)
	checkRows(t, l, rows)
	t.Logf("%d rows (%d acked publishes), partitions %v, pre-encoded files used %v", len(rows), l.acked(), counts, used)
}
