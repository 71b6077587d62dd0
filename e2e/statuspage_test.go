package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary/console"
)

// chromiumPath finds Debian's chromium; `make deps` installs it, so a
// missing browser fails the test instead of skipping it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run `make deps` (Debian package chromium)")
	return ""
}

// chromiumRun is what one headless Chromium run left behind.
type chromiumRun struct {
	stdout []byte // --dump-dom output
	stderr []byte // with --enable-logging=stderr: the page's console messages
	netlog []byte // every network request, as a Chromium NetLog (JSON)
}

// runChromium runs headless Chromium on url with extra flags and its own
// throw-away profile, and returns its stdout.
func runChromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	return runChromiumLogged(t, url, extra...).stdout
}

// runChromiumLogged runs headless Chromium on url with the page's console
// messages on stderr and a NetLog of every request.
func runChromiumLogged(t *testing.T, url string, extra ...string) chromiumRun {
	t.Helper()
	profile, err := os.MkdirTemp("", "tributary-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	netlog := filepath.Join(profile, "netlog.json")
	args := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-quic", "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
		"--user-data-dir=" + profile, "--virtual-time-budget=3000",
		"--enable-logging=stderr", "--v=0", "--log-net-log=" + netlog}, extra...)
	args = append(args, url)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(extra, " "), err, stderr.String())
	}
	nl, _ := os.ReadFile(netlog)
	return chromiumRun{stdout: stdout.Bytes(), stderr: stderr.Bytes(), netlog: nl}
}

// consoleMessages are the page's console messages (errors, warnings and
// logs: the console logs nothing when all is well).
func (r chromiumRun) consoleMessages() []string {
	var out []string
	for _, line := range strings.Split(string(r.stderr), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			out = append(out, line)
		}
	}
	return out
}

