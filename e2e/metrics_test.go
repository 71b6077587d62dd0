package e2e

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeMetrics reads /metrics and returns each sample name's value summed
// over its labels, and the set of metric families (# TYPE lines).
func scrapeMetrics(t *testing.T, p *proc) (values map[string]float64, families map[string]string) {
	t.Helper()
	resp, err := p.httpGet("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s: %s", resp.Status, b)
	}
	values, families = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				families[f[0]] = f[1]
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("/metrics: malformed line %q", line)
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: value of %q: %v", line, err)
		}
		values[name] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return values, families
}

var readmeMetricRE = regexp.MustCompile(`\btributary_[a-z0-9_]+`)

// needsFederation are the families only a cloud server with federation:
// exposes (one series per external catalog; TestFederation reads them).
var needsFederation = map[string]bool{"tributary_federation_lag_seconds": true, "tributary_federation_errors_total": true,
	"tributary_federation_mirrors": true, "tributary_federation_updates_total": true}

// TestMetricsMoving scrapes /metrics twice while the simulator publishes:
// the ingest, WAL and commit counters grow, and every metric family the
// README names is exposed.
func TestMetricsMoving(t *testing.T) {
	p := startDev(t, t.TempDir(), "--sim-devices", "4", "--sim-rate", "20", "--maintenance-interval", "1s")
	waitFor(t, 30*time.Second, "a first table commit", func() bool { return status(t, p).Uplink.Commits > 0 })
	waitFor(t, 30*time.Second, "a first maintenance pass", func() bool {
		v, _ := scrapeMetrics(t, p)
		return v["tributary_maintenance_passes_total"] > 0
	})
	v1, fams := scrapeMetrics(t, p)
	time.Sleep(2 * time.Second)
	v2, _ := scrapeMetrics(t, p)

	for _, name := range []string{
		"tributary_mqtt_publishes_accepted_total",
		"tributary_wal_appended_records_total",
		"tributary_uplink_records_committed_total",
		"tributary_uplink_commits_total",
		"tributary_wal_commits_total",
		"tributary_mqtt_payload_bytes_total",
	} {
		if v2[name] <= v1[name] {
			t.Errorf("%s did not increase while the simulator ran: %v then %v", name, v1[name], v2[name])
		}
	}
	if v2["tributary_mqtt_clients"] != 4 {
		t.Errorf("tributary_mqtt_clients = %v, want 4 simulated devices", v2["tributary_mqtt_clients"])
	}
	if age := v2["tributary_uplink_last_commit_age_seconds"]; age <= 0 || age > 10 {
		t.Errorf("tributary_uplink_last_commit_age_seconds = %v, want within (0, 10] with 200ms commits", age)
	}
	if d := v2["tributary_wal_last_commit_duration_seconds"]; d <= 0 {
		t.Errorf("tributary_wal_last_commit_duration_seconds = %v, want > 0 after group commits", d)
	}

	readme, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	// Only the Metrics section lists metrics (other sections name tables
	// such as tributary_group_offsets).
	section := string(readme)
	if i := strings.Index(section, "## Metrics"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section[1:], "\n## "); j >= 0 {
			section = section[:j+1]
		}
	}
	listed := map[string]bool{}
	for _, m := range readmeMetricRE.FindAllString(section, -1) {
		listed[m] = true
	}
	if len(listed) < 10 {
		t.Fatalf("docs/operations.md names only %d tributary_* metrics; its Metrics section is missing", len(listed))
	}
	var missing []string
	for m := range listed {
		if _, ok := fams[m]; !ok && !needsFederation[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/operations.md lists metrics that /metrics does not expose: %s", strings.Join(missing, ", "))
	}
	// The other direction: every tributary_* family is documented.
	var undocumented []string
	for f := range fams {
		if strings.HasPrefix(f, "tributary_") && !listed[f] {
			undocumented = append(undocumented, f)
		}
	}
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("/metrics exposes families docs/operations.md does not list: %s", strings.Join(undocumented, ", "))
	}
}
