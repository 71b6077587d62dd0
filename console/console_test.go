package console

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type fakeHost struct {
	s Snapshot
}

func (f *fakeHost) snap() Snapshot { return f.s }

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest(h *fakeHost) (*Console, *clock) {
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	return New(Options{Source: h.snap, Interval: time.Second, Window: 10 * time.Second, Now: clk.now}), clk
}

func chart(m Model, id string) Chart {
	for _, c := range m.Charts {
		if c.ID == id {
			return c
		}
	}
	return Chart{}
}

func TestRatesAndRing(t *testing.T) {
	h := &fakeHost{s: Snapshot{Node: "n1", Role: "edge", WAL: &WAL{Budget: 100 << 20}}}
	c, clk := newTest(h)
	for i := 0; i < 15; i++ {
		h.s.Ingest = []IngestCount{{Protocol: "mqtt", Stream: "a.b", Messages: int64(i * 10)},
			{Protocol: "kafka", Stream: "a.b", Messages: int64(i * 5)}}
		c.Sample()
		clk.t = clk.t.Add(time.Second)
	}
	m := c.Model()
	ing := chart(m, "ingest_protocol")
	if len(ing.T) != 10 {
		t.Fatalf("ring holds %d samples, want 10 (window/interval)", len(ing.T))
	}
	if len(ing.Series) != 2 || ing.Series[0].Label != "Kafka" || ing.Series[1].Label != "MQTT" {
		t.Fatalf("series %+v", ing.Series)
	}
	if v := *ing.Series[1].V[len(ing.T)-1]; v != 10 {
		t.Fatalf("mqtt rate %v, want 10/s", v)
	}
	if v := *chart(m, "ingest_stream").Series[0].V[9]; v != 15 {
		t.Fatalf("stream rate %v, want 15/s", v)
	}
	if m.Overview.IngestPerSecond != 15 {
		t.Fatalf("overview ingest %v", m.Overview.IngestPerSecond)
	}
	if len(m.Health) != 0 {
		t.Fatalf("healthy idle node has alerts: %+v", m.Health)
	}
}

func TestQuantile(t *testing.T) {
	h := Hist{Bounds: []float64{1, 2, 4}, Counts: []uint64{0, 50, 100}, Count: 100}
	for _, c := range []struct{ q, want float64 }{{.5, 2}, {.25, 1.5}, {.75, 3}, {.99, 3.96}} {
		if v, _ := h.quantile(c.q); math.Abs(v-c.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", c.q, v, c.want)
		}
	}
	if _, ok := (Hist{Bounds: []float64{1}, Counts: []uint64{0}}).quantile(.5); ok {
		t.Error("empty histogram has a quantile")
	}
	// Deltas: only what was observed since the previous reading counts.
	cur := Hist{Bounds: []float64{1, 2, 4}, Counts: []uint64{0, 50, 200}, Count: 200}
	if v, _ := cur.delta(&h).quantile(.5); v != 3 {
		t.Errorf("delta quantile %v", v)
	}
}

func TestHistogramsFromPrometheus(t *testing.T) {
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds", Buckets: []float64{.001, .01, .1}}, []string{"stream"})
	for i := 0; i < 100; i++ {
		hv.WithLabelValues("s1").Observe(.005)
	}
	hs := Histograms("freshness", hv)
	if len(hs) != 1 || hs[0].Stream != "s1" || hs[0].Count != 100 || len(hs[0].Bounds) != 3 {
		t.Fatalf("%+v", hs)
	}
	host := &fakeHost{s: Snapshot{}}
	c, clk := newTest(host)
	c.Sample()
	for i := 0; i < 100; i++ {
		hv.WithLabelValues("s1").Observe(.05)
	}
	host.s.Latency = Histograms("freshness", hv)
	clk.t = clk.t.Add(time.Second)
	c.Sample()
	host.s.Latency = Histograms("freshness", hv)
	clk.t = clk.t.Add(time.Second)
	c.Sample()
	fr := chart(c.Model(), "freshness")
	if len(fr.Series) != 1 || fr.Series[0].Key != "fresh:s1" || fr.Series[0].Points != 1 {
		t.Fatalf("freshness chart %+v", fr)
	}
	if v := *fr.Series[0].V[1]; v < .01 || v > .1 {
		t.Fatalf("p99 %v outside the bucket of the observations", v)
	}
}