// pageRequests lists the URLs of the requests the page made (those whose
// top frame is origin, or that origin initiated), leaving out Chromium's
// own background traffic (update checks, which have no such frame).
func (r chromiumRun) pageRequests(t *testing.T, origin string) []string {
	t.Helper()
	var nl struct {
		Events []struct {
			Params map[string]any `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.netlog, &nl); err != nil {
		// Chromium may leave the closing brackets out when killed; the
		// events are complete lines, so close the document.
		fixed := strings.TrimRight(strings.TrimSpace(string(r.netlog)), ",") + "]}"
		if err2 := json.Unmarshal([]byte(fixed), &nl); err2 != nil {
			t.Fatalf("netlog: %v", err)
		}
	}
	u, _ := url.Parse(origin)
	site := u.Scheme + "://" + u.Hostname()
	var out []string
	for _, e := range nl.Events {
		reqURL, _ := e.Params["url"].(string)
		if reqURL == "" || e.Params["method"] == nil {
			continue
		}
		nik, _ := e.Params["network_isolation_key"].(string)
		init, _ := e.Params["initiator"].(string)
		if strings.HasPrefix(nik, site+" ") || init == origin {
			out = append(out, reqURL)
		}
	}
	return out
}

// consoleModel fetches the console's JSON model.
func consoleModel(t *testing.T, p *proc) console.Model {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.HTTP + "/console/api")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m console.Model
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func modelChart(m console.Model, id string) (console.Chart, int) {
	for _, c := range m.Charts {
		if c.ID == id {
			n := 0
			for _, s := range c.Series {
				n += s.Points
			}
			return c, n
		}
	}
	return console.Chart{}, 0
}

var (
	svgPointsRE = regexp.MustCompile(`<svg[^>]*\bdata-chart="([a-z_]+)"[^>]*>`)
	attrRE      = regexp.MustCompile(`\bdata-points="([0-9]+)"`)
	pageErrRE   = regexp.MustCompile(`(?s)<div id="page-errors"[^>]*>(.*?)</div>`)
)

// renderedCharts maps each chart of a rendered page to its data points.
func renderedCharts(dom []byte) map[string]int {
	out := map[string]int{}
	for _, m := range svgPointsRE.FindAllSubmatch(dom, -1) {
		if a := attrRE.FindSubmatch(m[0]); a != nil {
			out[string(m[1])], _ = strconv.Atoi(string(a[1]))
		}
	}
	return out
}

// checkCleanPage fails on console messages, page errors and requests
// leaving the node.
func checkCleanPage(t *testing.T, run chromiumRun, origin string) {
	t.Helper()
	if msgs := run.consoleMessages(); len(msgs) > 0 {
		t.Errorf("the page logged to the console:\n%s", strings.Join(msgs, "\n"))
	}
	if m := pageErrRE.FindSubmatch(run.stdout); m == nil || len(bytes.TrimSpace(m[1])) > 0 {
		t.Errorf("page errors shown on the page: %q", m)
	}
	reqs := run.pageRequests(t, origin)
	sawAPI := false
	for _, r := range reqs {
		if !strings.HasPrefix(r, origin+"/") {
			t.Errorf("the page made a request that leaves the node: %s", r)
		}
		sawAPI = sawAPI || strings.HasPrefix(r, origin+"/console/api")
	}
	if !sawAPI {
		t.Errorf("no request to %s/console/api in the NetLog (requests: %v)", origin, reqs)
	}
}

// TestStatusPageLive: the console loads in headless Chromium with no
// console errors and no request leaving the node; under the simulator's
// load a chart's data points grow between two snapshots of the JSON and
// between two page loads; the streams view shows a message published a
// moment before; screenshots at desktop and phone widths have non-empty
// charts.
func TestStatusPageLive(t *testing.T) {
	p := startDev(t, t.TempDir(), "--sim-devices", "4", "--sim-rate", "20")
	origin := "http://" + p.HTTP
	waitFor(t, 30*time.Second, "simulator traffic committed", func() bool {
		return status(t, p).Uplink.Commits > 0
	})
	// Two samples (one interval apart) make the first rate.
	waitFor(t, 30*time.Second, "ingest chart has data", func() bool {
		_, n := modelChart(consoleModel(t, p), "ingest_protocol")
		return n >= 2
	})

	m1 := consoleModel(t, p)
	run1 := runChromiumLogged(t, origin+"/", "--dump-dom", "--window-size=1280,900")
	checkCleanPage(t, run1, origin)
	for _, want := range []string{"Ingest by protocol", "msg/s", "Uplink to tables", "Healthy", "Connected clients", "WAL fill against its disk budget"} {
		if !bytes.Contains(run1.stdout, []byte(want)) {
			t.Errorf("rendered console lacks %q", want)
		}
	}
	for _, raw := range []string{"RefusedBudget", "DroppedQoS0", "[0,"} {
		if bytes.Contains(run1.stdout, []byte(raw)) {
			t.Errorf("rendered console shows a raw Go name or slice %q", raw)
		}
	}
	if bytes.Contains(run1.stdout, []byte(`data-alert=`)) {
		t.Errorf("a healthy node shows a health banner:\n%s", run1.stdout)
	}
	charts1 := renderedCharts(run1.stdout)
	if charts1["ingest_protocol"] == 0 {
		t.Fatalf("rendered ingest chart has no data points: %+v", charts1)
	}

	// A message published now shows in the streams view (on a topic the
	// simulator does not use: it goes to the catch-all stream).
	ctx := context.Background()
	cl, err := mqttClient(ctx, p.MQTT, "console-probe")
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf(`{"probe":"console-%d"}`, time.Now().UnixNano())
	if _, err := cl.Publish(ctx, &paho.Publish{Topic: "lab/console/probe", QoS: 1, Payload: []byte(probe)}); err != nil {
		t.Fatal(err)
	}
	cl.Disconnect(&paho.Disconnect{})

	time.Sleep(4 * time.Second) // two more samples
	m2 := consoleModel(t, p)
	_, n1 := modelChart(m1, "ingest_protocol")
	_, n2 := modelChart(m2, "ingest_protocol")
	t.Logf("ingest chart data points in the JSON: %d, then %d", n1, n2)
	if n2 <= n1 {
		t.Fatalf("ingest chart data points did not grow between two snapshots: %d then %d", n1, n2)
	}
	if m2.Overview.IngestPerSecond <= 0 {
		t.Errorf("overview ingest rate %v under load", m2.Overview.IngestPerSecond)
	}

	run2 := runChromiumLogged(t, origin+"/#streams", "--dump-dom", "--window-size=1280,900")
	checkCleanPage(t, run2, origin)
	charts2 := renderedCharts(run2.stdout)
	t.Logf("ingest chart data points on the page: %d, then %d", charts1["ingest_protocol"], charts2["ingest_protocol"])
	if charts2["ingest_protocol"] <= charts1["ingest_protocol"] {
		t.Errorf("rendered ingest chart did not grow between two page loads")
	}
	escaped := strings.ReplaceAll(probe, `"`, "&quot;")
	if !bytes.Contains(run2.stdout, []byte(probe)) && !bytes.Contains(run2.stdout, []byte(escaped)) {
		t.Fatalf("the streams view does not show the message published a moment before (%s)", probe)
	}
	for _, want := range []string{"Latest messages", "Partitions", "Next offset", "lab/console/probe"} {
		if !bytes.Contains(run2.stdout, []byte(want)) {
			t.Errorf("streams view lacks %q", want)
		}
	}

	for _, size := range []struct {
		name       string
		w, h, want int // want: charts that must be on screen and non-empty
	}{{"desktop", 1280, 900, 2}, {"phone", 390, 844, 1}} {
		checkScreenshot(t, origin, size.name, size.w, size.h, size.want)
	}
}

// checkScreenshot takes a screenshot at w×h, finds the charts in it by the
// background of their plot areas and counts the chart lines' coloured
// pixels in each: at least want charts on screen must have a line. (A DOM
// dump cannot give the places: headless Chromium lays a --dump-dom page out
// at least 500 px wide, the screenshot at the size asked for.)
func checkScreenshot(t *testing.T, origin, name string, w, h, want int) {
	t.Helper()
	dir := os.Getenv("TRIBUTARY_SCREENSHOTS") // keep them to look at
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "console-"+name+".png")
	runChromium(t, origin+"/", fmt.Sprintf("--window-size=%d,%d", w, h), "--hide-scrollbars", "--screenshot="+shot)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("%s screenshot: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s screenshot is not a PNG: %v", name, err)
	}
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s screenshot is %dx%d, want %dx%d", name, b.Dx(), b.Dy(), w, h)
	}
	plots := plotAreas(img)
	drawn := 0
	for _, r := range plots {
		n := colouredPixels(img, r)
		t.Logf("%s: chart plot area %v: %d coloured pixels, luma variance %.1f", name, r, n, lumaVariance(img, r))
		if n >= 40 {
			drawn++
		}
	}
	t.Logf("%s screenshot %s: %dx%d, %d bytes, %d charts on screen, %d with lines", name, shot, b.Dx(), b.Dy(), len(raw), len(plots), drawn)
	if drawn < want {
		t.Fatalf("%s: %d charts with lines on screen (of %d found), want ≥ %d", name, drawn, len(plots), want)
	}
}

