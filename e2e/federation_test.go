package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
)

// TestFederation: an edge commits factory.telemetry to Tributary's own
// catalog (the default SQLite one; its warehouse on SeaweedFS's S3, since
// SeaweedFS registers only metadata inside its own table bucket); a cloud
// server with federation: publishes the stream into SeaweedFS's REST
// catalog. iceberg-go loading the mirror there reads the same rows as the
// table; more commits and the mirror follows; SeaweedFS stopped and
// restarted and the mirror catches up; the cloud's own compaction
// commits are followed too; a second entry with a wrong
// credential shows in the metrics and on the console while the stream
// keeps committing and the good mirror keeps following.
func TestFederation(t *testing.T) {
	sw := startSeaweedFS(t, 0)
	ctx := context.Background()
	dir := t.TempDir()
	warehouse := "s3://" + weedBucket
	edge := startEdge(t, dir, edgeConfig(t, dir, "fed-edge", "catalog:\n  warehouse: "+warehouse+"\n"+sw.storage()))
	mc, err := mqttClient(ctx, edge.MQTT, "fed")
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(&paho.Disconnect{})
	published := 0
	publish := func(n int) {
		t.Helper()
		if _, err := publishN(ctx, mc, newLedger(), "fed", published, n); err != nil {
			t.Fatal(err)
		}
		published += n
	}
	own := func() []*tributary.Record {
		return readTableProps(t, dir, "factory.telemetry", sw.fileIO())
	}
	publish(100)
	waitFor(t, 60*time.Second, "100 rows in the own catalog", func() bool { return len(own()) >= 100 })

	cloudCfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf(`role: cloud
data_dir: %[1]s
catalog:
  uri: sqlite://%[1]s/catalog.db
  warehouse: %[2]s
  addr: 127.0.0.1:0
kafka:
  addr: ""
pulsar:
  addr: ""
maintenance:
  interval: 1s
%[3]sfederation:
  - name: weed
    uri: %[4]s
    warehouse: s3://%[5]s
    credential: %[6]s:%[7]s
    streams: ["factory.*"]
  - name: wrong
    uri: %[4]s
    warehouse: s3://%[5]s
    credential: %[6]s:not-the-secret
    namespace: mirrors
`, dir, warehouse, sw.storage(), sw.Iceberg, weedBucket, weedKey, weedSecret)), 0o644); err != nil {
		t.Fatal(err)
	}
	// config check names each federation catalog; one refusing its
	// credential is a warning naming the key, not an error.
	code, out := runExit(t, 60*time.Second, "config", "check", cloudCfg)
	if code != 0 || !strings.Contains(out, "federation[0] (weed): reachable") || !strings.Contains(out, "federation[1] (wrong): WARNING") ||
		!strings.Contains(out, "federation[1].credential") {
		t.Fatalf("config check: exit %d\n%s", code, out)
	}
	cloud := startProc(t, dir, "cloud", "-config", cloudCfg)

	// same: the mirror in SeaweedFS's catalog reads exactly the own
	// table's rows.
	same := func(want int) bool {
		mirror := sw.rows(t, "factory.telemetry")
		if len(mirror) != want {
			return false
		}
		mine := own()
		if len(mine) != want {
			return false
		}
		key := func(rs []*tributary.Record) []string {
			var out []string
			for _, r := range rs {
				out = append(out, fmt.Sprintf("%d/%d/%s", r.Partition, r.Offset, r.Value))
			}
			sort.Strings(out)
			return out
		}
		a, b := key(mirror), key(mine)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("mirror row %s, own table %s", a[i], b[i])
			}
		}
		return true
	}
	waitFor(t, 60*time.Second, "the mirror in SeaweedFS's catalog reads the 100 rows", func() bool { return same(100) })
	checkDense(t, sw.rows(t, "factory.telemetry"))

	// More commits: the mirror follows.
	for round := 1; round <= 3; round++ {
		publish(50)
		want := 100 + 50*round
		waitFor(t, 60*time.Second, fmt.Sprintf("%d rows in the own table", want), func() bool { return len(own()) >= want })
		start := time.Now()
		waitFor(t, 30*time.Second, fmt.Sprintf("the mirror follows to %d rows", want), func() bool { return same(want) })
		t.Logf("round %d: the mirror followed the table's commit within %s of seeing it", round, time.Since(start).Round(time.Millisecond))
	}

	// The wrong credential shows, and nothing else waited for it.
	waitFor(t, 30*time.Second, `errors of catalog "wrong" in the metrics`, func() bool {
		return cloudMetric(t, cloud, `tributary_federation_errors_total{catalog="wrong"}`) > 0
	})
	if v := cloudMetric(t, cloud, `tributary_federation_mirrors{catalog="weed",state="current"}`); v != 1 {
		t.Fatalf(`tributary_federation_mirrors{catalog="weed",state="current"} = %v, want 1`, v)
	}
	waitFor(t, 60*time.Second, "the console's banner for catalog wrong", func() bool {
		var m struct {
			Health []struct{ ID, Detail string }
		}
		resp, err := http.Get("http://" + cloud.Catalog + "/console/api")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&m)
		for _, a := range m.Health {
			if a.ID == "federation_wrong" && strings.Contains(a.Detail, "federation[1].credential") {
				return true
			}
		}
		return false
	})

	// SeaweedFS away: the edge keeps the records in its WAL (its warehouse
	// is there too), so the stream's table does not move and the
	// federation has nothing to send meanwhile; back: the table and the
	// mirror catch up.
	failsBefore := metric(t, edge, "tributary_uplink_upload_failures_total") + metric(t, edge, "tributary_uplink_commit_failures_total")
	sw.stop()
	publish(100)
	// Three failed uploads or commits of the edge: SeaweedFS stays away for
	// a while (the edge's retries back off).
	waitFor(t, 90*time.Second, "the edge failing to reach SeaweedFS", func() bool {
		return metric(t, edge, "tributary_uplink_upload_failures_total")+metric(t, edge, "tributary_uplink_commit_failures_total") >= failsBefore+3
	})
	sw.start(t)
	waitFor(t, 120*time.Second, "the own table catches up to 350 rows", func() bool { return len(own()) >= 350 })
	waitFor(t, 90*time.Second, "the mirror catches up to 350 rows", func() bool { return same(350) })

	waitFor(t, 30*time.Second, "no lag once the mirror is current", func() bool {
		return cloudMetric(t, cloud, `tributary_federation_lag_seconds{catalog="weed"}`) == 0
	})
	if v := cloudMetric(t, cloud, `tributary_federation_updates_total{catalog="weed"}`); v < 5 {
		t.Errorf(`tributary_federation_updates_total{catalog="weed"} = %v, want a registration and a commit per follow`, v)
	}

	// The mirror is a table of SeaweedFS's catalog with the stream's marks.
	tbl, err := sw.client(t).LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tbl.Properties()["tributary.hwm.0"]; !ok {
		t.Errorf("mirror properties %v: want the stream's marks", tbl.Properties())
	}
	// The cloud's maintenance commits (compaction: overwrite snapshots)
	// are followed like the edge's appends.
	ops := map[string]int{}
	var mine *table.Table
	waitFor(t, 90*time.Second, "the mirror at the table's current snapshot, a compaction among its snapshots", func() bool {
		m, err := sw.client(t).LoadTable(ctx, table.Identifier{"factory", "telemetry"})
		if err != nil || m.CurrentSnapshot() == nil {
			return false
		}
		mine = loadSQLiteTable(t, filepath.Join(dir, "catalog.db"), "factory.telemetry", sw.fileIO())
		clear(ops)
		for _, sn := range m.Metadata().Snapshots() {
			if sn.Summary != nil {
				ops[string(sn.Summary.Operation)]++
			}
		}
		return mine.CurrentSnapshot() != nil && m.CurrentSnapshot().SnapshotID == mine.CurrentSnapshot().SnapshotID && ops["overwrite"] > 0
	})
	if !same(350) {
		t.Fatal("the mirror does not read the table's 350 rows after compaction")
	}
	t.Logf("mirror snapshots by operation: %v (the table has %d snapshots)", ops, len(mine.Metadata().Snapshots()))
}

// cloudMetric is the value of one sample (name with labels, as exposed)
// on a cloud server's catalog listener (-1: absent).
func cloudMetric(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.Catalog + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}