func TestHealthRules(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name string
		s    Snapshot
		want []string // alert ids
	}{
		{"healthy", Snapshot{WAL: &WAL{Bytes: 10, Budget: 100}, Uplink: &Uplink{Commits: 1}}, nil},
		{"budget 85%", Snapshot{WAL: &WAL{Bytes: 85, Budget: 100}}, []string{"wal_budget"}},
		{"budget full", Snapshot{WAL: &WAL{Bytes: 100, Budget: 100}}, []string{"wal_budget"}},
		{"uplink failing briefly", Snapshot{Uplink: &Uplink{Failing: []string{"a.b"}, LastCommitAge: 10 * time.Second}}, nil},
		{"uplink failing", Snapshot{Uplink: &Uplink{Failing: []string{"a.b"}, LastCommitAge: 2 * time.Minute, LastError: "boom"}}, []string{"uplink_failing"}},
		{"replica missing", Snapshot{Cluster: &Cluster{Degraded: true, ReplicationFactor: 2}}, []string{"replica_missing"}},
		{"lease lost", Snapshot{Cluster: &Cluster{ReplicationFactor: 2, Lease: &Lease{SiteSize: 3, Alive: 1}}}, []string{"lease_lost"}},
		{"lease lapsed", Snapshot{Cluster: &Cluster{ReplicationFactor: 2, Lease: &Lease{SiteSize: 3, Alive: 3, MayWrite: true}}}, []string{"lease_lapsed"}},
		{"lease fine", Snapshot{Cluster: &Cluster{ReplicationFactor: 2, Lease: &Lease{Valid: true, SiteSize: 3, Alive: 3, MayWrite: true}}}, nil},
		{"member dead", Snapshot{Cluster: &Cluster{Members: []Member{{ID: "a", Self: true, State: "alive"}, {ID: "b", State: "dead"}}}}, []string{"member_down"}},
		{"fenced", Snapshot{Streams: []Stream{{Name: "a.b", Partitions: []Partition{{ID: 1, Fenced: true}}}}}, []string{"partition_fenced"}},
		{"readmitted", Snapshot{Uplink: &Uplink{Commits: 1, Readmitted: 4}}, []string{"records_readmitted"}},
		{"cert", Snapshot{Certificates: []Certificate{{Name: "mqtt", NotAfter: now.Add(24 * time.Hour)}}}, []string{"cert_expiry:mqtt"}},
	}
	for _, c := range cases {
		got := health(&c.s, newHistory(4), now)
		var ids []string
		for _, a := range got {
			ids = append(ids, a.ID)
			if a.Title == "" || a.Action == "" {
				t.Errorf("%s: alert %s lacks a title or what to do", c.name, a.ID)
			}
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: alerts %v, want %v", c.name, ids, c.want)
		}
	}
	// Budget refusals in the last minute make it critical even below 80 %.
	h := newHistory(4)
	h.add(row{t: now.Add(-30 * time.Second).UnixMilli(), v: map[string]float64{"cum:budget_refusals": 1}})
	got := health(&Snapshot{WAL: &WAL{Bytes: 10, Budget: 100, BudgetRefusals: 5}}, h, now)
	if len(got) != 1 || got[0].Severity != "critical" {
		t.Fatalf("recent refusals: %+v", got)
	}
}

