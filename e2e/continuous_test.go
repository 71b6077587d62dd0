package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tributary-io/tributary"
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
	continuousKillRounds(t, dir, 6, "raw", func(id string, i int) []byte {
		return append([]byte(fmt.Sprintf(`{"id":"%s","v":%d}`, id, i)), 0x00, 0xff, byte(i))
	})
}

// continuousKillRounds runs the kill -9 rounds of the continuous encoding
// crash tests on factory.telemetry (payload mode "raw" or "infer"):
// clients publishing payload(id, i), the node killed 3 times while
// records sit in an in-progress file, then restarted cleanly and drained.
// It checks that commits used pre-encoded files, that every acknowledged
// message is in the table once (byte-exact, headers included) and that
// offsets are dense; it returns the rows.
func continuousKillRounds(t *testing.T, dir string, clients int, mode string, payload func(id string, i int) []byte) []*tributary.Record {
	t.Helper()
	start := func() *proc {
		return startDev(t, dir, "--payload", mode, "--continuous-encoding", "--commit-interval", "2s")
	}
	l := newLedger()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	next := make([]int, clients)
	used, discarded := 0.0, 0.0
	count := func(p *proc) { // the files each run used and discarded, added up
		used += max(0, metricWithLabels(t, p, `tributary_uplink_preencoded_files_total{outcome="used"}`))
		discarded += max(0, metricWithLabels(t, p, `tributary_uplink_preencoded_files_total{outcome="discarded"}`))
	}
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
				n, _ := publishNWith(ctx, cl, l, name, from, 100000, payload)
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
		count(p)
		pre, _ := scrapeMetrics(t, p)
		p.kill()
		cancel()
		wg.Wait()
		t.Logf("round %d: killed with %v records pre-encoded, %d acked so far", round, pre["tributary_uplink_preencoded_records"], l.acked())
	}
	p := start()
	waitFor(t, 60*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	count(p)
	p.stop()
	if used <= 0 {
		t.Fatalf("no commit used a pre-encoded file (%v discarded)", discarded)
	}
	rows := readTable(t, dir, "factory.telemetry")
	counts := checkDense(t, rows)
	checkRows(t, l, rows)
	t.Logf("%d rows (%d acked publishes), partitions %v, pre-encoded files used %v, discarded %v", len(rows), l.acked(), counts, used, discarded)
	return rows
}

// TestCrashKill9ContinuousEncodingTyped: TestCrashKill9ContinuousEncoding
// on an infer stream whose schema evolves during the run: client cont0
// brings a new field f<k> every 4000 messages, cont1 a struct pos from
// its 600th on, and one payload in 997 is not JSON (a dead letter in
// the middle of an in-progress file). Every acknowledged message is in
// the table once, offsets dense, and the typed columns read back with
// iceberg-go are the payloads' values: v and dev on every typed row, the
// f<k> and pos.x of the rows that had them, null elsewhere and on every
// dead letter, which is in factory.telemetry_dlq.
func TestCrashKill9ContinuousEncodingTyped(t *testing.T) {
	dir := t.TempDir()
	bad := func(i int) bool { return i%997 == 500 }
	rows := continuousKillRounds(t, dir, 4, "infer", func(id string, i int) []byte {
		client := id[:strings.IndexByte(id, '-')]
		switch {
		case bad(i):
			return []byte(fmt.Sprintf(`{"id":"%s","v":%d,`, id, i))
		case client == "cont0":
			return []byte(fmt.Sprintf(`{"id":"%s","v":%d,"dev":"%s","f%d":%d}`, id, i, client, i/4000, i))
		case client == "cont1" && i >= 600:
			return []byte(fmt.Sprintf(`{"id":"%s","v":%d,"dev":"%s","pos":{"x":%d}}`, id, i, client, i))
		}
		return []byte(fmt.Sprintf(`{"id":"%s","v":%d,"dev":"%s"}`, id, i, client))
	})
	tbl := loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", nil)
	fields := map[string]bool{}
	for _, f := range tbl.Schema().Fields() {
		fields[f.Name] = true
	}
	if !fields["f0"] || !fields["pos"] { // pos came after the first batches
		t.Fatalf("the schema did not evolve during the run: %v", schemaTypes(tbl))
	}
	// The typed cells iceberg-go reads, by offset@partition.
	_, it, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		part int32
		off  int64
	}
	got := map[key]map[string]string{}
	for b, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		sch := b.Schema()
		idx := func(name string) arrow.Array { return b.Column(sch.FieldIndices(name)[0]) }
		parts, offs := idx("partition").(*array.Int32), idx("offset").(*array.Int64)
		for r := range int(b.NumRows()) {
			cells := map[string]string{}
			for ci, f := range sch.Fields() {
				c := b.Column(ci)
				switch {
				case f.Name == "pos":
					if st := c.(*array.Struct); st.IsValid(r) {
						cells["pos.x"] = cell(st.Field(0), r)
					}
				case f.Name == "v" || f.Name == "dev" || strings.HasPrefix(f.Name, "f"): // no envelope column starts with f
					if c.IsValid(r) {
						cells[f.Name] = cell(c, r)
					}
				}
			}
			got[key{parts.Value(r), offs.Value(r)}] = cells
		}
		b.Release()
	}
	dead := 0
	for _, r := range rows {
		cells := got[key{r.Partition, r.Offset}]
		id := idOf(r.Value)
		client := id[:strings.IndexByte(id, '-')]
		i, _ := strconv.Atoi(id[strings.IndexByte(id, '-')+1:])
		want := map[string]string{}
		switch {
		case bad(i):
			dead++
		case client == "cont0":
			want = map[string]string{"v": fmt.Sprint(i), "dev": client, fmt.Sprintf("f%d", i/4000): fmt.Sprint(i)}
		case client == "cont1" && i >= 600:
			want = map[string]string{"v": fmt.Sprint(i), "dev": client, "pos.x": fmt.Sprint(i)}
		default:
			want = map[string]string{"v": fmt.Sprint(i), "dev": client}
		}
		if !maps.Equal(cells, want) {
			t.Fatalf("row %d@%d (%s): typed cells %v, want %v", r.Offset, r.Partition, r.Value, cells, want)
		}
	}
	dls := readTable(t, dir, "factory.telemetry_dlq")
	if len(dls) != dead || dead == 0 {
		t.Fatalf("%d dead letters in the table, %d rows with a bad payload", len(dls), dead)
	}
	t.Logf("%d typed rows checked, %d dead letters, columns %v", len(rows), dead, schemaTypes(tbl))
}