// plotBG is the charts' plot-area background (console/assets/app.css).
var plotBG = [3]uint32{0xfa, 0xfb, 0xfd}

func isPlotBG(img image.Image, x, y int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	return r>>8 == plotBG[0] && g>>8 == plotBG[1] && b>>8 == plotBG[2]
}

// plotAreas finds the rectangles of plot-area background: bands of rows
// with many such pixels (grid and chart lines cross them, so short gaps are
// bridged), split where the band's rows have separate runs (charts side by
// side).
func plotAreas(img image.Image) []image.Rectangle {
	b := img.Bounds()
	const minRun, maxGap, minHeight = 80, 6, 40
	var out []image.Rectangle
	type run struct{ x0, x1 int }
	runsOf := func(y int) []run {
		var rs []run
		start := -1
		for x := b.Min.X; x <= b.Max.X; x++ {
			in := x < b.Max.X && isPlotBG(img, x, y)
			if in && start < 0 {
				start = x
			}
			if !in && start >= 0 {
				if x-start >= minRun {
					rs = append(rs, run{start, x})
				}
				start = -1
			}
		}
		return rs
	}
	// bands: [y0, y1) with the runs of the row that has the most
	var y0, last = -1, -1
	var best []run
	flush := func() {
		if y0 >= 0 && last-y0+1 >= minHeight {
			for _, r := range best {
				out = append(out, image.Rect(r.x0, y0, r.x1, last+1))
			}
		}
		y0, last, best = -1, -1, nil
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		rs := runsOf(y)
		if len(rs) == 0 {
			if last >= 0 && y-last > maxGap {
				flush()
			}
			continue
		}
		if y0 < 0 {
			y0 = y
		}
		last = y
		if len(rs) > len(best) {
			best = rs
		}
	}
	flush()
	return out
}