func TestHandler(t *testing.T) {
	h := &fakeHost{s: Snapshot{Node: "n1", Role: "edge", Streams: []Stream{{Name: "a.b",
		Recent: []Row{{Offset: 1, Value: []byte("hello")}, {Offset: 2, Value: []byte{0, 1, 2}}}}}}}
	c, _ := newTest(h)
	c.Sample()
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for path, ctype := range map[string]string{"/": "text/html", "/console/app.js": "text/javascript", "/console/app.css": "text/css"} {
		res, err := http.Get(srv.URL + path)
		if err != nil || res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) {
			t.Fatalf("%s: %v %v", path, err, res)
		}
		res.Body.Close()
	}
	res, err := http.Get(srv.URL + "/console/api")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m Model
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	rec := m.Streams[0].Recent
	if len(rec) != 2 || rec[0].Offset != 2 || rec[0].Encoding != "hex" || rec[0].Value != "000102" || rec[1].Value != "hello" {
		t.Fatalf("recent rows (newest first, text or hex): %+v", rec)
	}
}

// TestReadmittedShown: records re-admitted after a fence are a figure of
// the overview and a banner, from the first sample on.
func TestReadmittedShown(t *testing.T) {
	c, _ := newTest(&fakeHost{s: Snapshot{Node: "n1", Role: "edge", Uplink: &Uplink{Commits: 1, Readmitted: 4}}})
	c.Sample()
	m := c.Model()
	if m.Overview.RecordsReadmitted != 4 {
		t.Fatalf("overview %+v", m.Overview)
	}
	found := false
	for _, a := range m.Health {
		found = found || a.ID == "records_readmitted" && strings.Contains(a.Title, "4 records")
	}
	if !found {
		t.Fatalf("alerts %+v", m.Health)
	}
}

// TestDeadLetterCard: a dead-letter table's card gets its latest dead
// letters with their reasons, and the page draws them instead of "No
// message since this node started".
func TestDeadLetterCard(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	h := &fakeHost{s: Snapshot{Node: "n1", Role: "edge", Streams: []Stream{{Name: "factory.telemetry_dlq",
		DeadLetters: []DeadLetter{{Partition: 0, Offset: 7, At: at, Error: "type conflict: field c is a long column (the table's type, which it keeps) and 21.5 is not a whole number"}}}}}}
	c, _ := newTest(h)
	c.Sample()
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/console/api")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m Model
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	dl := m.Streams[0].DeadLetters
	if len(dl) != 1 || dl[0].Offset != 7 || !dl[0].At.Equal(at) || !strings.Contains(dl[0].Error, "21.5 is not a whole number") {
		t.Fatalf("dead letters %+v", dl)
	}
	js, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), "s.dead_letters.map") || !strings.Contains(string(js), "Latest dead letters, with why") {
		t.Error("app.js does not draw dead_letters")
	}
}

// TestWALGroupChart: the group-commit chart counts whole writes: ten
// commits of one write each are a median of 1, not the 0.50 that
// interpolating in the first bucket gives.
func TestWALGroupChart(t *testing.T) {
	g := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "g", Buckets: prometheus.ExponentialBuckets(1, 2, 14)})
	host := &fakeHost{s: Snapshot{Node: "n1", Latency: Histograms("wal_group", g)}}
	c, clk := newTest(host)
	c.Sample()
	for range 10 {
		g.Observe(1)
	}
	host.s.Latency = Histograms("wal_group", g)
	clk.t = clk.t.Add(time.Second)
	c.Sample()
	ch := chart(c.Model(), "wal_group")
	if !strings.Contains(ch.Title, "WAL writes sharing one fsync") {
		t.Errorf("title %q", ch.Title)
	}
	for _, s := range ch.Series {
		if s.Key == "lat:wal_group:p50" {
			if v := s.V[len(s.V)-1]; v == nil || *v != 1 {
				t.Fatalf("median %v, want 1", v)
			}
			return
		}
	}
	t.Fatalf("no median series: %+v", ch.Series)
}