// colouredPixels counts the saturated pixels in r: chart lines are
// coloured, the background, grid and labels are grey.
func colouredPixels(img image.Image, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			hi := max(cr, cg, cb) >> 8
			lo := min(cr, cg, cb) >> 8
			if hi-lo >= 80 {
				n++
			}
		}
	}
	return n
}

// lumaVariance is the variance of the pixels' luma inside r (logged: a
// blank area is ~0).
func lumaVariance(img image.Image, r image.Rectangle) float64 {
	var sum, sq, n float64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			l := (0.299*float64(cr) + 0.587*float64(cg) + 0.114*float64(cb)) / 257
			sum += l
			sq += l * l
			n++
		}
	}
	if n == 0 {
		return 0
	}
	mean := sum / n
	return math.Max(0, sq/n-mean*mean)
}

// TestConsoleBudgetBanner: with a tiny WAL budget and the uplink blocked,
// once publishes are refused the console shows the budget banner with what
// to do, and the refusals in human words.
func TestConsoleBudgetBanner(t *testing.T) {
	dir := t.TempDir()
	p, _ := startBlockedDev(t, dir)
	ctx := context.Background()
	cl, err := mqttClient(ctx, p.MQTT, "banner")
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 1024)
	refused := false
	for i := 0; i < 5000 && !refused; i++ {
		pr, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/banner", QoS: 1, Payload: pad})
		if err != nil && pr == nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		refused = pr.ReasonCode == 0x97
	}
	if !refused {
		t.Fatal("no publish was refused although the budget is 1 MiB and uploads are blocked")
	}
	waitFor(t, 10*time.Second, "budget alert in the JSON", func() bool {
		for _, a := range consoleModel(t, p).Health {
			if a.ID == "wal_budget" && a.Severity == "critical" {
				return true
			}
		}
		return false
	})
	origin := "http://" + p.HTTP
	run := runChromiumLogged(t, origin+"/", "--dump-dom", "--window-size=1280,900")
	checkCleanPage(t, run, origin)
	dom := run.stdout
	for _, want := range []string{`id="health-wal_budget"`, "WAL disk budget full", "What to do", "WAL budget full (MQTT)"} {
		if !bytes.Contains(dom, []byte(want)) {
			t.Errorf("rendered console lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", dom)
	}
	if dir := os.Getenv("TRIBUTARY_SCREENSHOTS"); dir != "" {
		runChromium(t, origin+"/", "--window-size=1280,900", "--hide-scrollbars", "--screenshot="+filepath.Join(dir, "console-banner.png"))
	}
}

// TestConsoleCloud: `tributary cloud` serves the console on its catalog
// port: the streams of the catalog and the Kafka consumer groups with their
// lag per partition, with no console errors and nothing fetched elsewhere.
func TestConsoleCloud(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir, "--sim-devices", "2", "--sim-rate", "20")
	waitFor(t, 30*time.Second, "simulator traffic committed", func() bool {
		return status(t, p).Uplink.Commits > 0
	})
	cloud := startProc(t, dir, "cloud", "--data", dir, "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0",
		"--pulsar-addr", "127.0.0.1:0", "--maintenance=false")
	kc, err := kgo.NewClient(kgo.SeedBrokers(cloud.CloudKafka), kgo.ConsumerGroup("console-e2e"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got == 0; {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("nothing consumed from the cloud server: %v", fs.Errors())
		}
		got = fs.NumRecords()
	}
	if err := kc.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// A Pulsar subscriber too, which acknowledges nothing: its backlog shows.
	sub, err := pulsarClient(t, cloud.Pulsar).Subscribe(pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "console-sub",
		Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	cp := &proc{HTTP: cloud.Catalog}
	waitFor(t, 30*time.Second, "the group and the subscription in the cloud console's JSON", func() bool {
		m := consoleModel(t, cp)
		return m.Role == "cloud" && m.Consumers != nil && len(m.Consumers.KafkaGroups) == 1 && len(m.Streams) > 0 &&
			len(m.Consumers.PulsarSubscriptions) > 0 && m.Consumers.PulsarSubscriptions[0].Backlog > 0
	})
	m := consoleModel(t, cp)
	g := m.Consumers.KafkaGroups[0]
	if g.ID != "console-e2e" || len(g.Lag) == 0 || g.Lag[0].Topic != "factory.telemetry" || g.Lag[0].Committed <= 0 ||
		len(g.Members) != 1 || g.State != "Stable" {
		t.Fatalf("group in the console: %+v", g)
	}
	if ps := m.Consumers.PulsarSubscriptions[0]; ps.Name != "console-sub" || ps.Type != "Shared" || ps.Consumers != 1 {
		t.Fatalf("subscription in the console: %+v", ps)
	}
	origin := "http://" + cloud.Catalog
	run := runChromiumLogged(t, origin+"/#consumers", "--dump-dom", "--window-size=1280,900")
	checkCleanPage(t, run, origin)
	for _, want := range []string{"Kafka consumer groups", `data-group="console-e2e"`, "Committed offset", "factory.telemetry", "cloud server", "console-sub"} {
		if !bytes.Contains(run.stdout, []byte(want)) {
			t.Errorf("rendered cloud console lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", run.stdout)
	}
}

// TestConsoleCluster: on a three-node cluster (replication factor 2) the
// console's cluster view lists the members and who holds whose replicas;
// with both peers killed, a publish is acknowledged with a missing replica
// and the console shows the "replica missing" and "member down" banners.
func TestConsoleCluster(t *testing.T) {
	c := newReplCluster(t)
	n1 := c.node("n1")
	m := consoleModel(t, n1)
	if m.Cluster == nil || !m.Cluster.Gossip || len(m.Cluster.Members) != 3 || m.Cluster.ReplicationFactor != 2 {
		t.Fatalf("cluster in the console: %+v", m.Cluster)
	}
	for _, mb := range m.Cluster.Members {
		want := map[string]string{"n1": "n2", "n2": "n3", "n3": "n1"}[mb.ID]
		if mb.State != "alive" || len(mb.ReplicatesTo) != 1 || mb.ReplicatesTo[0] != want {
			t.Errorf("member %+v: want alive, replicating to %s", mb, want)
		}
	}
	c.kill("n2")
	c.kill("n3")
	ctx := context.Background()
	cl, err := mqttClient(ctx, n1.MQTT, "console-cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Disconnect(&paho.Disconnect{})
	waitFor(t, 60*time.Second, "replica-missing and member-down banners in the JSON", func() bool {
		cl.Publish(ctx, &paho.Publish{Topic: "factory/cluster", QoS: 1, Payload: []byte(`{"n":1}`)})
		ids := map[string]bool{}
		for _, a := range consoleModel(t, n1).Health {
			ids[a.ID] = true
		}
		return ids["replica_missing"] && ids["member_down"]
	})
	origin := "http://" + n1.HTTP
	run := runChromiumLogged(t, origin+"/#cluster", "--dump-dom", "--window-size=1280,900")
	checkCleanPage(t, run, origin)
	for _, want := range []string{`id="health-replica_missing"`, `id="health-member_down"`, `data-member="n2"`, `data-member="n3"`, "Replicates to", "degraded"} {
		if !bytes.Contains(run.stdout, []byte(want)) {
			t.Errorf("rendered cluster view lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", run.stdout)
	}
	if dir := os.Getenv("TRIBUTARY_SCREENSHOTS"); dir != "" {
		runChromium(t, origin+"/#cluster", "--window-size=1280,900", "--hide-scrollbars", "--screenshot="+filepath.Join(dir, "console-cluster.png"))
	}
}
